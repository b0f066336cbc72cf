package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ndc,categories=nodeset-all
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=".spec.driver"
// +kubebuilder:printcolumn:name="Tenancy",type=string,JSONPath=".spec.tenancy"
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=".status.conditions[?(@.type==\"Valid\")].status"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=".status.driverKind",priority=1
// +kubebuilder:printcolumn:name="Max-Nodes",type=integer,JSONPath=".spec.limits.maxNodes",priority=1
// +kubebuilder:printcolumn:name="Max-Per-Namespace",type=integer,JSONPath=".spec.limits.maxNodesPerNamespace",priority=1
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name must be at most 63 characters: it is the value of the nodeset.dev/nodeclass label on the class's Nodes"

// NodeClass is an admin's catalogue entry for nodes, as a StorageClass is for
// volumes: which driver makes the machines, with which cloud settings, which
// namespaces may use it and which settings tenants may change.
type NodeClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is how machines of this class are made and who may use them.
	Spec NodeClassSpec `json:"spec"`
	// status is what the driver made of the spec.
	// +optional
	Status NodeClassStatus `json:"status,omitempty"`
}

// NodeClassSpec describes a class of nodes.
//
// +kubebuilder:validation:XValidation:rule="[has(self.simulated), has(self.dockerMachine), has(self.eksAutoscalingGroup), has(self.eksManagedNodeGroup), has(self.parameters)].filter(x, x).size() == 1",message="exactly one driver section (simulated, dockerMachine, eksAutoscalingGroup, eksManagedNodeGroup or parameters) must be set"
// +kubebuilder:validation:XValidation:rule="self.driver != 'simulated' || has(self.simulated)",message="spec.simulated must be set when spec.driver is simulated"
// +kubebuilder:validation:XValidation:rule="self.driver != 'docker-machine' || has(self.dockerMachine)",message="spec.dockerMachine must be set when spec.driver is docker-machine"
// +kubebuilder:validation:XValidation:rule="self.driver != 'eks-asg' || has(self.eksAutoscalingGroup)",message="spec.eksAutoscalingGroup must be set when spec.driver is eks-asg"
// +kubebuilder:validation:XValidation:rule="self.driver != 'eks-managed' || has(self.eksManagedNodeGroup)",message="spec.eksManagedNodeGroup must be set when spec.driver is eks-managed"
// +kubebuilder:validation:XValidation:rule="!has(self.parameters) || !(self.driver in ['simulated', 'docker-machine', 'eks-asg', 'eks-managed'])",message="spec.parameters is only for out-of-tree drivers; built-in drivers use their typed section"
// +kubebuilder:validation:XValidation:rule="!has(self.simulated) || self.driver == 'simulated'",message="spec.simulated is only for spec.driver simulated; an out-of-tree driver is configured through spec.parameters"
// +kubebuilder:validation:XValidation:rule="!has(self.dockerMachine) || self.driver == 'docker-machine'",message="spec.dockerMachine is only for spec.driver docker-machine; an out-of-tree driver is configured through spec.parameters"
// +kubebuilder:validation:XValidation:rule="!has(self.eksAutoscalingGroup) || self.driver == 'eks-asg'",message="spec.eksAutoscalingGroup is only for spec.driver eks-asg; an out-of-tree driver is configured through spec.parameters"
// +kubebuilder:validation:XValidation:rule="!has(self.eksManagedNodeGroup) || self.driver == 'eks-managed'",message="spec.eksManagedNodeGroup is only for spec.driver eks-managed; an out-of-tree driver is configured through spec.parameters"
// +kubebuilder:validation:XValidation:rule="!has(self.dockerMachine) || has(self.dockerMachine.driverName)",message="spec.dockerMachine.driverName is required"
// +kubebuilder:validation:XValidation:rule="!has(self.eksAutoscalingGroup) || (has(self.eksAutoscalingGroup.clusterName) && has(self.eksAutoscalingGroup.region))",message="spec.eksAutoscalingGroup.clusterName and spec.eksAutoscalingGroup.region are required"
// +kubebuilder:validation:XValidation:rule="!has(self.eksManagedNodeGroup) || (has(self.eksManagedNodeGroup.clusterName) && has(self.eksManagedNodeGroup.region) && has(self.eksManagedNodeGroup.nodeRole))",message="spec.eksManagedNodeGroup.clusterName, region and nodeRole are required"
type NodeClassSpec struct {
	// driver names the driver that provisions machines of this class: simulated,
	// docker-machine, eks-asg, eks-managed, or the name an out-of-tree node
	// controller serves. It must match the one driver section that is set.
	// It cannot change: the machines of the class's Nodes are the driver's
	// that made them, and only it can remove them.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.driver cannot change: the machines of the class's Nodes are the driver's that made them, and only it can remove them; create a NodeClass under another name"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Driver string `json:"driver"`

	DriverSections `json:",inline"`

	// parameters configures an out-of-tree driver. It is passed to that driver as is.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Parameters *runtime.RawExtension `json:"parameters,omitempty"`

	// credentialsSecretRef names the Secret that holds the driver's credentials.
	// Only the node controller reads it; its contents never appear in a NodeSet,
	// a Node, an event, a log line or a status.
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`

	// nodeTemplate holds labels, annotations and taints stamped on every Node of this class.
	// +optional
	NodeTemplate NodeTemplate `json:"nodeTemplate,omitzero"`

	// tenancy is Shared (the default: any allowed namespace's pods may run on the
	// nodes) or Dedicated (each NodeSet's nodes carry the label and taint
	// nodeset.dev/tenant=<namespace>:NoSchedule and the label
	// node-restriction.kubernetes.io/nodeset-tenant=<namespace>, so only that
	// namespace's pods run there: they tolerate the taint and select the
	// node-restriction.kubernetes.io label, which no kubelet can add, change or
	// remove when kube-apiserver runs the NodeRestriction admission plugin).
	// +optional
	// +kubebuilder:default=Shared
	Tenancy Tenancy `json:"tenancy,omitempty"`

	// allowedNamespaces says which namespaces may create NodeSets of this class.
	// Absent means all namespaces.
	// +optional
	AllowedNamespaces *AllowedNamespaces `json:"allowedNamespaces,omitempty"`

	// tenantOverrides lists the fields of the driver section, by their JSON name
	// (for example instanceType or blockDevices), that a NodeSet may set. Every
	// other field is restricted: the class's value always wins. Nested fields
	// are dotted (mixedInstances.instanceTypes); a key of a map follows the
	// map's name, dots and slashes included (tags.example.com/owner).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z][a-zA-Z0-9]*(\.[a-zA-Z][a-zA-Z0-9]*)*(\.[-a-zA-Z0-9_./:@+=]+)?$`
	TenantOverrides []string `json:"tenantOverrides,omitempty"`

	// limits caps how many nodes this class may have.
	// +optional
	Limits *NodeClassLimits `json:"limits,omitempty"`

	// registrationTimeout is how long a machine may take from launch until its
	// kubelet reports Ready before it is replaced: from 1s to 24h. Defaults to 15m.
	// +optional
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(\\\\.[0-9]{1,9})?(ns|us|ms|s|m|h)){1,4}$') && duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="spec.registrationTimeout must be a duration of at least 1s and at most 24h, such as 10m"
	RegistrationTimeout *metav1.Duration `json:"registrationTimeout,omitempty"`

	// drain says how nodes of this class are drained before their machines are removed.
	// +optional
	Drain *DrainPolicy `json:"drain,omitempty"`
}

