package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// +genclient
// +genclient:method=GetScale,verb=get,subresource=scale,result=k8s.io/api/autoscaling/v1.Scale
// +genclient:method=UpdateScale,verb=update,subresource=scale,input=k8s.io/api/autoscaling/v1.Scale,result=k8s.io/api/autoscaling/v1.Scale
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=nds,categories=nodeset-all
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=".spec.nodeClassName"
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=".spec.replicas"
// +kubebuilder:printcolumn:name="Current",type=integer,JSONPath=".status.replicas"
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=".status.readyReplicas"
// +kubebuilder:printcolumn:name="Up-To-Date",type=integer,JSONPath=".status.updatedReplicas"
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=".status.availableReplicas"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=".spec.strategy.type",priority=1
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=".status.group.name",priority=1
// +kubebuilder:printcolumn:name="Selector",type=string,JSONPath=".status.selector",priority=1
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name must be at most 63 characters: it is the value of the nodeset.dev/nodeset label on the set's Nodes"

// NodeSet is a tenant's request for nodes, as a PersistentVolumeClaim is for
// storage: "N nodes of class X, with these labels and taints". The controllers
// make one core v1 Node, and one machine, per replica.
type NodeSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the nodes the tenant wants.
	Spec NodeSetSpec `json:"spec"`
	// status is the nodes the set has.
	// +optional
	Status NodeSetStatus `json:"status,omitempty"`
}

// NodeSetSpec is the nodes a tenant wants.
//
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || !has(self.replicas) || (self.replicas >= self.autoscaling.minReplicas && self.replicas <= self.autoscaling.maxReplicas)",message="spec.replicas must be within spec.autoscaling.minReplicas and spec.autoscaling.maxReplicas",messageExpression="'spec.replicas must be within spec.autoscaling.minReplicas and spec.autoscaling.maxReplicas: replicas is %d, the bounds are %d and %d'.format([self.replicas, self.autoscaling.minReplicas, self.autoscaling.maxReplicas])",fieldPath=".replicas"
// +kubebuilder:validation:XValidation:rule="!has(self.progressDeadlineSeconds) || !has(self.minReadySeconds) || self.progressDeadlineSeconds > self.minReadySeconds",message="spec.progressDeadlineSeconds must be greater than spec.minReadySeconds",messageExpression="'spec.progressDeadlineSeconds must be greater than spec.minReadySeconds: progressDeadlineSeconds is %d, minReadySeconds is %d'.format([self.progressDeadlineSeconds, self.minReadySeconds])",fieldPath=".progressDeadlineSeconds"
// +kubebuilder:validation:XValidation:rule="[has(self.simulated), has(self.dockerMachine), has(self.eksAutoscalingGroup), has(self.eksManagedNodeGroup), has(self.parameters)].filter(x, x).size() <= 1",message="at most one driver section (simulated, dockerMachine, eksAutoscalingGroup, eksManagedNodeGroup or parameters) may be overridden"
type NodeSetSpec struct {
	// nodeClassName is the NodeClass the nodes are made from. It cannot be changed.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.nodeClassName is immutable; create a new NodeSet to change class"
	NodeClassName string `json:"nodeClassName"`

	// replicas is the number of nodes wanted. Defaults to 1. It is the /scale
	// subresource's spec.replicas, so kubectl scale works.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	Replicas *int32 `json:"replicas,omitempty"`

	// autoscaling, when present, lets cluster-autoscaler scale the set between
	// minReplicas and maxReplicas.
	// +optional
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`

	// template holds the labels, annotations and taints the tenant wants on its
	// nodes, on top of the class's. Keys under nodeset.dev/ are reserved, but
	// for the annotation nodeset.dev/restartedAt (kubectl nodeset rollout restart).
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.labels) || self.labels.all(k, !k.startsWith('nodeset.dev/'))",message="spec.template.labels: keys under nodeset.dev/ are reserved for nodeset"
	// +kubebuilder:validation:XValidation:rule="!has(self.annotations) || self.annotations.all(k, !k.startsWith('nodeset.dev/') || k == 'nodeset.dev/restartedAt')",message="spec.template.annotations: keys under nodeset.dev/ are reserved for nodeset, but for nodeset.dev/restartedAt"
	// +kubebuilder:validation:XValidation:rule="!has(self.taints) || self.taints.all(t, !t.key.startsWith('nodeset.dev/'))",message="spec.template.taints: keys under nodeset.dev/ are reserved for nodeset"
	Template NodeTemplate `json:"template,omitzero"`

	// Driver-section overrides: fields of the class's driver section that the
	// class lists in tenantOverrides. Every field is optional.
	DriverSections `json:",inline"`

	// parameters overrides an out-of-tree driver's parameters, where the class allows it.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Parameters *runtime.RawExtension `json:"parameters,omitempty"`

	// strategy says how nodes are replaced when the effective template changes.
	// +optional
	// +kubebuilder:default={type: RollingUpdate}
	Strategy NodeSetStrategy `json:"strategy,omitempty"`

	// deletePolicy says which node goes first on scale-down: Newest (the
	// default), Oldest or Random. Nodes marked with the nodeset.dev/delete-node
	// annotation, then unregistered and unhealthy nodes, always go first.
	// +optional
	// +kubebuilder:default=Newest
	DeletePolicy DeletePolicy `json:"deletePolicy,omitempty"`

	// minReadySeconds is how long a node must be Ready to count as available.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`

	// paused stops a rollout where it is; scaling still happens.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// progressDeadlineSeconds is how long the set may go without progress
	// while it rolls out, scales up or waits for its nodes to become Ready
	// and available, before its Progressing condition turns False with
	// reason ProgressDeadlineExceeded (as a Deployment's does). Progress is
	// a new generation, a node becoming Ready or available, or an outdated
	// node going. Unset, there is no deadline. It must be greater than
	// minReadySeconds.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`
}

