package dockermachine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

// TestAMachineIsNeverHandedToAnotherNode: a Node deleted without its
// machine (its finalizer removed by hand) leaves the machine's record; a
// Node of the same name made since, for another class or another NodeSet,
// is another Node. Its Create must not take that machine as its own: it
// fails, saying whose the machine is, and makes nothing. Deleting the
// Node removes the machine left behind, and the Node made again then gets
// a machine of its own class.
func TestAMachineIsNeverHandedToAnotherNode(t *testing.T) {
	ctx := context.Background()
	web := drivers.Owner{Cluster: "c", Namespace: "team-a", Name: "web", UID: "uid-1"}
	tests := []struct {
		name string
		// unfinished leaves the first machine's Create unfinished (the
		// node controller stopped in the middle).
		unfinished bool
		first      drivers.Owner
		second     drivers.Owner
		// otherClass makes the second Node's class another class (of the
		// same plugin, in another directory).
		otherClass bool
		want       string
		// unnamed is what the error must not say: another tenant's
		// namespace, which the second Node's tenant reads.
		unnamed string
	}{
		{name: "a static Node made again for another class", first: drivers.Owner{Cluster: "c"}, second: drivers.Owner{Cluster: "c"},
			otherClass: true, want: "class dm-a"},
		{name: "a Node of another namespace's NodeSet", first: web, second: drivers.Owner{Cluster: "c", Namespace: "team-b", Name: "web", UID: "uid-2"},
			want: "for a NodeSet of another namespace", unnamed: "team-a"},
		{name: "a Node of another NodeSet of the namespace", first: web, second: drivers.Owner{Cluster: "c", Namespace: "team-a", Name: "api", UID: "uid-2"},
			want: "NodeSet team-a/web"},
		{name: "a Node of a NodeSet made again under its name", first: web, second: drivers.Owner{Cluster: "c", Namespace: "team-a", Name: "web", UID: "uid-3"},
			want: "uid-1"},
		{name: "a static Node where a NodeSet's was", first: web, second: drivers.Owner{Cluster: "c"}, want: "NodeSet team-a/web"},
		{name: "an unfinished machine of another class", unfinished: true, first: drivers.Owner{Cluster: "c"}, second: drivers.Owner{Cluster: "c"},
			otherClass: true, want: "class dm-a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, store, _ := newDriver(t)
			dirA, dirB := t.TempDir(), t.TempDir()
			classA := fakeClass(dirA, nil)
			classA.Name = "dm-a"
			classB := classA
			if tt.otherClass {
				classB = fakeClass(dirB, nil)
				classB.Name = "dm-b"
			}
			if tt.unfinished {
				store.crashPut = 2
				crashed(t, func() { _, _ = d.Create(ctx, drivers.Machine{Name: "n1", Owner: tt.first, Class: classA}) })
			} else {
				_, err := d.Create(ctx, drivers.Machine{Name: "n1", Owner: tt.first, Class: classA})
				require.NoError(t, err)
			}
			made, err := fakeplugin.Machines(dirA)
			require.NoError(t, err)
			require.Contains(t, made, "n1")

			// The first Node is gone, without its machine; a second Node
			// of the name asks for its machine.
			_, err = d.Create(ctx, drivers.Machine{Name: "n1", Owner: tt.second, Class: classB})
			require.Error(t, err, "the machine left behind is not the second Node's")
			assert.Contains(t, err.Error(), "is not this Node's")
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "s3cret-token")
			if tt.unnamed != "" {
				assert.NotContains(t, err.Error(), tt.unnamed)
			}
			now, err := fakeplugin.Machines(dirA)
			require.NoError(t, err)
			assert.Equal(t, made, now, "the machine left behind is kept as it was")
			if tt.otherClass {
				inB, err := fakeplugin.Machines(dirB)
				require.NoError(t, err)
				assert.Empty(t, inB, "and none is made while it is there")
			}
			status, err := d.Get(ctx, classB, "n1")
			require.NoError(t, err)
			assert.Equal(t, tt.first, status.Owner, "the record still names the first owner")

			// Deleting the second Node removes the machine left behind;
			// made again, it gets a machine of its own.
			require.NoError(t, d.Delete(ctx, classB, "n1"))
			now, err = fakeplugin.Machines(dirA)
			require.NoError(t, err)
			assert.Empty(t, now)
			_, err = d.Create(ctx, drivers.Machine{Name: "n1", Owner: tt.second, Class: classB})
			require.NoError(t, err)
			status, err = d.Get(ctx, classB, "n1")
			require.NoError(t, err)
			assert.Equal(t, tt.second, status.Owner)
			if tt.otherClass {
				inB, err := fakeplugin.Machines(dirB)
				require.NoError(t, err)
				assert.Contains(t, inB, "n1", "a machine of the second Node's class")
			}
			assertNoPluginLeft(t)
		})
	}

	// The same Node asking again is answered with its machine: with the
	// NodeSet's UID unknown to the caller (its cache lags), and for a
	// record written before the class was kept.
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	class := fakeClass(dir, nil)
	id, err := d.Create(ctx, drivers.Machine{Name: "web-1", Owner: web, Class: class})
	require.NoError(t, err)
	again, err := d.Create(ctx, drivers.Machine{Name: "web-1", Owner: drivers.Owner{Cluster: "c", Namespace: "team-a", Name: "web"}, Class: class})
	require.NoError(t, err)
	assert.Equal(t, id, again)
	record, err := d.store.Get(ctx, "web-1")
	require.NoError(t, err)
	record.Class = ""
	require.NoError(t, d.store.Put(ctx, &record))
	again, err = d.Create(ctx, drivers.Machine{Name: "web-1", Owner: web, Class: class})
	require.NoError(t, err)
	assert.Equal(t, id, again)
	machines, err := fakeplugin.Machines(dir)
	require.NoError(t, err)
	assert.Len(t, machines, 1)
	assert.Len(t, store.records, 1)
	assertNoPluginLeft(t)
}

