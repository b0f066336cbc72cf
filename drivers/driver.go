// Package drivers holds the two contracts between the node controller and the
// things that make machines: MachineDriver (one machine per Node, named by the
// controller) and GroupDriver (a cloud group that owns and names its machines).
//
// Drivers never touch the Kubernetes API: they return errors, and the
// controllers turn them into conditions, events and retries. Every call is
// idempotent and keyed by a name the controller chose, so a crash at any point
// neither leaks nor duplicates a machine.
package drivers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// Owner identifies the NodeSet a machine or group belongs to. Drivers tag
// every cloud resource with it so orphans can be found and attributed.
type Owner struct {
	// Cluster is the name of the cluster the node controller serves.
	Cluster string
	// Namespace and Name of the NodeSet; empty for a static node.
	Namespace string
	Name      string
	// UID of the NodeSet; empty for a static node.
	UID types.UID
}

// Matches reports whether a cloud resource tagged with owner o belongs to
// the NodeSet want: the same cluster, namespace and name, and the same UID
// unless the resource records none (made before UIDs were recorded). A
// group's name that fits whole comes from the cluster, namespace and name
// alone, so a resource under the name the controller chose may be
// another's: the NodeSet's predecessor under the same name, or one made by
// hand.
func (o Owner) Matches(want Owner) bool {
	return o.Cluster == want.Cluster && o.Namespace == want.Namespace && o.Name == want.Name && (o.UID == "" || o.UID == want.UID)
}

// NamedTo names the NodeSet o in text shown to whoever acts for viewer
// (status, Events and errors a tenant reads): a NodeSet of viewer's own
// cluster and namespace, or any when viewer is a static Node's (an
// admin's), by namespace, name and UID; another namespace's or another
// cluster's only as such, for a tenant must not learn another tenant's
// objects from its own set's messages. The resource's owner tags still
// name it for the admin.
func (o Owner) NamedTo(viewer Owner) string {
	switch {
	case o.Namespace == "" && o.Name == "":
		return "a static Node"
	case viewer.Namespace != "" && o.Cluster != viewer.Cluster:
		return "a NodeSet of another cluster"
	case viewer.Namespace != "" && o.Namespace != viewer.Namespace:
		return "a NodeSet of another namespace"
	}
	name := "NodeSet " + o.Namespace + "/" + o.Name
	if o.UID != "" {
		name += " (UID " + string(o.UID) + ")"
	}
	if o.Cluster != "" {
		name += " of cluster " + o.Cluster
	}
	return name
}

// Class is the effective configuration of a machine: the NodeClass's driver
// section with the NodeSet's permitted overrides merged in.
type Class struct {
	// Name of the NodeClass.
	Name string
	// Spec is the class spec with overrides applied to its driver section.
	Spec nodesetv1alpha1.NodeClassSpec
	// Credentials are the data of the class's credentials Secret, if any. A
	// driver must never log, return or persist them anywhere but the cloud call.
	Credentials map[string][]byte
}

// Machine is what a machine driver is asked to create: the Node is chosen
// first, and the machine takes its name as hostname.
type Machine struct {
	// Name is the Node's name; the machine's hostname and the idempotency key.
	Name string
	// NodeUID is the Node's UID; empty when the caller does not know it. A
	// machine made for another UID under the name is not this Node's: its
	// Node was deleted without it.
	NodeUID types.UID
	// Owner of the machine.
	Owner Owner
	// Class is the effective configuration.
	Class Class
	// Labels and Taints are what the controller puts on the Node; drivers may
	// pass them to the kubelet, but the controller applies them regardless.
	Labels map[string]string
	Taints []corev1.Taint
}

// MachineState is the lifecycle state of a machine as its driver sees it.
type MachineState string

const (
	// MachinePending: being created or booting.
	MachinePending MachineState = "Pending"
	// MachineRunning: up; its kubelet may or may not have registered.
	MachineRunning MachineState = "Running"
	// MachineStopping: being shut down or deleted.
	MachineStopping MachineState = "Stopping"
	// MachineFailed: will not come up; the controller replaces it.
	MachineFailed MachineState = "Failed"
)

