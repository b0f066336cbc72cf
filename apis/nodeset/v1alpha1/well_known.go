package v1alpha1

import "time"

// Labels, annotations, taints and finalizers that nodeset puts on core v1 Nodes.
// Keys under the nodeset.dev/ prefix are reserved: tenants cannot set them.
const (
	// ReservedKeyPrefix is the prefix of every key nodeset owns.
	ReservedKeyPrefix = "nodeset.dev/"

	// LabelNodeSetNamespace is the namespace of the NodeSet a Node belongs to.
	LabelNodeSetNamespace = "nodeset.dev/nodeset-namespace"
	// LabelNodeSet is the name of the NodeSet a Node belongs to.
	LabelNodeSet = "nodeset.dev/nodeset"
	// LabelNodeClass is the NodeClass a Node's machine is made from. A Node that
	// carries only this label is a static node: provisioned, but owned by no NodeSet.
	LabelNodeClass = "nodeset.dev/nodeclass"
	// LabelTemplateHash is the hash of the effective template a Node was made from.
	LabelTemplateHash = "nodeset.dev/template-hash"
	// LabelTenant marks and taints the Nodes of Dedicated classes with the tenant namespace.
	LabelTenant = "nodeset.dev/tenant"
	// LabelTenantRestricted is on the Nodes of Dedicated classes too, with
	// the tenant namespace as its value. Its prefix is one the
	// NodeRestriction admission plugin keeps from every kubelet, so unlike
	// LabelTenant no Node's own credentials can put it on or change it:
	// tenants' pods select this one. It never reaches a kubelet's
	// --node-labels, which it would refuse.
	LabelTenantRestricted = "node-restriction.kubernetes.io/nodeset-tenant"
	// LabelSeal is on every Node nodeset makes or adopts: a hash of the
	// namespace, NodeSet and NodeClass it made the Node for (the labels
	// above). No kubelet can add, change or remove it (its prefix is one
	// the NodeRestriction admission plugin keeps from kubelets), so a Node
	// whose nodeset labels no longer match its seal was relabelled by its
	// kubelet: it is no Node of any NodeSet or class until nodeset has put
	// its labels back. It never reaches a kubelet's --node-labels.
	LabelSeal = "node-restriction.kubernetes.io/nodeset-owner"
	// SealNone is the seal the node controller gives a Node that holds
	// nodeset's finalizer and claims a NodeClass by its labels, but that
	// nodeset never sealed and that was made after the class's
	// status.sealedSince: a kubelet registered it. It also gives it to a
	// lone Node's request that the kubelet-node-claims admission policy did
	// not guard (any kubelet could have made it). It matches no labels,
	// so the Node belongs to no NodeSet or class, and its kubelet cannot
	// take it off.
	SealNone = "none"
	// LabelAccelerator is on every Node whose machine has accelerators (a
	// GPU resource in its capacity), with the resource's name ("/" as "-")
	// as its value. cluster-autoscaler reads a Ready Node with this label
	// and no accelerator allocatable yet as still starting (its GPU label).
	LabelAccelerator = "nodeset.dev/accelerator"

	// FinalizerTermination holds a Node until its machine has been drained and deprovisioned.
	FinalizerTermination = "nodeset.dev/termination"
	// FinalizerGroup holds a NodeSet of a group driver until the node
	// controller has deleted its cloud group.
	FinalizerGroup = "nodeset.dev/group"
	// AnnotationGroup on a Node of a group driver is the cloud group its
	// machine belongs to, so the machine can be terminated in that group even
	// after its NodeSet is gone.
	AnnotationGroup = "nodeset.dev/group"
	// AnnotationRemediated marks a Node deleted because it was unhealthy or
	// never registered; such Nodes count toward the remediation cap until gone.
	AnnotationRemediated = "nodeset.dev/remediated"
	// AnnotationDrainFinished records on a deleted Node that its drain finished
	// (or gave up), so the machine goes next, also after a restart.
	AnnotationDrainFinished = "nodeset.dev/drain-finished"
	// TaintUnregistered keeps pods off a Node until its kubelet reports Ready.
	TaintUnregistered = "nodeset.dev/unregistered"

	// AnnotationRestartedAt in a NodeSet's spec.template.annotations is when
	// kubectl nodeset rollout restart asked for new nodes: a new value is a
	// new template, so the set's strategy replaces every node. The one key
	// under nodeset.dev/ a tenant may set.
	AnnotationRestartedAt = "nodeset.dev/restartedAt"
	// AnnotationDeleteNode marks a Node to be removed first on the next scale-down.
	AnnotationDeleteNode = "nodeset.dev/delete-node"
	// AnnotationDeleteNodes on a NodeSet lists, comma-separated, Nodes of the
	// set to remove first. cluster-autoscaler's DeleteNodes writes it together
	// with the lowered spec.replicas in one update, so the count and the
	// victims can never be applied apart. Names leave the list once their
	// Nodes are gone.
	AnnotationDeleteNodes = "nodeset.dev/delete-nodes"
	// AnnotationProvisioningError on a Node is the last error its driver gave
	// creating the machine, as "<code>: <message>"; code OutOfCapacity means
	// the cloud has no capacity of that kind. Removed once the machine exists.
	AnnotationProvisioningError = "nodeset.dev/provisioning-error"
	// AnnotationDriver records the driver of a Node's machine (a NodeSet's
	// Nodes carry it from their creation), so the machine can be
	// deprovisioned even after its NodeClass is gone.
	AnnotationDriver = "nodeset.dev/driver"
	// AnnotationMachineCreated is when the driver first reported the machine
	// created (RFC 3339); the registration timeout counts from it.
	AnnotationMachineCreated = "nodeset.dev/machine-created"
	// AnnotationDrainStarted is when the Node's drain started (RFC 3339).
	AnnotationDrainStarted = "nodeset.dev/drain-started"
	// AnnotationInterruption records on a Node that AWS announced the end of
	// its instance (JSON: kind, notice, deadline, and the lifecycle action
	// to complete once drained), so that a restart neither loses the notice
	// nor drains twice.
	AnnotationInterruption = "nodeset.dev/interruption"
	// AnnotationReplace marks a Node whose replacement comes up first: its
	// group is raised by one, and once the replacement is Ready the Node is
	// deleted (a rebalance recommendation with policy ReplaceFirst).
	AnnotationReplace = "nodeset.dev/replace"
	// TaintRebalanceRecommended keeps new pods off a Node whose spot
	// instance AWS recommends rebalancing (effect PreferNoSchedule).
	TaintRebalanceRecommended = "nodeset.dev/rebalance-recommended"
	// AnnotationSkipDrain on a pod, set to "true", makes drains neither evict
	// it nor wait for it: it ends with its node's machine. For pods that must
	// not be evicted and can be lost (a node-local cache, a test probe).
	AnnotationSkipDrain = "nodeset.dev/skip-drain"
)

