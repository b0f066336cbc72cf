package example

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

func groupClass(parameters string) drivers.Class {
	spec := nodesetv1alpha1.NodeClassSpec{Driver: GroupName}
	if parameters != "" {
		spec.Parameters = &runtime.RawExtension{Raw: []byte(parameters)}
	}
	return drivers.Class{Name: "example", Spec: spec}
}

var owner = drivers.Owner{Cluster: "c", Namespace: "ns", Name: "web", UID: "uid-1"}

func group(replicas int32, hash string) drivers.Group {
	return drivers.Group{Name: "g", Owner: owner, Class: groupClass(`{"size":"small"}`), Replicas: replicas, TemplateHash: hash}
}

// machineNames are the machines a status reports, sorted.
func machineNames(s drivers.GroupStatus) []string {
	var names []string
	for _, m := range s.Machines {
		names = append(names, m.Name)
	}
	sort.Strings(names)
	return names
}

// machineDirs are the machine directories of group g, sorted.
func machineDirs(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "g"))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

func TestGroupValidateAndCapacity(t *testing.T) {
	tests := []struct {
		name       string
		parameters string
		wantErr    bool
		wantCPU    string
	}{
		{name: "small", parameters: `{"size":"small"}`, wantCPU: "2"},
		{name: "large", parameters: `{"size":"large"}`, wantCPU: "8"},
		{name: "unknown size", parameters: `{"size":"huge"}`, wantErr: true},
		{name: "unknown field", parameters: `{"size":"small","zone":"a"}`, wantErr: true},
		{name: "no parameters", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &GroupDriver{Root: t.TempDir()}
			err := d.Validate(context.Background(), groupClass(tt.parameters))
			capacity, capErr := d.Capacity(context.Background(), groupClass(tt.parameters))
			if tt.wantErr {
				assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
				assert.ErrorIs(t, capErr, drivers.ErrInvalidConfiguration)
				return
			}
			require.NoError(t, err)
			require.NoError(t, capErr)
			cpu := capacity.Resources[corev1.ResourceCPU]
			assert.Zero(t, cpu.Cmp(resource.MustParse(tt.wantCPU)), "cpu %s", cpu.String())
		})
	}
}

func TestEnsureGroupRaisesButNeverLowers(t *testing.T) {
	tests := []struct {
		name        string
		replicas    []int32 // successive EnsureGroup calls
		wantDesired int32
		wantNames   []string
	}{
		{name: "creates", replicas: []int32{2}, wantDesired: 2, wantNames: []string{"g-1", "g-2"}},
		{name: "idempotent", replicas: []int32{2, 2, 2}, wantDesired: 2, wantNames: []string{"g-1", "g-2"}},
		{name: "raises", replicas: []int32{1, 3}, wantDesired: 3, wantNames: []string{"g-1", "g-2", "g-3"}},
		{name: "never lowers", replicas: []int32{3, 1}, wantDesired: 3, wantNames: []string{"g-1", "g-2", "g-3"}},
		{name: "empty group", replicas: []int32{0}, wantDesired: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			d := &GroupDriver{Root: t.TempDir()}
			var s drivers.GroupStatus
			for _, n := range tt.replicas {
				var err error
				s, err = d.EnsureGroup(ctx, group(n, "h1"))
				require.NoError(t, err)
			}
			assert.Equal(t, "g", s.Name)
			assert.Equal(t, "ACTIVE", s.State)
			assert.Equal(t, tt.wantDesired, s.DesiredSize)
			assert.Equal(t, tt.wantNames, machineNames(s))
			assert.Equal(t, tt.wantNames, machineDirs(t, d.Root), "a directory per machine")
			assert.Equal(t, owner, s.Owner)
			assert.NotZero(t, s.CreatedAt)
			for _, m := range s.Machines {
				assert.Equal(t, "example-group://g/"+m.Name, m.ProviderID)
				assert.Equal(t, drivers.MachineRunning, m.State)
				assert.Equal(t, owner, m.Owner)
				assert.Equal(t, "h1", m.TemplateHash)
				assert.NotZero(t, m.CreatedAt)
			}
			described, err := d.DescribeGroup(ctx, drivers.Class{}, "g")
			require.NoError(t, err)
			assert.Equal(t, s, described, "DescribeGroup tells what EnsureGroup did")
		})
	}
}

func TestEnsureGroupKeepsEachMachinesTemplateHash(t *testing.T) {
	ctx := context.Background()
	d := &GroupDriver{Root: t.TempDir()}
	_, err := d.EnsureGroup(ctx, group(1, "old"))
	require.NoError(t, err)
	s, err := d.EnsureGroup(ctx, group(2, "new"))
	require.NoError(t, err)
	require.Len(t, s.Machines, 2)
	assert.Equal(t, "old", s.Machines[0].TemplateHash, "recorded when the machine was made")
	assert.Equal(t, "new", s.Machines[1].TemplateHash)
}