// MachineStatus is what a driver knows about one machine.
type MachineStatus struct {
	// Name is the machine's name: the Node name for machine drivers, the name
	// the cloud gave it for group drivers.
	Name string
	// ProviderID is the Node's spec.providerID for this machine.
	ProviderID string
	// State of the machine.
	State MachineState
	// Owner recorded on the machine (from its tags or its name).
	Owner Owner
	// NodeUID is the UID of the Node the machine was made for, when the
	// driver recorded it (Machine.NodeUID); empty otherwise. A Node of the
	// machine's name with another UID does not account for it.
	NodeUID types.UID
	// Class is the name of the NodeClass the machine was made with, when
	// the driver recorded it (machine drivers); empty otherwise. Orphan
	// collection removes the machine with that class, as it is now.
	Class string
	// CreatedAt is when the machine was created, as Unix seconds; 0 if unknown.
	CreatedAt int64
	// TemplateHash is the template hash of the configuration the machine was
	// made from, when the driver knows it (group drivers: from the launch
	// template version); empty otherwise.
	TemplateHash string
	// Message explains a Failed state.
	Message string
	// Labels and Taints are what a group driver knows its machine's Node
	// carries and nodeset must put there itself: its instance type, zone
	// and region, and the labels and taints of the group's configuration.
	// A kubelet applies its --node-labels and --register-with-taints only
	// to a Node it creates, and nodeset makes each machine's Node first; a
	// cloud controller manager labels only Nodes it initializes (those the
	// kubelet registered with its uninitialized taint).
	Labels map[string]string
	Taints []corev1.Taint
}

// Capacity is what a node of a class offers, so cluster-autoscaler can scale a
// NodeSet from zero.
type Capacity struct {
	// Resources are the node's capacity (cpu, memory, pods, ephemeral-storage, ...).
	Resources corev1.ResourceList
	// Allocatable is what pods can use; Resources when empty.
	Allocatable corev1.ResourceList
	// Labels the node will carry (instance type, zone, architecture, ...).
	Labels map[string]string
	// Taints the node will carry, besides the template's.
	Taints []corev1.Taint
}

// Driver is what every driver implements.
type Driver interface {
	// Name is the value of NodeClass spec.driver this driver serves.
	Name() string
	// Validate checks a class's effective configuration without side effects.
	// A non-nil error is reported as Valid=False (NodeClass) or Accepted=False
	// (NodeSet) with its message, but one that says the driver could not
	// answer now (CouldNotAnswer): that is Valid=Unknown, tried again.
	// Required.
	Validate(ctx context.Context, class Class) error
	// Capacity reports what one node of the class offers. Required; may return
	// ErrNotImplemented when the driver cannot know before a machine exists.
	Capacity(ctx context.Context, class Class) (Capacity, error)
}

// CloudValidator is implemented by drivers that can check a class against
// the cloud with read-only calls (the image, the subnets, the cluster exist;
// the credentials work). The node controller calls it after Validate, with
// the class's credentials, and reports an error wrapping
// ErrInvalidConfiguration as Valid=False; other errors are retried.
type CloudValidator interface {
	ValidateCloud(ctx context.Context, class Class) error
}

// RegistrationObserver is implemented by machine drivers that keep something
// only until a machine's kubelet has registered, such as its bootstrap token.
// The node controller calls Registered (idempotent) when the Node is first
// Ready, before it lifts the startup taint.
type RegistrationObserver interface {
	Registered(ctx context.Context, class Class, name string) error
}

// MachineDriver makes one machine per Node. The controller picks the Node name
// first; the machine takes it as hostname.
type MachineDriver interface {
	Driver
	// Create makes the machine, or finds the one already made under this name,
	// and returns its provider ID. Calling it again for a machine that exists
	// returns the same provider ID and creates nothing. Required.
	Create(ctx context.Context, machine Machine) (providerID string, err error)
	// Delete removes the machine with this name. It returns nil once the
	// machine is gone, including when it never existed, and ErrInProgress while
	// a deletion it started has not finished. Required.
	Delete(ctx context.Context, class Class, name string) error
	// Get returns the machine with this name, or an error wrapping ErrNotFound. Required.
	Get(ctx context.Context, class Class, name string) (MachineStatus, error)
	// List returns every machine this driver made for the cluster, for orphan
	// collection. It must fail, not return a partial list, when it cannot see
	// everything. Required.
	List(ctx context.Context) ([]MachineStatus, error)
}

