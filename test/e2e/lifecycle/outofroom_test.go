package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// TestASimulatedCloudOutOfRoomTellsClusterAutoscaler: a simulated class
// with room for one machine gives a NodeSet of two one machine; the other
// Node records the create's OutOfCapacity error, which the NodeSet tells
// as ReplicaFailure and cluster-autoscaler reads as an instance of class
// OutOfResources (so it backs the group off). Its DeleteNodes of that instance, as it deletes a node that failed
// to create, takes the Node and the replica and leaves the Ready node.
// When the admin gives the class room, a new replica gets its machine.
func TestASimulatedCloudOutOfRoomTellsClusterAutoscaler(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	kube, cs := clients(t)
	ns := createNamespace(t, "outofroom")
	createClass(t, "outofroom", roomFor(1))
	createSetUntilCleanup(t, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "scarce", Namespace: ns},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "outofroom", Replicas: ptr.To[int32](2),
			Autoscaling: &nodesetv1alpha1.Autoscaling{MinReplicas: 0, MaxReplicas: 3}},
	})
	var ready, refused string
	eventually(t, 2*time.Minute, "one Node Ready, the other refused as out of capacity", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "scarce")
		if err != nil {
			return false, err.Error()
		}
		ready, refused = "", ""
		var seen []string
		for _, n := range nodes {
			message := n.Annotations[nodesetv1alpha1.AnnotationProvisioningError]
			seen = append(seen, roomView(&n))
			switch {
			case n.Spec.ProviderID != "" && nodeutil.IsReady(&n):
				ready = n.Name
			case n.Spec.ProviderID == "" && strings.HasPrefix(message, "OutOfCapacity: "):
				refused = n.Name
			}
		}
		return len(nodes) == 2 && ready != "" && refused != "", strings.Join(seen, "; ")
	})
	// The tenant's view: the NodeSet tells why a node has no machine.
	replicaFailure := func(ctx context.Context) (*metav1.Condition, error) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "scarce", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetReplicaFailure), nil
	}
	eventually(t, time.Minute, "the NodeSet's ReplicaFailure", func(ctx context.Context) (bool, string) {
		c, err := replicaFailure(ctx)
		if err != nil || c == nil {
			return false, fmt.Sprint("no ReplicaFailure yet ", err)
		}
		return c.Status == metav1.ConditionTrue && c.Reason == "ProvisioningFailed" &&
			strings.Contains(c.Message, "machine of 1 of 2 nodes; "+refused+": OutOfCapacity: "), fmt.Sprintf("%+v", *c)
	})
	// The SRE's view: the Node's phase in the node controller's metrics.
	eventually(t, time.Minute, "a provisioning-failed Node in nodeset_nodes", func(context.Context) (bool, string) {
		var seen []string
		for _, s := range scrape(t, c.NodeMetricsPort) {
			if s.name() == "nodeset_nodes" && s.labels["namespace"] == ns && s.labels["nodeset"] == "scarce" {
				seen = append(seen, fmt.Sprintf("%s=%v", s.labels["phase"], s.value))
			}
		}
		return slices.Contains(seen, "provisioning-failed=1") && slices.Contains(seen, "ready=1"), strings.Join(seen, " ")
	})
	node, err := kube.CoreV1().Nodes().Get(ctx, refused, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, node.Annotations[nodesetv1alpha1.AnnotationProvisioningError], "no room for another machine of class outofroom (maxMachines 1, machines 1)")
	machines, ok := c.machines(ctx)
	require.True(t, ok)
	mine := 0
	for _, m := range machines {
		if m.Name == ready || m.Name == refused {
			mine++
			assert.Equal(t, ready, m.Name, "only the Ready Node has a machine")
		}
	}
	assert.Equal(t, 1, mine)

	// cluster-autoscaler's view: the refused Node is a creating instance
	// with the error, of class OutOfResources; the Ready one has none.
	ca := autoscalerClient(t, c)
	id := ns + "/scarce"
	refusedID := "nodeset-unregistered://" + refused
	var instances []*protos.Instance
	eventually(t, time.Minute, "the refused instance carries its error", func(ctx context.Context) (bool, string) {
		if _, err := ca.Refresh(ctx, &protos.RefreshRequest{}); err != nil {
			return false, err.Error()
		}
		resp, err := ca.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: id})
		if err != nil {
			return false, err.Error()
		}
		instances = resp.GetInstances()
		for _, i := range instances {
			if i.GetId() == refusedID && i.GetStatus().GetErrorInfo() != nil {
				return true, ""
			}
		}
		return false, fmt.Sprint(instances)
	})
	require.Len(t, instances, 2, "the set's two Nodes, and no pending replica")
	for _, i := range instances {
		info := i.GetStatus().GetErrorInfo()
		if i.GetId() != refusedID {
			assert.Nil(t, info, "the Ready instance %s has no error", i.GetId())
			assert.Equal(t, protos.InstanceStatus_instanceRunning, i.GetStatus().GetInstanceState())
			continue
		}
		assert.Equal(t, protos.InstanceStatus_instanceCreating, i.GetStatus().GetInstanceState())
		assert.Equal(t, "OutOfCapacity", info.GetErrorCode())
		assert.Equal(t, int32(1), info.GetInstanceErrorClass(), "cloudprovider.OutOfResourcesErrorClass")
		assert.Contains(t, info.GetErrorMessage(), "maxMachines 1")
	}

	// cluster-autoscaler deletes a node that failed to create by its
	// instance id, as a node named and identified by it.
	_, err = ca.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: id,
		Nodes: []*protos.ExternalGrpcNode{{Name: refusedID, ProviderID: refusedID}}})
	require.NoError(t, err)
	eventually(t, time.Minute, "the refused Node and its replica go; the Ready one stays", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "scarce", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		_, err = kube.CoreV1().Nodes().Get(ctx, refused, metav1.GetOptions{})
		gone := apierrors.IsNotFound(err)
		n, err := kube.CoreV1().Nodes().Get(ctx, ready, metav1.GetOptions{})
		kept := err == nil && n.DeletionTimestamp == nil && nodeutil.IsReady(n)
		failure := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetReplicaFailure)
		return *set.Spec.Replicas == 1 && gone && kept && failure == nil,
			fmt.Sprintf("replicas %d, refused gone %v, ready kept %v, ReplicaFailure %v", *set.Spec.Replicas, gone, kept, failure)
	})

	// The admin gives the class room for two, which rolls no Node (the
	// room is the cloud's, not the machine's shape); a second replica gets
	// its machine.
	class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "outofroom", metav1.GetOptions{})
	require.NoError(t, err)
	class.Spec.Simulated.MaxMachines = ptr.To[int32](2)
	_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 1})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "two Ready Nodes, with no error", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "scarce")
		if err != nil {
			return false, err.Error()
		}
		good, kept := 0, false
		var seen []string
		for _, n := range nodes {
			message := n.Annotations[nodesetv1alpha1.AnnotationProvisioningError]
			seen = append(seen, roomView(&n))
			if n.Spec.ProviderID != "" && nodeutil.IsReady(&n) && message == "" {
				good++
			}
			kept = kept || n.Name == ready
		}
		return len(nodes) == 2 && good == 2 && kept, strings.Join(seen, "; ")
	})
}