func TestTerminateMachineLowersTheGroup(t *testing.T) {
	tests := []struct {
		name        string
		terminate   []string // providerIDs, in order
		wantErr     bool
		wantDesired int32
		wantNames   []string
	}{
		{name: "the chosen machine", terminate: []string{"example-group://g/g-2"}, wantDesired: 2, wantNames: []string{"g-1", "g-3"}},
		{name: "twice is once", terminate: []string{"example-group://g/g-2", "example-group://g/g-2"}, wantDesired: 2, wantNames: []string{"g-1", "g-3"}},
		{name: "never made", terminate: []string{"example-group://g/g-9"}, wantDesired: 3, wantNames: []string{"g-1", "g-2", "g-3"}},
		{name: "all", terminate: []string{"example-group://g/g-1", "example-group://g/g-2", "example-group://g/g-3"}, wantDesired: 0},
		{name: "another group's", terminate: []string{"example-group://other/other-1"}, wantErr: true, wantDesired: 3, wantNames: []string{"g-1", "g-2", "g-3"}},
		{name: "another driver's", terminate: []string{"example-dir:///g-1"}, wantErr: true, wantDesired: 3, wantNames: []string{"g-1", "g-2", "g-3"}},
		{name: "a path", terminate: []string{"example-group://g/.."}, wantErr: true, wantDesired: 3, wantNames: []string{"g-1", "g-2", "g-3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			d := &GroupDriver{Root: t.TempDir()}
			_, err := d.EnsureGroup(ctx, group(3, "h1"))
			require.NoError(t, err)
			for _, id := range tt.terminate {
				err := d.TerminateMachine(ctx, drivers.Class{}, "g", id)
				if tt.wantErr {
					require.Error(t, err)
				} else {
					require.NoError(t, err)
				}
			}
			s, err := d.DescribeGroup(ctx, drivers.Class{}, "g")
			require.NoError(t, err)
			assert.Equal(t, tt.wantDesired, s.DesiredSize)
			assert.Equal(t, tt.wantNames, machineNames(s))
			assert.Equal(t, tt.wantNames, machineDirs(t, d.Root))

			// The group launches no replacement, and names a new machine afresh.
			s, err = d.EnsureGroup(ctx, group(tt.wantDesired, "h1"))
			require.NoError(t, err)
			assert.Equal(t, tt.wantNames, machineNames(s), "no replacement for a terminated machine")
			s, err = d.EnsureGroup(ctx, group(tt.wantDesired+1, "h1"))
			require.NoError(t, err)
			assert.Contains(t, machineNames(s), "g-4", "names are never reused")
		})
	}
}

func TestTerminateMachineOfAGoneGroup(t *testing.T) {
	d := &GroupDriver{Root: t.TempDir()}
	assert.NoError(t, d.TerminateMachine(context.Background(), drivers.Class{}, "g", "example-group://g/g-1"))
}

func TestDeleteGroup(t *testing.T) {
	ctx := context.Background()
	d := &GroupDriver{Root: t.TempDir()}
	_, err := d.EnsureGroup(ctx, group(2, "h1"))
	require.NoError(t, err)
	require.NoError(t, d.DeleteGroup(ctx, drivers.Class{}, "g"))
	assert.NoDirExists(t, filepath.Join(d.Root, "g"))
	require.NoError(t, d.DeleteGroup(ctx, drivers.Class{}, "g"), "deleting a gone group is fine")
	_, err = d.DescribeGroup(ctx, drivers.Class{}, "g")
	assert.ErrorIs(t, err, drivers.ErrNotFound)
	assert.Error(t, d.DeleteGroup(ctx, drivers.Class{}, ".."), "names are never paths")
}

func TestListGroups(t *testing.T) {
	ctx := context.Background()
	d := &GroupDriver{Root: t.TempDir()}
	list, err := d.ListGroups(ctx)
	require.NoError(t, err)
	assert.Empty(t, list)

	_, err = d.EnsureGroup(ctx, group(2, "h1"))
	require.NoError(t, err)
	other := group(1, "h1")
	other.Name, other.Owner.Name = "other", "api"
	_, err = d.EnsureGroup(ctx, other)
	require.NoError(t, err)
	require.NoError(t, os.Mkdir(filepath.Join(d.Root, "half-made"), 0o755))

	list, err = d.ListGroups(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2, "a directory without a record is no group")
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	assert.Equal(t, "g", list[0].Name)
	assert.Equal(t, owner, list[0].Owner)
	assert.NotZero(t, list[0].CreatedAt)
	assert.Len(t, list[0].Machines, 2)
	assert.Equal(t, "other", list[1].Name)
	assert.Equal(t, "api", list[1].Owner.Name)

	// Enough to delete each group, as orphan collection does.
	for _, g := range list {
		assert.Equal(t, "example", g.Class.Name)
		require.NoError(t, d.DeleteGroup(ctx, g.Class, g.Name))
	}
	list, err = d.ListGroups(ctx)
	require.NoError(t, err)
	assert.Empty(t, list)
}

func TestListGroupsFailsRatherThanMissOne(t *testing.T) {
	ctx := context.Background()
	d := &GroupDriver{Root: t.TempDir()}
	_, err := d.EnsureGroup(ctx, group(1, "h1"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(d.Root, "g", "group.json"), []byte("{"), 0o644))
	_, err = d.ListGroups(ctx)
	assert.Error(t, err)

	_, err = (&GroupDriver{Root: filepath.Join(d.Root, "missing")}).ListGroups(ctx)
	assert.Error(t, err, "a root it cannot read")
}