// Group is the desired state of the cloud group behind one NodeSet.
type Group struct {
	// Name is the group's deterministic name, chosen by the controller.
	Name string
	// Owner of the group.
	Owner Owner
	// Class is the effective configuration.
	Class Class
	// Replicas is the size the group should have.
	Replicas int32
	// MinReplicas and MaxReplicas bound the group.
	MinReplicas, MaxReplicas int32
	// TemplateHash of the effective configuration; a change rolls the group.
	TemplateHash string
	// Labels and Taints of the NodeSet's nodes.
	Labels map[string]string
	Taints []corev1.Taint
	// ManagedRollout is true when the NodeSet's strategy is Managed: a
	// driver with a native rolling update (EKS managed node groups) applies
	// version changes with it. Otherwise such changes wait.
	ManagedRollout bool
	// UpdateID is the driver-native update last reported for the group
	// (the NodeSet's status.group.updateID), so that a restarted controller
	// goes on tracking it.
	UpdateID string
}

// GroupStatus is what a group driver knows about one group.
type GroupStatus struct {
	// Name of the group.
	Name string
	// DesiredSize is the cloud's desired capacity.
	DesiredSize int32
	// State is the cloud's state of the group (ACTIVE, UPDATING, ...).
	State string
	// Message explains a degraded state.
	Message string
	// Machines are the group's instances.
	Machines []MachineStatus
	// UpdateID and UpdateStatus describe a driver-native rolling update.
	UpdateID, UpdateStatus string
	// TemplateHash is the Group.TemplateHash the group's configuration was
	// last brought in step with, for a driver that applies a NodeSet's
	// changes to the group itself (eks-managed); "" when it does not say.
	TemplateHash string
	// Owner recorded on the group (from its tags).
	Owner Owner
	// CreatedAt is when the group was created, as Unix seconds; 0 if unknown.
	CreatedAt int64
	// Class, filled by ListGroups, is enough of the configuration (region,
	// credentials) to pass to DeleteGroup for this group when no NodeClass
	// names it any more.
	Class Class
}

// GroupName is the deterministic name of the cloud group of a NodeSet:
// readable, at most 119 characters, and unique per cluster, namespace and
// name. A name that fits whole ends in 32 bits of a hash of the three;
// its text tells NodeSets apart but for where dashes split it, which
// leaves nothing to search. One cut to fit ends in 64 bits of a hash of
// the three and the NodeSet's UID: the cut leaves the same text for many
// NodeSets (namespaces ml and ml-research, long names), 32 bits were a
// search of moments for a tenant to find a NodeSet name of its own whose
// group would be another tenant's, made first to keep that NodeSet from
// ever having one, and no one knows a UID before its NodeSet exists.
func GroupName(owner Owner) string { return GroupNameWithin(owner, 119) }

// GroupNameWithin is GroupName in at most limit (≥ 26) characters.
func GroupNameWithin(owner Owner, limit int) string {
	base := fmt.Sprintf("nodeset-%s-%s-%s", owner.Cluster, owner.Namespace, owner.Name)
	if len(base) <= limit-9 {
		return formerGroupName(owner, limit)
	}
	sum := sha256.Sum256([]byte(owner.Cluster + "/" + owner.Namespace + "/" + owner.Name + "/" + string(owner.UID)))
	return base[:limit-17] + "-" + hex.EncodeToString(sum[:])[:16]
}

// formerGroupName is the name GroupNameWithin gave every group before a
// name cut to fit ended in a hash of the UID: the name cut to limit-9
// characters and 32 bits of a hash of cluster, namespace and name. It is
// still the name of every group whose name fits whole.
func formerGroupName(owner Owner, limit int) string {
	sum := sha256.Sum256([]byte(owner.Cluster + "/" + owner.Namespace + "/" + owner.Name))
	base := fmt.Sprintf("nodeset-%s-%s-%s", owner.Cluster, owner.Namespace, owner.Name)
	if len(base) > limit-9 {
		base = base[:limit-9]
	}
	return base + "-" + hex.EncodeToString(sum[:])[:8]
}

// KeepGroupName is the name of the owner's group in driver d, given the
// name recorded for it once the group was made (the NodeSet's
// status.group.name with a desiredSize): the recorded name when it is the
// owner's former name (formerGroupName, cut to the driver's limit), so a
// group made before names cut to fit covered the UID keeps its name and
// is found; NameGroup otherwise. A recorded name that is neither is never
// used: no record makes a NodeSet act on a group of another's name.
func KeepGroupName(d GroupDriver, owner Owner, recorded string) string {
	if name := NameGroup(d, owner); recorded != name && recorded != FormerGroupName(d, owner) {
		return name
	}
	return recorded
}

// FormerGroupName is the name the owner's group in driver d had before
// names cut to fit covered the UID (formerGroupName); the same as
// NameGroup for a name that fits whole.
func FormerGroupName(d GroupDriver, owner Owner) string {
	return formerGroupName(owner, len(NameGroup(d, owner)))
}