// Autoscaling bounds cluster-autoscaler's scaling of a NodeSet.
//
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="spec.autoscaling.minReplicas must be less than or equal to spec.autoscaling.maxReplicas",messageExpression="'spec.autoscaling.minReplicas must be less than or equal to spec.autoscaling.maxReplicas: minReplicas is %d, maxReplicas is %d'.format([self.minReplicas, self.maxReplicas])"
type Autoscaling struct {
	// minReplicas is the fewest nodes cluster-autoscaler may leave.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	MinReplicas int32 `json:"minReplicas"`
	// maxReplicas is the most nodes cluster-autoscaler may make.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	MaxReplicas int32 `json:"maxReplicas"`
}

// NodeTemplate is the labels, annotations and taints put on Nodes.
type NodeTemplate struct {
	// labels put on every Node. Keys and values follow the rules of Kubernetes
	// labels; a NodeSet whose labels break them is not Accepted. The schema
	// bounds their lengths (keys 317, values 63 characters); the syntax is
	// checked by the webhook and the controllers.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 317 && self[k].size() <= 63)",message="labels: keys must be at most 317 characters (a 253-character prefix, '/' and a 63-character name) and values at most 63"
	Labels map[string]string `json:"labels,omitempty"`
	// annotations put on every Node. Keys and values together are at most
	// 256 KiB, the limit of a Node's annotations.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.map(k, k.size() + self[k].size()).sum() <= 262144",message="annotations: keys and values together must be at most 256 KiB (262144 characters)"
	Annotations map[string]string `json:"annotations,omitempty"`
	// taints put on every Node, at most one per key and effect. Server-side
	// apply merges them by key and effect, so each applier owns its own.
	// +optional
	// +listType=map
	// +listMapKey=key
	// +listMapKey=effect
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(t, self.exists_one(u, u.key == t.key && u.effect == t.effect))",message="taints: each key and effect may appear only once"
	Taints []Taint `json:"taints,omitempty"`
}

