package simulated

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

func class(mutate func(*nodesetv1alpha1.SimulatedMachine)) drivers.Class {
	spec := &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small", BootDelay: &metav1.Duration{Duration: 5 * time.Second}}
	if mutate != nil {
		mutate(spec)
	}
	return drivers.Class{Name: "sim", Spec: nodesetv1alpha1.NodeClassSpec{Driver: "simulated",
		DriverSections: nodesetv1alpha1.DriverSections{Simulated: spec}}}
}

func TestCreateIsIdempotentAndBoots(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := New(func() time.Time { return now })
	ctx := context.Background()
	id, err := d.Create(ctx, drivers.Machine{Name: "web-abcde", Class: class(nil)})
	require.NoError(t, err)
	assert.Equal(t, "simulated:///web-abcde", id)
	again, err := d.Create(ctx, drivers.Machine{Name: "web-abcde", Class: class(nil)})
	require.NoError(t, err)
	assert.Equal(t, id, again)
	list, err := d.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1, "a second Create must not make a second machine")
	assert.Equal(t, drivers.MachinePending, list[0].State, "booting")

	now = now.Add(5 * time.Second)
	status, err := d.Get(ctx, class(nil), "web-abcde")
	require.NoError(t, err)
	assert.Equal(t, drivers.MachineRunning, status.State)

	require.NoError(t, d.Delete(ctx, class(nil), "web-abcde"))
	require.NoError(t, d.Delete(ctx, class(nil), "web-abcde"), "deleting a gone machine is fine")
	_, err = d.Get(ctx, class(nil), "web-abcde")
	assert.True(t, errors.Is(err, drivers.ErrNotFound))
}

func TestFailurePercent(t *testing.T) {
	tests := []struct {
		percent   int32
		wantFails func(n int) bool
	}{
		{0, func(n int) bool { return n == 0 }},
		{100, func(n int) bool { return n == 200 }},
		{50, func(n int) bool { return n > 50 && n < 150 }},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.percent), func(t *testing.T) {
			d := New(nil)
			c := class(func(s *nodesetv1alpha1.SimulatedMachine) { s.FailurePercent = ptr.To(tt.percent) })
			for i := range 200 {
				_, err := d.Create(context.Background(), drivers.Machine{Name: fmt.Sprintf("m-%d", i), Class: c})
				require.NoError(t, err)
			}
			failing := 0
			for _, m := range d.Machines() {
				if m.Fails {
					failing++
				}
			}
			assert.True(t, tt.wantFails(failing), "%d of 200 fail", failing)
			// Deterministic: the same name decides the same way.
			assert.Equal(t, fails("m-7", ptr.To(tt.percent)), fails("m-7", ptr.To(tt.percent)))
		})
	}
}

func TestAdoptIsUpAtOnce(t *testing.T) {
	d := New(nil)
	owner := drivers.Owner{Cluster: "c", Namespace: "team-a", Name: "web"}
	d.Adopt("old-node", time.Now().Add(-time.Hour), class(nil), owner)
	d.Adopt("old-node", time.Now(), class(nil), drivers.Owner{})
	list, err := d.List(context.Background())
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, drivers.MachineRunning, list[0].State)
	assert.Equal(t, owner, list[0].Owner, "the first adoption holds")
}

func TestValidateAndCapacity(t *testing.T) {
	d := New(nil)
	err := d.Validate(context.Background(), class(func(s *nodesetv1alpha1.SimulatedMachine) {
		s.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}
	}))
	require.Error(t, err)
	assert.True(t, errors.Is(err, drivers.ErrInvalidConfiguration))
	assert.Contains(t, err.Error(), "spec.simulated.capacity.cpu")
	assert.Error(t, d.Validate(context.Background(), drivers.Class{}))

	capacity, err := d.Capacity(context.Background(), class(func(s *nodesetv1alpha1.SimulatedMachine) {
		s.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}
		s.Labels = map[string]string{"example.com/gpu": "none"}
	}))
	require.NoError(t, err)
	assert.Equal(t, "16", capacity.Resources.Cpu().String())
	assert.Equal(t, "8Gi", capacity.Resources.Memory().String(), "defaults fill what is not declared")
	assert.Equal(t, "sim.small", capacity.Labels[corev1.LabelInstanceTypeStable])
	assert.Equal(t, "none", capacity.Labels["example.com/gpu"])
}