// GroupNamer is implemented by group drivers whose cloud allows shorter
// names than GroupName makes.
type GroupNamer interface {
	GroupName(owner Owner) string
}

// NameGroup is the name of the owner's group in driver d.
func NameGroup(d GroupDriver, owner Owner) string {
	if namer, ok := d.(GroupNamer); ok {
		return namer.GroupName(owner)
	}
	return GroupName(owner)
}

// GroupDriver runs a cloud group per NodeSet. The cloud names the machines;
// the node controller creates a Node for each once it exists.
type GroupDriver interface {
	Driver
	// EnsureGroup creates or updates the group. It raises the group's desired
	// size to group.Replicas but never lowers it: lowering happens only in
	// TerminateMachine, for a machine the controller chose and drained. Required.
	EnsureGroup(ctx context.Context, group Group) (GroupStatus, error)
	// DescribeGroup returns the group and its machines, or ErrNotFound. Required.
	DescribeGroup(ctx context.Context, class Class, name string) (GroupStatus, error)
	// TerminateMachine terminates one machine and lowers the group's desired
	// size by one in the same cloud call, so the cloud never replaces it and
	// never picks another victim. Terminating a machine already gone returns nil. Required.
	TerminateMachine(ctx context.Context, class Class, group, providerID string) error
	// DeleteGroup removes the group and everything the driver made for it;
	// nil once gone, ErrInProgress while deleting. Required.
	DeleteGroup(ctx context.Context, class Class, name string) error
	// ListGroups returns every group this driver made for the cluster, for
	// orphan collection; it fails rather than return a partial list. Required.
	ListGroups(ctx context.Context) ([]GroupStatus, error)
}

// Errors drivers wrap so the controllers can react to them.
var (
	// ErrNotFound: the machine or group does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInProgress: the operation was started and has not finished; call again.
	ErrInProgress = errors.New("in progress")
	// ErrOutOfCapacity: the cloud has no capacity for the request; back off.
	ErrOutOfCapacity = errors.New("out of capacity")
	// ErrInvalidConfiguration: the class's configuration cannot work; retrying will not help.
	ErrInvalidConfiguration = errors.New("invalid configuration")
	// ErrThrottled: the cloud throttled the call; retry later.
	ErrThrottled = errors.New("throttled")
	// ErrNotImplemented: the driver does not offer this optional call.
	ErrNotImplemented = errors.New("not implemented")
	// ErrUnavailable: the driver, its plugin or its cloud could not answer
	// now (a plugin that crashed or hung); no verdict on the machine or
	// the class, tried again.
	ErrUnavailable = errors.New("unavailable")
)

// CouldNotAnswer reports whether err says the driver could not answer now
// (unavailable, throttled, out of time), which is no verdict on what it was
// asked about.
func CouldNotAnswer(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrThrottled) || errors.Is(err, context.DeadlineExceeded)
}

// InvalidConfiguration returns an error wrapping ErrInvalidConfiguration that
// names the field and the rule.
func InvalidConfiguration(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfiguration, field, fmt.Sprintf(format, args...))
}

// RequireSection returns a class's driver section, or an error naming the
// field when the class has none.
func RequireSection[T any](section *T, field, driver string) (*T, error) {
	if section == nil {
		return nil, InvalidConfiguration(field, "is required for driver %s", driver)
	}
	return section, nil
}

// Registry holds the drivers a node controller serves, by name.
type Registry map[string]Driver

// Machine returns the machine driver serving name, if any.
func (r Registry) Machine(name string) (MachineDriver, bool) {
	d, ok := r[name].(MachineDriver)
	return d, ok
}

// Group returns the group driver serving name, if any.
func (r Registry) Group(name string) (GroupDriver, bool) {
	d, ok := r[name].(GroupDriver)
	return d, ok
}

// InterruptionKind says what a cloud announced about a machine.
type InterruptionKind string