// TestANodeMadeAgainGetsAMachineOfItsOwn: a Node deleted without its
// machine (its finalizer removed by hand) and made again under its name,
// for the same class and owner, is another Node (another UID). Its Create
// removes the machine left behind, which its deleted Node's deletion was
// to remove, with that machine's files and bootstrap token, and makes the
// Node a machine of its own. The Node asking again, or a caller that does
// not know the Node's UID, gets the machine there.
func TestANodeMadeAgainGetsAMachineOfItsOwn(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		owner drivers.Owner
		// unfinished leaves the first machine's Create unfinished.
		unfinished bool
	}{
		{name: "a static Node", owner: drivers.Owner{Cluster: "c"}},
		{name: "a NodeSet's Node", owner: drivers.Owner{Cluster: "c", Namespace: "team-a", Name: "web", UID: "set-1"}},
		{name: "an unfinished machine of a static Node", owner: drivers.Owner{Cluster: "c"}, unfinished: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, store, joiner := newDriver(t)
			dir := t.TempDir()
			class := fakeClass(dir, nil)
			first := drivers.Machine{Name: "n1", NodeUID: "node-1", Owner: tt.owner, Class: class}
			if tt.unfinished {
				store.crashPut = 2
				crashed(t, func() { _, _ = d.Create(ctx, first) })
			} else {
				_, err := d.Create(ctx, first)
				require.NoError(t, err)
			}
			before, err := fakeplugin.Machines(dir)
			require.NoError(t, err)
			require.Contains(t, before, "n1")

			second := first
			second.NodeUID = "node-2"
			id, err := d.Create(ctx, second)
			require.NoError(t, err)
			assert.Equal(t, "docker-machine://fake/n1", id)
			calls, err := fakeplugin.Calls(dir)
			require.NoError(t, err)
			var ops []string
			for _, c := range calls {
				ops = append(ops, c.Op+" "+c.Name)
			}
			assert.Equal(t, []string{"create n1", "remove n1", "create n1"}, ops,
				"the machine left behind is removed, and the Node gets one of its own")
			after, err := fakeplugin.Machines(dir)
			require.NoError(t, err)
			require.Contains(t, after, "n1")
			assert.True(t, after["n1"].CreatedAt.After(before["n1"].CreatedAt), "a new machine")
			assert.Contains(t, joiner.forgotten, "n1", "the bootstrap token of the machine left behind is deleted")
			status, err := d.Get(ctx, class, "n1")
			require.NoError(t, err)
			assert.Equal(t, types.UID("node-2"), status.NodeUID)
			listed, err := d.List(ctx)
			require.NoError(t, err)
			require.Len(t, listed, 1)
			assert.Equal(t, types.UID("node-2"), listed[0].NodeUID)

			// The same Node asking again, and a caller that does not know
			// its UID, get that machine; nothing is made or removed.
			for _, uid := range []types.UID{"node-2", ""} {
				again := second
				again.NodeUID = uid
				id, err := d.Create(ctx, again)
				require.NoError(t, err)
				assert.Equal(t, "docker-machine://fake/n1", id)
			}
			calls, err = fakeplugin.Calls(dir)
			require.NoError(t, err)
			assert.Len(t, calls, 3)
			assert.Len(t, store.records, 1)
			assertNoPluginLeft(t)
		})
	}

	// The same Node (its UID) with another class is the Node's machine,
	// its class label changed: refused as before, nothing removed.
	d, _, _ := newDriver(t)
	dir := t.TempDir()
	class := fakeClass(dir, nil)
	_, err := d.Create(ctx, drivers.Machine{Name: "n1", NodeUID: "node-1", Owner: drivers.Owner{Cluster: "c"}, Class: class})
	require.NoError(t, err)
	other := fakeClass(t.TempDir(), nil)
	other.Name = "dm-b"
	_, err = d.Create(ctx, drivers.Machine{Name: "n1", NodeUID: "node-1", Owner: drivers.Owner{Cluster: "c"}, Class: other})
	require.ErrorContains(t, err, "is not this Node's")
	names, err := fakeplugin.MachineNames(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"n1"}, names)
	assertNoPluginLeft(t)
}
