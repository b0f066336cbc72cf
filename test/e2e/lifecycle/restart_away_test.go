package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/test/framework"
)

// TestDeletionsMadeWhileNoNodeControllerRunsAreCarriedOutByTheNextOne: the
// node controller is killed in the middle of a drain that a
// PodDisruptionBudget holds (evictions outstanding); while no node
// controller runs, another Node of the set is deleted and the class's drain
// timeout is shortened. The controller started afterwards finds both
// deletions in its first look at the Nodes: the held drain goes on from
// the start recorded on its Node and gives up at the new timeout, the
// other Node is drained, each machine is deprovisioned and each Node
// released; the set is made whole again, machines = Nodes. Run with the
// simulated driver, whose machines the restarted controller rebuilds from
// their Nodes, and with docker-machine (the fake plugin over the real
// plugin RPC), whose machines outlive the controller.
func TestDeletionsMadeWhileNoNodeControllerRunsAreCarriedOutByTheNextOne(t *testing.T) {
	t.Run("simulated", func(t *testing.T) {
		deletedWhileAway(t, "away-sim", func(class string) { createClass(t, class, nil) }, func() []string { return nil })
	})
	t.Run("docker-machine", func(t *testing.T) {
		sshd, err := framework.StartSSHD(t.TempDir())
		require.NoError(t, err)
		t.Cleanup(sshd.Stop)
		var machineDir string
		deletedWhileAway(t, "away-dm", func(class string) {
			machineDir, _ = dockerMachineClass(t, class, sshd)
			waitClassValid(t, class)
		}, func() []string { return pluginMachines(t, machineDir) })
	})
}

// deletedWhileAway runs the test with the class makeClass makes;
// cloudMachines lists the driver's machines as the
// cloud has them, beside what the node controller shows.
func deletedWhileAway(t *testing.T, className string, makeClass func(string), cloudMachines func() []string) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, className)
	makeClass(className)
	// Long enough that the drain is still held when the controller dies.
	setDrainTimeout(t, className, 10*time.Minute)
	createSet(t, ns, "away", className, 2)
	t.Cleanup(func() {
		_ = cs.NodesetV1alpha1().NodeSets(ns).Delete(context.Background(), "away", metav1.DeleteOptions{})
		eventually(t, 2*time.Minute, "the set's Nodes and machines gone", func(ctx context.Context) (bool, string) {
			nodes, err := setNodes(ctx, t, ns, "away")
			all, ok := c.machines(ctx)
			if err != nil || !ok {
				return false, fmt.Sprint("listing: ", err, ok)
			}
			left := setMachines(all, ns, "away")
			return len(nodes) == 0 && len(left) == 0, fmt.Sprintf("%d Nodes and %d machines left", len(nodes), len(left))
		})
	})
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "away", 2))
	nodes, err := setNodes(ctx, t, ns, "away")
	require.NoError(t, err)
	held, other := nodes[0].Name, nodes[1].Name
	guardedPod(t, ns, "held-pod", held, "away-guard")

	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, held, metav1.DeleteOptions{}))
	eventuallyEvent(t, held, nodecontroller.ReasonEvictionBlocked)
	n, err := kube.CoreV1().Nodes().Get(ctx, held, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, n.Annotations[nodesetv1alpha1.AnnotationDrainStarted], "the drain's start is recorded")

	c.node.Kill(syscall.SIGKILL)
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, other, metav1.DeleteOptions{}))
	setDrainTimeout(t, className, 5*time.Second)
	// Nothing releases them while no node controller runs.
	for _, name := range []string{held, other} {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err, "Node %s is held while no node controller runs", name)
		require.NotNil(t, n.DeletionTimestamp)
	}
	require.NoError(t, c.node.Start())

	for _, name := range []string{held, other} {
		// Orphan collection would remove a machine left behind seconds
		// after its Node's release: the machine must be gone already
		// when the Node is seen gone.
		releasedFirst := false
		eventually(t, 2*time.Minute, "Node "+name+" released and its machine gone", func(ctx context.Context) (bool, string) {
			_, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return false, fmt.Sprint("Node still there: ", err)
			}
			all, ok := c.machines(ctx)
			if !ok {
				return false, "node controller not answering /debug/machines"
			}
			_, has := setMachines(all, ns, "away")[name]
			if has || slices.Contains(cloudMachines(), name) {
				releasedFirst = true
				return false, "its machine still exists"
			}
			return true, ""
		})
		require.False(t, releasedFirst, "Node %s was released while its machine still existed", name)
	}
	eventuallyEvent(t, held, nodecontroller.ReasonDrainTimedOut)
	eventually(t, 2*time.Minute, "made whole again", converged(c, t, ns, "away", 2))
}