// DriverSections are the typed configurations of the built-in drivers. A
// NodeClass sets exactly one, matching spec.driver; a NodeSet may set fields of
// the same section where its class allows it.
type DriverSections struct {
	// simulated configures the simulated driver: machines are simulated kubelets
	// inside the node controller.
	// A NodeClass sets it when spec.driver is simulated; a NodeSet sets only the
	// fields its NodeClass lists in spec.tenantOverrides, to override the
	// class's values.
	// +optional
	Simulated *SimulatedMachine `json:"simulated,omitempty"`
	// dockerMachine configures the docker-machine driver: machines are made by a
	// docker-machine-driver-<name> plugin.
	// A NodeClass sets it when spec.driver is docker-machine; a NodeSet sets only the
	// fields its NodeClass lists in spec.tenantOverrides, to override the
	// class's values.
	// +optional
	DockerMachine *DockerMachine `json:"dockerMachine,omitempty"`
	// eksAutoscalingGroup configures the eks-asg driver: each NodeSet is one EC2
	// Auto Scaling group of self-managed EKS workers.
	// A NodeClass sets it when spec.driver is eks-asg; a NodeSet sets only the
	// fields its NodeClass lists in spec.tenantOverrides, to override the
	// class's values.
	// +optional
	EKSAutoscalingGroup *EKSAutoscalingGroup `json:"eksAutoscalingGroup,omitempty"`
	// eksManagedNodeGroup configures the eks-managed driver: each NodeSet is one
	// EKS managed node group.
	// A NodeClass sets it when spec.driver is eks-managed; a NodeSet sets only the
	// fields its NodeClass lists in spec.tenantOverrides, to override the
	// class's values.
	// +optional
	EKSManagedNodeGroup *EKSManagedNodeGroup `json:"eksManagedNodeGroup,omitempty"`
}