// Taint keeps pods that do not tolerate it off a Node.
type Taint struct {
	// key of the taint.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self.indexOf('/') <= 253",message="key: the prefix before '/' must be at most 253 characters"
	Key string `json:"key"`
	// value of the taint.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`
	Value string `json:"value,omitempty"`
	// effect is NoSchedule, PreferNoSchedule or NoExecute.
	// +required
	// +kubebuilder:validation:Enum=NoSchedule;PreferNoSchedule;NoExecute
	Effect string `json:"effect"`
}

// NodeSetStrategyType names how a NodeSet replaces nodes.
// +kubebuilder:validation:Enum=RollingUpdate;OnDelete;Managed
type NodeSetStrategyType string

const (
	// RollingUpdateStrategy replaces outdated nodes within maxSurge and maxUnavailable.
	RollingUpdateStrategy NodeSetStrategyType = "RollingUpdate"
	// OnDeleteStrategy gives new nodes the new template and leaves old ones until deleted.
	OnDeleteStrategy NodeSetStrategyType = "OnDelete"
	// ManagedStrategy lets the group driver roll (for example an EKS managed node group update).
	ManagedStrategy NodeSetStrategyType = "Managed"
)

// NodeSetStrategy says how nodes are replaced when the effective template changes.
//
// +kubebuilder:validation:XValidation:rule="self.type == 'RollingUpdate' || !has(self.rollingUpdate)",message="spec.strategy.rollingUpdate may only be set when spec.strategy.type is RollingUpdate"
type NodeSetStrategy struct {
	// type is RollingUpdate (the default), OnDelete or Managed.
	// +optional
	// +kubebuilder:default=RollingUpdate
	Type NodeSetStrategyType `json:"type,omitempty"`
	// rollingUpdate bounds a RollingUpdate. Absent means maxSurge 1, maxUnavailable 0.
	// +optional
	RollingUpdate *RollingUpdateNodeSet `json:"rollingUpdate,omitempty"`
}