// setDrainTimeout sets the class's drain timeout.
func setDrainTimeout(t *testing.T, className string, timeout time.Duration) {
	t.Helper()
	_, cs := clients(t)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(context.Background(), className, metav1.GetOptions{})
		if err != nil {
			return err
		}
		class.Spec.Drain = &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: timeout}}
		_, err = cs.NodesetV1alpha1().NodeClasses().Update(context.Background(), class, metav1.UpdateOptions{})
		return err
	}))
}

// TestAMachineMadeButNotRecordedWhenTheControllerDiedGoesWithItsNode: the
// node controller is SIGKILLed after the docker-machine plugin made a
// Node's machine and before the controller recorded it on the Node (it
// waits --provider-id-wait for the kubelet, and this machine never
// joins); while none runs, the Node is deleted. The next controller
// deletes the machine by the Node's name, although the Node names no
// machine, and only then releases the Node: no machine is left in the
// plugin's store.
func TestAMachineMadeButNotRecordedWhenTheControllerDiedGoesWithItsNode(t *testing.T) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "unrecorded")
	dir := t.TempDir()
	joinlessDockerMachineClass(t, "unrecorded-dm", dir)
	createSet(t, ns, "unrecorded", "unrecorded-dm", 1)
	t.Cleanup(func() {
		_ = cs.NodesetV1alpha1().NodeSets(ns).Delete(context.Background(), "unrecorded", metav1.DeleteOptions{})
		eventually(t, 2*time.Minute, "the set's Nodes and machines gone", func(ctx context.Context) (bool, string) {
			nodes, err := setNodes(ctx, t, ns, "unrecorded")
			if err != nil {
				return false, err.Error()
			}
			left := pluginMachines(t, dir)
			return len(nodes) == 0 && len(left) == 0, fmt.Sprintf("%d Nodes and machines %v left", len(nodes), left)
		})
	})
	var node string
	eventually(t, time.Minute, "a machine made for a Node that does not record it yet", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "unrecorded")
		if err != nil || len(nodes) != 1 {
			return false, fmt.Sprint(len(nodes), " nodes ", err)
		}
		node = nodes[0].Name
		if nodes[0].Spec.ProviderID != "" {
			return false, "recorded already"
		}
		return slices.Contains(pluginMachines(t, dir), node), "no machine yet"
	})
	c.node.Kill(syscall.SIGKILL)
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, n.Spec.ProviderID, "killed before the machine was recorded")
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}))
	require.NoError(t, c.node.Start())

	// Orphan collection would remove the machine too, seconds after the
	// Node's release: what is checked is that the Node was released only
	// once its machine was gone, as seen right when the Node is gone.
	releasedFirst := false
	eventually(t, 2*time.Minute, "Node "+node+" released and its machine gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprint("Node still there: ", err)
		}
		if slices.Contains(pluginMachines(t, dir), node) {
			releasedFirst = true
			return false, "its machine is still in the plugin's store"
		}
		return true, ""
	})
	require.False(t, releasedFirst, "the Node was released while its machine was still in the plugin's store")
}