// TestAMachineGoneGivesItsRoomToTheNodeWaitingLongest: in a class with room
// for one machine, a second NodeSet's Node waits for room, refused often
// enough that its next try is many seconds away. When the first set's Node
// is deleted, its machine's room goes to the waiting Node at once, and a
// Node the first set makes afterwards waits in turn.
func TestAMachineGoneGivesItsRoomToTheNodeWaitingLongest(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ns := createNamespace(t, "roomfreed")
	createClass(t, "roomfreed", roomFor(1))
	createSet := func(name string) {
		t.Helper()
		createSetUntilCleanup(t, &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "roomfreed", Replicas: ptr.To[int32](1)}})
	}
	// the one Node of set name, with its machine or waiting for room
	oneNode := func(ctx context.Context, name string, machine bool) (string, string) {
		nodes, err := setNodes(ctx, t, ns, name)
		if err != nil {
			return "", err.Error()
		}
		if len(nodes) != 1 || nodes[0].DeletionTimestamp != nil {
			return "", fmt.Sprintf("%d Nodes", len(nodes))
		}
		n := nodes[0]
		waiting := n.Spec.ProviderID == "" && strings.HasPrefix(n.Annotations[nodesetv1alpha1.AnnotationProvisioningError], "OutOfCapacity: ")
		if machine == (n.Spec.ProviderID != "" && !waiting) && machine != waiting {
			return n.Name, ""
		}
		return "", roomView(&n)
	}
	createSet("first")
	var first, second string
	eventually(t, 2*time.Minute, "the first set's Node has the machine", func(ctx context.Context) (bool, string) {
		var seen string
		first, seen = oneNode(ctx, "first", true)
		return first != "", seen
	})
	createSet("second")
	eventually(t, 2*time.Minute, "the second set's Node waits for room", func(ctx context.Context) (bool, string) {
		var seen string
		second, seen = oneNode(ctx, "second", false)
		return second != "", seen
	})

	// The node controller's backoff doubles from 5 ms: after 12 refused
	// creates the next is 20 s away, where the replacement's first tries
	// come within a second.
	refusedCreates := func() float64 {
		for _, s := range scrape(t, c.NodeMetricsPort) {
			if s.name() == "nodeset_driver_call_duration_seconds_count" && s.labels["driver"] == "simulated" &&
				s.labels["operation"] == "create" && s.labels["outcome"] == "error" {
				return s.value
			}
		}
		return 0
	}
	// Counted from its first refusal on (the controllers serve the
	// package's other tests too).
	since := refusedCreates() - 1
	eventually(t, 3*time.Minute, "the waiting Node refused 12 times", func(context.Context) (bool, string) {
		n := refusedCreates() - since
		return n >= 12, fmt.Sprint(n, " refused creates")
	})
	// The first set goes to zero, and once its Node is gone, back to one:
	// its new Node comes after the room was freed, and finds it taken.
	scale(t, ns, "first", 0)
	eventually(t, 2*time.Minute, "the first set's Node gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, first, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	scale(t, ns, "first", 1)
	eventually(t, 2*time.Minute, "the waiting Node has the room; the first set's new Node waits", func(ctx context.Context) (bool, string) {
		got, seenSecond := oneNode(ctx, "second", true)
		newer, seenFirst := oneNode(ctx, "first", false)
		return got == second && newer != "" && newer != first, seenSecond + "; " + seenFirst
	})
}