// Driver names served by this project. Any other name is an out-of-tree driver
// configured through spec.parameters.
const (
	DriverSimulated     = "simulated"
	DriverDockerMachine = "docker-machine"
	DriverEKSASG        = "eks-asg"
	DriverEKSManaged    = "eks-managed"
)

// Condition types.
const (
	// NodeClassValid: the driver accepted the class's configuration.
	NodeClassValid = "Valid"

	// NodeSetAccepted: the class exists, the namespace may use it, overrides stay
	// within its boundary and its limits are respected.
	NodeSetAccepted = "Accepted"
	// NodeSetAvailable: at least replicas - maxUnavailable nodes are Ready.
	NodeSetAvailable = "Available"
	// NodeSetProgressing: nodes are being created, replaced or removed.
	NodeSetProgressing = "Progressing"
	// NodeSetReplicaFailure: a node could not be created or its machine not provisioned.
	NodeSetReplicaFailure = "ReplicaFailure"
	// NodeSetRemediationAllowed: False while more of the set's nodes are
	// unhealthy than the node controller replaces automatically. Written by
	// the node controller.
	NodeSetRemediationAllowed = "RemediationAllowed"
)

// ReasonLimitExceeded is the Accepted=False reason of a NodeSet that asks
// for more nodes than its class's limits allow. Unlike the other reasons it
// does not stop the set: its Nodes are capped at the limit.
const ReasonLimitExceeded = "LimitExceeded"

// ReasonNamespaceNotAllowed is the Accepted=False reason of a NodeSet whose
// namespace its class's spec.allowedNamespaces does not admit, and of the
// Event of a node controller that holds such a set's cloud group.
const ReasonNamespaceNotAllowed = "NamespaceNotAllowed"

// NodeConditionDraining is the Node condition the node controller keeps
// while it drains a deleted Node, and ReasonDrainTimedOut its reason (and
// the Event's) once the drain's timeout has passed.
const (
	NodeConditionDraining = "Draining"
	ReasonDrainTimedOut   = "DrainTimedOut"
)

// ReasonNodeClassNotFound, ReasonNodeClassNotValidated and
// ReasonDriverNotServed are the Accepted=False reasons that give no verdict
// on the set: its class is missing (a NodeSet new with its class has that
// for a moment), waits for the node controller serving its driver to
// validate its generation, or has no node controller serving its driver
// (none has claimed it for the NodeSetController's --driver-claim-grace,
// or its claim went unrenewed for the claim's own duration).
const (
	ReasonNodeClassNotFound     = "NodeClassNotFound"
	ReasonNodeClassNotValidated = "NodeClassNotValidated"
	ReasonDriverNotServed       = "DriverNotServed"
)

// A node controller claims each driver it serves with a Lease in its
// leader-election namespace, named DriverClaimLeasePrefix + the driver's
// name, which it renews every DriverClaimRenewal while it serves the
// driver, declaring DriverClaimDuration. The NodeSetController reads these
// claims to tell a class that waits for validation from a driver nobody
// serves.
const DriverClaimLeasePrefix = "nodeset-driver-"

const (
	// DriverClaimRenewal is how often a node controller renews its claims.
	DriverClaimRenewal = 30 * time.Second
	// DriverClaimDuration is how long a claim lasts unrenewed (the Lease's
	// leaseDurationSeconds), as its readers measure it by their own clocks.
	DriverClaimDuration = 2 * time.Minute
)

// DriverClaimLease is the name of the Lease that claims driver.
func DriverClaimLease(driver string) string { return DriverClaimLeasePrefix + driver }

// FinalizerInUse holds a NodeClass while NodeSets use it, as
// kubernetes.io/pvc-protection holds a PersistentVolumeClaim in use.
const FinalizerInUse = "nodeset.dev/in-use"
