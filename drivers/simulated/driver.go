// Package simulated is the embedded default driver: its machines are
// simulated kubelets inside the node controller (see pkg/kubeletsim), so the
// whole system runs on one machine with no cloud. The driver itself only
// keeps the registry of machines; it never touches the Kubernetes API.
package simulated

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// ProviderIDPrefix starts the spec.providerID of every simulated machine.
const ProviderIDPrefix = "simulated:///"

// ProviderID is the spec.providerID of the simulated machine named name.
func ProviderID(name string) string { return ProviderIDPrefix + name }

// Machine is a simulated machine as the simulated kubelet sees it.
type Machine struct {
	// Name is the Node's name.
	Name string
	// BootAt is when the machine's kubelet comes up.
	BootAt time.Time
	// Fails is true for a machine that never registers.
	Fails bool
	// Capacity is what the kubelet reports. Its maps are shared by the
	// machines of the same section: read only.
	Capacity drivers.Capacity
	// CreatedAt is when the machine was created.
	CreatedAt time.Time
	// Owner of the machine.
	Owner drivers.Owner
	// Class is the name of the machine's NodeClass.
	Class string
}

// Driver keeps the simulated machines of one node controller.
type Driver struct {
	now      func() time.Time
	mu       sync.Mutex
	machines map[string]*Machine
	changed  chan struct{}
	// capacities are the machines' capacities by section (see capacityOf).
	capacities map[string]drivers.Capacity
	// perClass counts the machines of each class, for maxMachines.
	perClass map[string]int32
}

var _ drivers.MachineDriver = (*Driver)(nil)

// New returns an empty simulated driver. now is the clock; time.Now when nil.
func New(now func() time.Time) *Driver {
	if now == nil {
		now = time.Now
	}
	return &Driver{now: now, machines: map[string]*Machine{}, changed: make(chan struct{}, 1), capacities: map[string]drivers.Capacity{},
		perClass: map[string]int32{}}
}

// capacityOf is EffectiveCapacity of spec, one value for every machine of
// the same section: a copy for each machine was 16 MB of the node
// controller's heap at 10,000 machines, memory no real driver's machines
// take there. The caller holds d.mu.
func (d *Driver) capacityOf(spec *nodesetv1alpha1.SimulatedMachine) drivers.Capacity {
	var key []byte
	if spec != nil {
		// What EffectiveCapacity reads; a map's keys marshal sorted.
		key, _ = json.Marshal([]any{spec.Capacity, spec.InstanceType, spec.Labels})
	}
	c, ok := d.capacities[string(key)]
	if !ok {
		c = EffectiveCapacity(spec)
		d.capacities[string(key)] = c
	}
	return c
}

// Name is "simulated".
func (d *Driver) Name() string { return nodesetv1alpha1.DriverSimulated }

// Validate checks the simulated section.
func (d *Driver) Validate(_ context.Context, class drivers.Class) error {
	spec := class.Spec.Simulated
	if spec == nil {
		return drivers.InvalidConfiguration("spec.simulated", "is required for driver simulated")
	}
	for name, q := range spec.Capacity {
		if q.Sign() < 0 {
			return drivers.InvalidConfiguration("spec.simulated.capacity."+string(name), "must not be negative, got %s", q.String())
		}
	}
	if p := spec.FailurePercent; p != nil && (*p < 0 || *p > 100) {
		return drivers.InvalidConfiguration("spec.simulated.failurePercent", "must be between 0 and 100, got %d", *p)
	}
	if m := spec.MaxMachines; m != nil && *m < 0 {
		return drivers.InvalidConfiguration("spec.simulated.maxMachines", "must not be negative, got %d", *m)
	}
	return nil
}

// Capacity is the declared capacity with defaults filled in.
func (d *Driver) Capacity(_ context.Context, class drivers.Class) (drivers.Capacity, error) {
	if class.Spec.Simulated == nil {
		return drivers.Capacity{}, drivers.InvalidConfiguration("spec.simulated", "is required for driver simulated")
	}
	return EffectiveCapacity(class.Spec.Simulated), nil
}