// SecretReference names a Secret in a namespace.
type SecretReference struct {
	// namespace of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// Tenancy says whether nodes of a class are shared between namespaces.
// +kubebuilder:validation:Enum=Shared;Dedicated
type Tenancy string

const (
	// TenancyShared nodes run any allowed namespace's pods.
	TenancyShared Tenancy = "Shared"
	// TenancyDedicated nodes are labelled and tainted for one namespace, and
	// labelled node-restriction.kubernetes.io/nodeset-tenant, which its pods select.
	TenancyDedicated Tenancy = "Dedicated"
)

// NamespacesFrom says how AllowedNamespaces picks namespaces.
// +kubebuilder:validation:Enum=All;List;Selector
type NamespacesFrom string

const (
	// NamespacesFromAll allows every namespace.
	NamespacesFromAll NamespacesFrom = "All"
	// NamespacesFromList allows the namespaces named in the list.
	NamespacesFromList NamespacesFrom = "List"
	// NamespacesFromSelector allows the namespaces whose labels match the selector.
	NamespacesFromSelector NamespacesFrom = "Selector"
)

// AllowedNamespaces says which namespaces may use a class, in the style of
// Gateway API's allowedRoutes.
//
// +kubebuilder:validation:XValidation:rule="self.from != 'List' || (has(self.namespaces) && size(self.namespaces) > 0)",message="spec.allowedNamespaces.namespaces must list at least one namespace when from is List"
// +kubebuilder:validation:XValidation:rule="self.from == 'List' || !has(self.namespaces)",message="spec.allowedNamespaces.namespaces may only be set when from is List"
// +kubebuilder:validation:XValidation:rule="self.from != 'Selector' || has(self.selector)",message="spec.allowedNamespaces.selector is required when from is Selector"
// +kubebuilder:validation:XValidation:rule="self.from == 'Selector' || !has(self.selector)",message="spec.allowedNamespaces.selector may only be set when from is Selector"
// +kubebuilder:validation:XValidation:rule="!has(self.selector) || !has(self.selector.matchExpressions) || self.selector.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.allowedNamespaces.selector.matchExpressions: operator must be In, NotIn, Exists or DoesNotExist"
// +kubebuilder:validation:XValidation:rule="!has(self.selector) || !has(self.selector.matchExpressions) || self.selector.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="spec.allowedNamespaces.selector.matchExpressions: values must be non-empty when the operator is In or NotIn"
// +kubebuilder:validation:XValidation:rule="!has(self.selector) || !has(self.selector.matchExpressions) || self.selector.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="spec.allowedNamespaces.selector.matchExpressions: values must be empty when the operator is Exists or DoesNotExist"
type AllowedNamespaces struct {
	// from is All (every namespace), List (the namespaces in namespaces) or
	// Selector (the namespaces whose labels match selector).
	// +optional
	// +kubebuilder:default=All
	From NamespacesFrom `json:"from,omitempty"`
	// namespaces lists the allowed namespaces when from is List.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces,omitempty"`
	// selector matches the labels of allowed namespaces when from is Selector.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// NodeClassLimits caps the number of nodes of a class.
type NodeClassLimits struct {
	// maxNodes is the most nodes the class may have across all namespaces.
	// Absent means no limit; 0 means NodeSets of the class get no node.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	MaxNodes *int32 `json:"maxNodes,omitempty"`
	// maxNodesPerNamespace is the most nodes of the class one namespace may have.
	// Absent means no limit; 0 means no namespace gets a node of the class.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	MaxNodesPerNamespace *int32 `json:"maxNodesPerNamespace,omitempty"`
}

// DrainTimeoutAction says what happens to a node whose drain did not finish in time.
// +kubebuilder:validation:Enum=Deprovision;Cordon
type DrainTimeoutAction string

const (
	// DrainTimeoutDeprovision removes the machine anyway once the drain timed out.
	DrainTimeoutDeprovision DrainTimeoutAction = "Deprovision"
	// DrainTimeoutCordon leaves the node cordoned, with a condition, for a human.
	DrainTimeoutCordon DrainTimeoutAction = "Cordon"
)

// DrainPolicy says how nodes are drained before their machines are removed.
type DrainPolicy struct {
	// timeout bounds the drain: evictions blocked by PodDisruptionBudgets are
	// retried until then, at most 24h. Defaults to 10m.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(\\\\.[0-9]{1,9})?(ns|us|ms|s|m|h)){1,4}$') && duration(self) <= duration('24h')",message="spec.drain.timeout must be a non-negative duration of at most 24h, such as 10m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// onTimeout is Deprovision (the default: remove the machine anyway) or Cordon
	// (leave the node cordoned with a DrainTimedOut condition for a human).
	// +optional
	// +kubebuilder:default=Deprovision
	OnTimeout DrainTimeoutAction `json:"onTimeout,omitempty"`
	// waitForVolumeDetach waits, within the timeout, until no volume is attached
	// to the node before its machine is removed.
	// +optional
	WaitForVolumeDetach bool `json:"waitForVolumeDetach,omitempty"`
}

// NodeClassStatus is what the driver made of a NodeClass.
type NodeClassStatus struct {
	// observedGeneration is the generation the status was computed for.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Valid says whether the driver accepted the configuration, and why not.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// capacity is what one node of the class offers, as its driver reports it
	// (absent when the driver cannot know before a machine exists).
	// cluster-autoscaler uses it to scale a NodeSet of the class up from zero.
	// +optional
	Capacity *NodeCapacity `json:"capacity,omitempty"`
	// driverKind is what the driver serving the class makes, as the node
	// controller serving it says: Machine (one machine per Node; the nodeset
	// controller creates the Nodes) or Group (a cloud group that names its
	// machines; the node controller creates their Nodes and keeps the group's
	// size). Written with the Valid condition.
	// +optional
	DriverKind DriverKind `json:"driverKind,omitempty"`
	// sealedSince is when nodeset began to seal every Node of the class it
	// makes or adopts (the node-restriction.kubernetes.io/nodeset-owner
	// label): the class's creation for a class made since, or, for a class
	// an earlier release served, ten minutes after the node controller
	// first served it, so that Nodes an earlier release still makes during
	// an upgrade are sealed as they are labelled. A Node of the class that
	// holds nodeset's finalizer without a seal, made after this time or
	// found once it is past, is none of nodeset's (a kubelet may register
	// or relabel its own Node with any nodeset.dev/ label and add the
	// finalizer): it belongs to no NodeSet or class, and the node
	// controller marks it with the seal "none". Set once, by the node
	// controller serving the class.
	// +optional
	SealedSince *metav1.Time `json:"sealedSince,omitempty"`
}

// DriverKind is the kind of a driver.
// +kubebuilder:validation:Enum=Machine;Group
type DriverKind string

const (
	// DriverKindMachine makes one machine per Node, named by the controller.
	DriverKindMachine DriverKind = "Machine"
	// DriverKindGroup runs a cloud group per NodeSet; the cloud names the machines.
	DriverKindGroup DriverKind = "Group"
)

// NodeCapacity is what one node offers.
type NodeCapacity struct {
	// resources is the node's capacity: cpu, memory, pods, ephemeral-storage and any extended resource.
	// Each quantity is at most 1Pi.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, type(self[k]) == int ? (self[k] >= 0 && self[k] <= 1125899906842624) : (self[k].matches('^[+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?$') && quantity(self[k]).compareTo(quantity('1Pi')) <= 0))",message="resources: each quantity must be non-negative and at most 1Pi, with a decimal exponent of at most two digits, such as 4, 500m, 8Gi or 1e3"
	Resources corev1.ResourceList `json:"resources,omitempty"`
	// allocatable is what pods can use of it. Each quantity is at most 1Pi.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, type(self[k]) == int ? (self[k] >= 0 && self[k] <= 1125899906842624) : (self[k].matches('^[+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?$') && quantity(self[k]).compareTo(quantity('1Pi')) <= 0))",message="allocatable: each quantity must be non-negative and at most 1Pi, with a decimal exponent of at most two digits, such as 4, 500m, 8Gi or 1e3"
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`
	// labels the node will carry from its machine (instance type, zone, architecture, ...).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Labels map[string]string `json:"labels,omitempty"`
	// taints the node will carry from its machine, besides the class's and the NodeSet's.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Taints []corev1.Taint `json:"taints,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// NodeClassList is a list of NodeClasses.
type NodeClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the NodeClasses.
	Items []NodeClass `json:"items"`
}
