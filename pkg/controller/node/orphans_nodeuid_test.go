package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// nodeUIDDriver is a recordingDriver whose machines record the UID of the
// Node they were made for.
type nodeUIDDriver struct {
	*recordingDriver
	nodeUIDs map[string]types.UID
}

func (d nodeUIDDriver) List(ctx context.Context) ([]drivers.MachineStatus, error) {
	list, err := d.recordingDriver.List(ctx)
	for i := range list {
		list[i].NodeUID = d.nodeUIDs[list[i].Name]
	}
	return list, err
}

// TestAMachineOfAnotherNodeOfItsNameIsCollected: a Node of a machine's
// name accounts for it only when the machine was made for it (the UID the
// driver recorded) or the Node is of the machine's driver (whose Create
// replaces or refuses it). A machine left behind by a deleted Node whose
// name a Node of another driver has now is collected.
func TestAMachineOfAnotherNodeOfItsNameIsCollected(t *testing.T) {
	dmClass := testClass("dm")
	dmClass.Spec.Driver = nodesetv1alpha1.DriverDockerMachine
	nodes := []*corev1.Node{
		setNode("reused", "sim"),     // another driver's Node, made after the machine's was deleted
		setNode("own", "sim"),        // the machine's own Node (its class label changed since)
		setNode("unrecorded", "sim"), // a machine that records no Node UID
		setNode("same-driver", "dm"), // a Node of the machine's driver: left to its Create
	}
	nodes[1].UID = "uid-own"
	objects := make([]runtime.Object, 0, len(nodes))
	for _, n := range nodes {
		objects = append(objects, n)
	}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim"), dmClass}, objects...)
	synced(f)
	dm := nodeUIDDriver{recordingDriver: newRecordingDriver(nodesetv1alpha1.DriverDockerMachine), nodeUIDs: map[string]types.UID{
		"reused": "uid-deleted-node", "own": "uid-own", "same-driver": "uid-deleted-node",
	}}
	old := f.now.Add(-time.Hour).Unix()
	for _, name := range []string{"reused", "own", "unrecorded", "same-driver"} {
		dm.machines[name] = "docker-machine://fake/" + name
		dm.createdAt = map[string]int64{"reused": old, "own": old, "unrecorded": old, "same-driver": old}
	}
	f.controller.registry[dm.name] = dm

	removed, err := f.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"reused"}, removed)
	assert.Equal(t, []string{"reused"}, dm.deletes)
}