// roomFor gives a simulated class room for n machines.
func roomFor(n int32) func(*nodesetv1alpha1.NodeClass) {
	return func(cl *nodesetv1alpha1.NodeClass) { cl.Spec.Simulated.MaxMachines = ptr.To(n) }
}

// TestADecreaseTakesTheNodeWithNoMachine: cluster-autoscaler lowers a
// group's target size only by instances that have no machine yet
// (NodeGroupDecreaseTargetSize refuses more). The Node that goes is the one
// waiting for room, not the older one whose machine is booting, even when
// the set deletes its oldest Nodes first.
func TestADecreaseTakesTheNodeWithNoMachine(t *testing.T) {
	decreaseTakesTheNodeWithNoMachine(t, "roomdecrease", false)
}

// TestADecreaseKeepsAMarkedNodeWithAMachine: the same when the booting Node
// is marked nodeset.dev/delete-node, which puts it first in any scale-down
// of the set. cluster-autoscaler's DecreaseTargetSize never deletes an
// existing node (cloudprovider.NodeGroup.DecreaseTargetSize): the decrease
// names the Node without a machine, and the marked one stays.
func TestADecreaseKeepsAMarkedNodeWithAMachine(t *testing.T) {
	decreaseTakesTheNodeWithNoMachine(t, "roomdecreasemarked", true)
}