const (
	// InterruptionSpot: the cloud takes a spot machine back at the deadline.
	InterruptionSpot InterruptionKind = "SpotInterruption"
	// InterruptionRebalance: a spot machine is at elevated risk of
	// interruption; nothing is taken yet.
	InterruptionRebalance InterruptionKind = "RebalanceRecommendation"
	// InterruptionScheduled: maintenance stops, retires or reboots the
	// machine at the deadline.
	InterruptionScheduled InterruptionKind = "ScheduledChange"
	// InterruptionStateChange: the machine is stopping or terminating now.
	InterruptionStateChange InterruptionKind = "StateChange"
	// InterruptionTermination: the cloud group terminates the machine and
	// waits (a lifecycle action) until it is let go or the wait times out.
	InterruptionTermination InterruptionKind = "TerminationLifecycleAction"
	// InterruptionUnparseable: a message that is none of the above; it is
	// acknowledged and counted, never retried.
	InterruptionUnparseable InterruptionKind = "Unparseable"
)

// LifecycleAction is a cloud group's wait for a machine it terminates.
type LifecycleAction struct {
	Group     string `json:"group"`
	Hook      string `json:"hook"`
	Token     string `json:"token"`
	MachineID string `json:"machineID"`
	// Region is the cloud region of the group, as the notice names it;
	// empty: the class's. A group may be in another region than its class
	// names now (a class whose region changed under a running NodeSet).
	Region string `json:"region,omitempty"`
	// HeartbeatTimeout is how long the cloud waits without a heartbeat.
	HeartbeatTimeout time.Duration `json:"heartbeatTimeout,omitempty"`
}

// Interruption is one notice from a cloud about its machines.
type Interruption struct {
	// Receipt acknowledges the notice (AckInterruptions).
	Receipt string
	// ID is the cloud's id of the notice, for logs.
	ID   string
	Kind InterruptionKind
	// MachineIDs are the machines concerned: the last element of their
	// Nodes' spec.providerID.
	MachineIDs []string
	// Notice is when the cloud sent it; Deadline when the machine goes
	// (zero: not announced).
	Notice, Deadline time.Time
	// Received is when the queue first delivered the notice, to any
	// receiver (zero: not known). The queue sets it, not the sender, and it
	// stays the same when the notice comes again.
	Received time.Time
	// Lifecycle is the action to complete once the machine is drained
	// (InterruptionTermination).
	Lifecycle *LifecycleAction
	// Detail is what the notice says besides (a state, an event code), or
	// why it could not be read.
	Detail string
}

// InterruptionSource is implemented by group drivers whose cloud announces
// the end of machines on a queue the class names. Optional. Every call but
// InterruptionQueue has a side effect, so the node controller makes it only
// while it leads.
type InterruptionSource interface {
	// InterruptionQueue names the queue of the class; "" when it has none.
	InterruptionQueue(class Class) string
	// ReceiveInterruptions waits (long polls) for notices on the class's
	// queue; they come back after a while unless acknowledged.
	ReceiveInterruptions(ctx context.Context, class Class) ([]Interruption, error)
	// AckInterruptions removes handled notices from the queue, in one call.
	AckInterruptions(ctx context.Context, class Class, receipts []string) error
	// CompleteLifecycleAction lets the cloud go on terminating a machine it
	// waits for; an action that is already over is not an error.
	CompleteLifecycleAction(ctx context.Context, class Class, action LifecycleAction) error
	// RecordLifecycleHeartbeat makes the cloud wait longer for a drain; an
	// action that is already over is not an error.
	RecordLifecycleHeartbeat(ctx context.Context, class Class, action LifecycleAction) error
	// LifecycleDeadline is when the drain of a machine of class, whose
	// lifecycle action was announced at notice, must end: the class's own
	// drain time, within what the cloud waits with heartbeats of the
	// action's timeout. Classes of different drain times may share a
	// queue, so the class is the machine's, not the queue's.
	LifecycleDeadline(class Class, notice time.Time, heartbeat time.Duration) time.Time
	// LifecycleHeartbeatTimeout is the heartbeat timeout of a lifecycle
	// action of a machine of class: heartbeat, as the notice's hook has it,
	// when known (not 0), else the class's own. A queue is read with one of
	// the classes that share it, so the class is the machine's.
	LifecycleHeartbeatTimeout(class Class, heartbeat time.Duration) time.Duration
}

// InterruptionRedelivery is an InterruptionSource whose queue can give a
// notice it delivered again sooner than the queue's visibility timeout: a
// notice whose drain goes on through its deliveries (a lifecycle action
// heartbeaten on each) must come back before the cloud stops waiting.
type InterruptionRedelivery interface {
	// RedeliverInterruption has the notice of receipt, received on the
	// class's queue and not acknowledged, come again within after; a
	// queue that gives it again sooner anyway is left as it is.
	RedeliverInterruption(ctx context.Context, class Class, receipt string, after time.Duration) error
}
