package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestAWarningThatComesBeforeItsNodeIsActedOnOnceTheNodeAppears: a spot
// instance of a group may be warned before it has a Node (its Node is made
// at the group's next look, or its kubelet's Node is adopted later). The
// warning is kept until its deadline and acted on once the Node appears:
// a spot interruption drains the Node, a rebalance recommendation taints
// it. A Node of another driver with the same machine id is left alone.
func TestAWarningThatComesBeforeItsNodeIsActedOnOnceTheNodeAppears(t *testing.T) {
	const name = "notice-early9"
	kube, _ := clients(t)
	ns := createNamespace(t, name)
	createNoticeClass(t, name, nil)
	createGroupSet(t, ns, "web", name)
	driver := newNoticeDriver(name)
	ctrl := startNodeController(t, drivers.Registry{name: driver}, true)
	ctrl.waitForGroup(t, ns, "web", name)

	// A warning's deadline is two minutes away in EC2's notices. Here it
	// is ten, as long as a warning is kept at all: the Node comes after
	// several waits, which a busy machine can stretch past two minutes.
	now := time.Now()
	driver.put(drivers.Interruption{Receipt: "r-spot", ID: "m-spot", Kind: drivers.InterruptionSpot, MachineIDs: []string{"i-0early1"},
		Notice: now, Deadline: now.Add(10 * time.Minute), Detail: "terminate"})
	driver.put(drivers.Interruption{Receipt: "r-rebalance", ID: "m-rebalance", Kind: drivers.InterruptionRebalance, MachineIDs: []string{"i-0early2"},
		Notice: now})
	eventually(t, 30*time.Second, "both warnings kept: delivered again, not acknowledged", func(context.Context) (bool, string) {
		return driver.deliveries("r-spot") >= 2 && driver.deliveries("r-rebalance") >= 2,
			fmt.Sprintf("delivered %d and %d times", driver.deliveries("r-spot"), driver.deliveries("r-rebalance"))
	})
	assert.False(t, driver.wasAcked("r-spot") || driver.wasAcked("r-rebalance"), "kept warnings stay on the queue")

	// The Nodes appear after their warnings, as the group's sync makes them.
	createMachineNode(t, name+"-other", name, ns, "web", nodesetv1alpha1.DriverEKSManaged, "i-0early1")
	createMachineNode(t, name+"-spot", name, ns, "web", name, "i-0early1", nodesetv1alpha1.FinalizerTermination, testHold)
	createMachineNode(t, name+"-rebalance", name, ns, "web", name, "i-0early2", nodesetv1alpha1.FinalizerTermination, testHold)

	eventuallyInterrupted(t, kube, name+"-spot", "the spot warning recorded on its Node, and the Node drained")
	eventually(t, 30*time.Second, "the rebalance recommendation tainted its Node", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, name+"-rebalance", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == nodesetv1alpha1.TaintRebalanceRecommended }),
			fmt.Sprintf("taints %v", n.Spec.Taints)
	})
	eventually(t, 30*time.Second, "both acknowledged once acted on", func(context.Context) (bool, string) {
		return driver.wasAcked("r-spot") && driver.wasAcked("r-rebalance"), "not yet"
	})
	other, err := kube.CoreV1().Nodes().Get(context.Background(), name+"-other", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, other.Annotations[nodesetv1alpha1.AnnotationInterruption], "another driver's Node with the machine id is not this driver's to drain")
	assert.Nil(t, other.DeletionTimestamp)
}

// TestAWarningKeptForItsNodeOutlivesItsLeader: the leader that kept a
// warning for a Node to come goes before the Node appears. The warning
// was not acknowledged, so the queue gives it to the next leader, which
// drains the Node once it appears and then acknowledges the warning.
func TestAWarningKeptForItsNodeOutlivesItsLeader(t *testing.T) {
	const name = "notice-handover9"
	kube, _ := clients(t)
	ns := createNamespace(t, name)
	createNoticeClass(t, name, nil)
	createGroupSet(t, ns, "web", name)
	driver := newNoticeDriver(name)
	first := startNodeController(t, drivers.Registry{name: driver}, true)
	first.waitForGroup(t, ns, "web", name)
	now := time.Now() // a deadline as long as a warning is kept, as above
	driver.put(drivers.Interruption{Receipt: "r-handover", ID: "m-handover", Kind: drivers.InterruptionSpot, MachineIDs: []string{"i-0handover"},
		Notice: now, Deadline: now.Add(10 * time.Minute), Detail: "terminate"})
	eventually(t, 30*time.Second, "the warning received by the first leader", func(context.Context) (bool, string) {
		return driver.deliveries("r-handover") >= 1, "not yet"
	})
	first.stop()
	require.False(t, driver.wasAcked("r-handover"), "kept for its Node, not acknowledged")

	next := startNodeController(t, drivers.Registry{name: driver}, true)
	next.waitForGroup(t, ns, "web", name)
	delivered := driver.deliveries("r-handover")
	eventually(t, 30*time.Second, "the warning given again to the next leader", func(context.Context) (bool, string) {
		return driver.deliveries("r-handover") > delivered, "not yet"
	})
	createMachineNode(t, name+"-node", name, ns, "web", name, "i-0handover", nodesetv1alpha1.FinalizerTermination, testHold)
	eventuallyInterrupted(t, kube, name+"-node", "the next leader drained the Node")
	eventually(t, 30*time.Second, "the warning acknowledged", func(context.Context) (bool, string) {
		return driver.wasAcked("r-handover"), "not yet"
	})
}

// eventuallyInterrupted waits until the named Node has an interruption
// recorded and is being deleted (drained).
func eventuallyInterrupted(t *testing.T, kube kubernetes.Interface, node, what string) {
	t.Helper()
	eventually(t, 30*time.Second, what, func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.Annotations[nodesetv1alpha1.AnnotationInterruption] != "" && n.DeletionTimestamp != nil,
			fmt.Sprintf("record %q, deletion %v", n.Annotations[nodesetv1alpha1.AnnotationInterruption], n.DeletionTimestamp)
	})
}