// EffectiveCapacity is what a machine of this section reports: the declared
// capacity over the defaults (2 cpu, 8Gi memory, 110 pods, 100Gi
// ephemeral-storage), and the well-known labels a kubelet sets.
func EffectiveCapacity(spec *nodesetv1alpha1.SimulatedMachine) drivers.Capacity {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("2"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	instanceType := "simulated"
	labels := map[string]string{}
	if spec != nil {
		for name, q := range spec.Capacity {
			resources[name] = q.DeepCopy()
		}
		if spec.InstanceType != "" {
			instanceType = spec.InstanceType
		}
		for k, v := range spec.Labels {
			if !nodeRestricted(k) {
				labels[k] = v
			}
		}
	}
	labels[corev1.LabelInstanceTypeStable] = instanceType
	labels[corev1.LabelOSStable] = "linux"
	labels[corev1.LabelArchStable] = "amd64"
	return drivers.Capacity{Resources: resources, Allocatable: resources.DeepCopy(), Labels: labels}
}

// nodeRestricted reports whether a label key is in the
// node-restriction.kubernetes.io domain, which the NodeRestriction
// admission plugin keeps from every kubelet: controllers alone set it, so
// the simulated kubelet does not either.
func nodeRestricted(key string) bool {
	return nodeutil.InDomain(key, corev1.LabelNamespaceNodeRestriction)
}

// fails decides, from the machine's name, whether it never registers: a
// replacement with another name draws again.
func fails(name string, percent *int32) bool {
	if percent == nil || *percent <= 0 {
		return false
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int32(h.Sum32()%100) < *percent
}

// Create starts a simulated machine named after the Node; idempotent. A
// machine past the class's maxMachines is not made: the error wraps
// drivers.ErrOutOfCapacity.
func (d *Driver) Create(_ context.Context, m drivers.Machine) (string, error) {
	if m.Class.Spec.Simulated == nil {
		return "", drivers.InvalidConfiguration("spec.simulated", "is required for driver simulated")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.machines[m.Name]; !ok {
		if room := m.Class.Spec.Simulated.MaxMachines; room != nil && d.perClass[m.Class.Name] >= *room {
			return "", fmt.Errorf("the simulated cloud has no room for another machine of class %s (maxMachines %d, machines %d): %w",
				m.Class.Name, *room, d.perClass[m.Class.Name], drivers.ErrOutOfCapacity)
		}
		now := d.now()
		var delay time.Duration
		if bd := m.Class.Spec.Simulated.BootDelay; bd != nil {
			delay = bd.Duration
		}
		d.machines[m.Name] = &Machine{
			Name:      m.Name,
			BootAt:    now.Add(delay),
			Fails:     fails(m.Name, m.Class.Spec.Simulated.FailurePercent),
			Capacity:  d.capacityOf(m.Class.Spec.Simulated),
			CreatedAt: now,
			Owner:     m.Owner,
			Class:     m.Class.Name,
		}
		d.perClass[m.Class.Name]++
		d.notify()
	}
	return ProviderID(m.Name), nil
}

// Adopt registers a machine that existed before the node controller
// restarted (rebuilt from its Node); it is up at once unless it fails.
func (d *Driver) Adopt(name string, createdAt time.Time, class drivers.Class, owner drivers.Owner) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.machines[name]; ok {
		return
	}
	var failurePercent *int32
	if class.Spec.Simulated != nil {
		failurePercent = class.Spec.Simulated.FailurePercent
	}
	d.machines[name] = &Machine{
		Name:      name,
		BootAt:    createdAt,
		Fails:     fails(name, failurePercent),
		Capacity:  d.capacityOf(class.Spec.Simulated),
		CreatedAt: createdAt,
		Owner:     owner,
		Class:     class.Name,
	}
	d.perClass[class.Name]++
	d.notify()
}

// Delete stops the machine; nil when it is gone or never existed.
func (d *Driver) Delete(_ context.Context, _ drivers.Class, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.machines[name]; ok {
		delete(d.machines, name)
		if d.perClass[m.Class]--; d.perClass[m.Class] <= 0 {
			delete(d.perClass, m.Class)
		}
		d.notify()
	}
	return nil
}

// Get returns the machine's status or an error wrapping drivers.ErrNotFound.
func (d *Driver) Get(_ context.Context, _ drivers.Class, name string) (drivers.MachineStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.machines[name]
	if !ok {
		return drivers.MachineStatus{}, fmt.Errorf("simulated machine %q: %w", name, drivers.ErrNotFound)
	}
	return d.status(m), nil
}

// List returns every simulated machine, sorted by name.
func (d *Driver) List(context.Context) ([]drivers.MachineStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]drivers.MachineStatus, 0, len(d.machines))
	for _, m := range d.machines {
		out = append(out, d.status(m))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (d *Driver) status(m *Machine) drivers.MachineStatus {
	s := drivers.MachineStatus{Name: m.Name, ProviderID: ProviderID(m.Name), State: drivers.MachineRunning,
		Owner: m.Owner, CreatedAt: m.CreatedAt.Unix()}
	switch {
	case m.Fails:
		s.State, s.Message = drivers.MachinePending, "simulated registration failure: this machine never registers"
	case d.now().Before(m.BootAt):
		s.State = drivers.MachinePending
	}
	return s
}

// Machines returns a copy of every machine, for the simulated kubelet.
func (d *Driver) Machines() []Machine {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Machine, 0, len(d.machines))
	for _, m := range d.machines {
		out = append(out, *m)
	}
	return out
}

// Machine returns a copy of one machine.
func (d *Driver) Machine(name string) (Machine, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.machines[name]
	if !ok {
		return Machine{}, false
	}
	return *m, true
}

// Changed is signalled (without blocking) whenever a machine is added or removed.
func (d *Driver) Changed() <-chan struct{} { return d.changed }

func (d *Driver) notify() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// NameFromProviderID returns the machine name of a simulated provider ID.
func NameFromProviderID(providerID string) (string, error) {
	name, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	if !ok || name == "" {
		return "", errors.New("not a simulated provider ID: " + providerID)
	}
	return name, nil
}