func TestNameFromProviderID(t *testing.T) {
	name, err := NameFromProviderID(ProviderID("x-1"))
	require.NoError(t, err)
	assert.Equal(t, "x-1", name)
	_, err = NameFromProviderID("aws:///eu-west-1a/i-123")
	assert.Error(t, err)
}

func TestMachinesReportTheirSectionsCapacity(t *testing.T) {
	d := New(nil)
	ctx := context.Background()
	big := class(func(s *nodesetv1alpha1.SimulatedMachine) {
		s.InstanceType = "sim.big"
		s.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}
	})
	for _, m := range []drivers.Machine{{Name: "a", Class: class(nil)}, {Name: "b", Class: class(nil)}, {Name: "c", Class: big}} {
		_, err := d.Create(ctx, m)
		require.NoError(t, err)
	}
	d.Adopt("d", time.Now(), big, drivers.Owner{})
	got := map[string]Machine{}
	for _, m := range d.Machines() {
		got[m.Name] = m
	}
	for name, want := range map[string]struct{ cpu, instanceType string }{
		"a": {"2", "sim.small"}, "b": {"2", "sim.small"}, "c": {"16", "sim.big"}, "d": {"16", "sim.big"}} {
		cpu := got[name].Capacity.Resources[corev1.ResourceCPU]
		assert.Equal(t, want.cpu, cpu.String(), name)
		assert.Equal(t, want.instanceType, got[name].Capacity.Labels[corev1.LabelInstanceTypeStable], name)
	}
	// A section edited later gives the machines made after it the new capacity.
	bigger := class(func(s *nodesetv1alpha1.SimulatedMachine) {
		s.InstanceType = "sim.big"
		s.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32")}
	})
	_, err := d.Create(ctx, drivers.Machine{Name: "e", Class: bigger})
	require.NoError(t, err)
	for _, m := range d.Machines() {
		if m.Name == "e" {
			cpu := m.Capacity.Resources[corev1.ResourceCPU]
			assert.Equal(t, "32", cpu.String())
		}
	}
}

// TestMaxMachines: a create past the class's room fails as out of
// capacity and makes nothing; the room is the class's, counted over its
// machines whoever owns them, and a deleted or another class's machine
// does not take it. An existing machine is still answered, and an
// adopted one counts.
func TestMaxMachines(t *testing.T) {
	ctx := context.Background()
	d := New(nil)
	scarce := class(func(s *nodesetv1alpha1.SimulatedMachine) { s.MaxMachines = ptr.To[int32](2) })
	other := class(nil)
	other.Name = "other"
	create := func(name string, c drivers.Class, owner string) error {
		_, err := d.Create(ctx, drivers.Machine{Name: name, Class: c, Owner: drivers.Owner{Namespace: owner, Name: "set"}})
		return err
	}
	require.NoError(t, create("a", scarce, "team-a"))
	require.NoError(t, create("b", scarce, "team-b"))
	require.NoError(t, create("x", other, "team-a"), "another class has its own room")
	err := create("c", scarce, "team-a")
	require.Error(t, err)
	assert.ErrorIs(t, err, drivers.ErrOutOfCapacity)
	assert.Contains(t, err.Error(), "class sim (maxMachines 2, machines 2)")
	_, made := d.Machine("c")
	assert.False(t, made, "a refused create makes no machine")
	require.NoError(t, create("a", scarce, "team-a"), "an existing machine is answered, room or not")

	require.NoError(t, d.Delete(ctx, scarce, "b"))
	require.NoError(t, d.Delete(ctx, scarce, "b"), "a second delete frees nothing more")
	require.NoError(t, create("c", scarce, "team-a"), "a deleted machine's room is free again")
	assert.ErrorIs(t, create("d", scarce, "team-a"), drivers.ErrOutOfCapacity)

	require.NoError(t, d.Delete(ctx, scarce, "a"))
	d.Adopt("a", time.Now(), scarce, drivers.Owner{})
	assert.ErrorIs(t, create("d", scarce, "team-a"), drivers.ErrOutOfCapacity, "an adopted machine takes room")

	none := class(func(s *nodesetv1alpha1.SimulatedMachine) { s.MaxMachines = ptr.To[int32](0) })
	none.Name = "none"
	assert.ErrorIs(t, create("n", none, "team-a"), drivers.ErrOutOfCapacity, "maxMachines 0 has room for none")

	err = d.Validate(ctx, class(func(s *nodesetv1alpha1.SimulatedMachine) { s.MaxMachines = ptr.To[int32](-1) }))
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "spec.simulated.maxMachines")
	}
}