// decreaseTakesTheNodeWithNoMachine runs the decrease on a set of class
// name with one booting Node, marked delete-node when mark is set, and one
// waiting for room.
func decreaseTakesTheNodeWithNoMachine(t *testing.T, name string, mark bool) {
	c := startControllers(t)
	ctx := context.Background()
	kube, cs := clients(t)
	ns := createNamespace(t, name)
	createClass(t, name, func(cl *nodesetv1alpha1.NodeClass) {
		roomFor(1)(cl)
		cl.Spec.Simulated.BootDelay = &metav1.Duration{Duration: time.Hour} // never Ready in this test
	})
	createSetUntilCleanup(t, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: name, Replicas: ptr.To[int32](1),
			DeletePolicy: nodesetv1alpha1.DeletePolicyOldest,
			Autoscaling:  &nodesetv1alpha1.Autoscaling{MinReplicas: 0, MaxReplicas: 3}},
	})
	var booting, waiting string
	// the set's Nodes: the one with a machine not Ready, and the one
	// waiting for room
	look := func(ctx context.Context, want int) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "web")
		if err != nil {
			return false, err.Error()
		}
		booting, waiting = "", ""
		var seen []string
		for _, n := range nodes {
			seen = append(seen, roomView(&n))
			switch {
			case n.DeletionTimestamp != nil || nodeutil.IsReady(&n):
			case n.Spec.ProviderID != "":
				booting = n.Name
			case strings.HasPrefix(n.Annotations[nodesetv1alpha1.AnnotationProvisioningError], "OutOfCapacity: "):
				waiting = n.Name
			}
		}
		return len(nodes) == want, strings.Join(seen, "; ")
	}
	eventually(t, 2*time.Minute, "the first Node's machine booting", func(ctx context.Context) (bool, string) {
		ok, seen := look(ctx, 1)
		return ok && booting != "", seen
	})
	first := booting
	if mark {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, nodesetv1alpha1.AnnotationDeleteNode)
		_, err := kube.CoreV1().Nodes().Patch(ctx, first, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
	}

	ca := autoscalerClient(t, c)
	id := ns + "/web"
	_, err := ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 1})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "a newer Node waiting for room", func(ctx context.Context) (bool, string) {
		ok, seen := look(ctx, 2)
		return ok && booting == first && waiting != "", seen
	})
	refused := waiting
	_, err = ca.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: id, Delta: -1})
	require.NoError(t, err, "one instance has no machine")
	eventually(t, 2*time.Minute, "the Node with no machine gone, the booting one kept", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, refused, metav1.GetOptions{})
		gone := apierrors.IsNotFound(err)
		ok, seen := look(ctx, 1)
		return gone && ok && booting == first, seen
	})
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 1, *set.Spec.Replicas)
}

// roomView is what the out-of-room tests tell of a Node when they wait.
func roomView(n *corev1.Node) string {
	return fmt.Sprintf("%s providerID=%q ready=%v error=%q deleting=%v", n.Name, n.Spec.ProviderID, nodeutil.IsReady(n),
		n.Annotations[nodesetv1alpha1.AnnotationProvisioningError], n.DeletionTimestamp != nil)
}

// createSetUntilCleanup creates set, and deletes it when the test ends.
func createSetUntilCleanup(t *testing.T, set *nodesetv1alpha1.NodeSet) {
	t.Helper()
	_, cs := clients(t)
	_, err := cs.NodesetV1alpha1().NodeSets(set.Namespace).Create(context.Background(), set, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.NodesetV1alpha1().NodeSets(set.Namespace).Delete(context.Background(), set.Name, metav1.DeleteOptions{})
	})
}