// RollingUpdateNodeSet bounds a rolling update, with Deployment semantics.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.maxSurge) && has(self.maxUnavailable) && (self.maxSurge == 0 || self.maxSurge == '0%') && (self.maxUnavailable == 0 || self.maxUnavailable == '0%'))",message="spec.strategy.rollingUpdate: maxSurge and maxUnavailable cannot both be zero"
type RollingUpdateNodeSet struct {
	// maxSurge is how many nodes, or what percentage of replicas (rounded up),
	// may exist above replicas during a rollout. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 0 && self <= 2147483647) : self.matches('^(100|[1-9]?[0-9])%$')",message="spec.strategy.rollingUpdate.maxSurge must be a non-negative integer of at most 2147483647 or a percentage from 0% to 100%"
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
	// maxUnavailable is how many nodes, or what percentage of replicas (rounded
	// down), may be unavailable during a rollout. Defaults to 0.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 0 && self <= 2147483647) : self.matches('^(100|[1-9]?[0-9])%$')",message="spec.strategy.rollingUpdate.maxUnavailable must be a non-negative integer of at most 2147483647 or a percentage from 0% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// DeletePolicy says which node goes first on scale-down.
// +kubebuilder:validation:Enum=Random;Newest;Oldest
type DeletePolicy string

const (
	// DeletePolicyRandom removes any node.
	DeletePolicyRandom DeletePolicy = "Random"
	// DeletePolicyNewest removes the most recently created node first.
	DeletePolicyNewest DeletePolicy = "Newest"
	// DeletePolicyOldest removes the oldest node first.
	DeletePolicyOldest DeletePolicy = "Oldest"
)

// NodeSetStatus is the nodes a NodeSet has.
type NodeSetStatus struct {
	// observedGeneration is the generation this status was computed for.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// observedClassGeneration is the generation of the set's NodeClass this
	// status was computed from (its verdict, templateHash and conditions):
	// an edit of the class gives the set no new generation, and until this
	// reaches the class's metadata.generation the set does not show it.
	// It stays behind while a node controller validates a new generation
	// of a class that was valid (for up to 30 seconds; then the set is
	// Accepted=False, NodeClassNotValidated, until the verdict).
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedClassGeneration int64 `json:"observedClassGeneration,omitempty"`
	// replicas is the number of Nodes the set has, in any state but deleting.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	Replicas int32 `json:"replicas"`
	// readyReplicas is the number of Nodes whose kubelet reports Ready.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	ReadyReplicas int32 `json:"readyReplicas"`
	// availableReplicas is the number of Nodes Ready for at least minReadySeconds.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	AvailableReplicas int32 `json:"availableReplicas"`
	// updatedReplicas is the number of Nodes made from the current template.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	UpdatedReplicas int32 `json:"updatedReplicas"`
	// selector is the label selector of the set's Nodes, for the /scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`
	// templateHash is the hash of the current effective template; Nodes labelled
	// with another hash are outdated.
	// +optional
	TemplateHash string `json:"templateHash,omitempty"`
	// group is the state of the cloud group behind the set, for group drivers.
	// +optional
	Group *GroupStatus `json:"group,omitempty"`
	// capacity is what one new node of the set offers, from its effective
	// configuration (the class's with the set's overrides), as the driver
	// serving the class reports it; written by the node controller.
	// cluster-autoscaler's template node for the set is built from it.
	// +optional
	Capacity *TemplateCapacity `json:"capacity,omitempty"`
	// lastProgressTime is when the set last made progress (see
	// spec.progressDeadlineSeconds) while it rolls out, scales up or waits
	// for its nodes; unset while it does none of these.
	// +optional
	LastProgressTime *metav1.Time `json:"lastProgressTime,omitempty"`
	// conditions: Accepted, Available, Progressing and ReplicaFailure.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TemplateCapacity is what one node of a given template offers.
type TemplateCapacity struct {
	// templateHash is the template the capacity was computed for; a
	// capacity of another hash than the set's current one is stale.
	// +kubebuilder:validation:MaxLength=64
	TemplateHash string `json:"templateHash"`
	NodeCapacity `json:",inline"`
}

// The states of a cloud group's own update (status.group.updateStatus), in
// the words of EKS, whose managed node groups run such updates.
const (
	GroupUpdateStatusInProgress = "InProgress"
	GroupUpdateStatusSuccessful = "Successful"
	GroupUpdateStatusFailed     = "Failed"
	GroupUpdateStatusCancelled  = "Cancelled"
)

// GroupStatus is the state of the cloud group behind a NodeSet.
type GroupStatus struct {
	// name of the group in the cloud.
	// +optional
	Name string `json:"name,omitempty"`
	// state of the group as the cloud reports it, such as ACTIVE or UPDATING.
	// +optional
	State string `json:"state,omitempty"`
	// desiredSize of the group in the cloud.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	DesiredSize *int32 `json:"desiredSize,omitempty"`
	// updateID is the cloud's id of the update in progress or last finished.
	// +optional
	UpdateID string `json:"updateID,omitempty"`
	// updateStatus is the state of that update, such as InProgress or Successful.
	// +optional
	UpdateStatus string `json:"updateStatus,omitempty"`
	// message explains the state, such as a degraded group's health issues.
	// +optional
	Message string `json:"message,omitempty"`
	// templateHash is the NodeSet template the cloud group has taken, for
	// a group driver that applies the set's changes itself (eks-managed:
	// the node group's nodeset.dev/template-hash tag). With strategy
	// Managed, a group not yet at status.templateHash is rolling out.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TemplateHash string `json:"templateHash,omitempty"`
	// refusedTemplateHash is the NodeSet template (status.templateHash)
	// the cloud refused in the last attempt to bring the group in step, as
	// a configuration it will not take (a version above the cluster's, say;
	// message says why): trying again does not help until the NodeClass or
	// the NodeSet changes, which gives another template. Empty when the
	// last attempt was not refused. A Managed rollout waiting for the group
	// to take that template fails (Progressing=False, GroupUpdateFailed).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RefusedTemplateHash string `json:"refusedTemplateHash,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// NodeSetList is a list of NodeSets.
type NodeSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the NodeSets.
	Items []NodeSet `json:"items"`
}
