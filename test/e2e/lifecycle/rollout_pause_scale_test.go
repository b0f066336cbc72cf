package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// updateClass changes a NodeClass, retrying on conflicts.
func updateClass(t *testing.T, name string, mutate func(*nodesetv1alpha1.NodeClass)) {
	t.Helper()
	_, cs := clients(t)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(class)
		_, err = cs.NodesetV1alpha1().NodeClasses().Update(context.Background(), class, metav1.UpdateOptions{})
		return err
	}))
}

// TestScaleDownMidRolloutDropsSurplusNewNodes: a NodeSet of 4 with maxSurge
// 100% rolls to a class edit whose machines never register (a bad image),
// and is scaled to 1 meanwhile. At most replicas + maxSurge = 2 Nodes may
// then exist: the new Nodes beyond replicas go, the Ready old Node stays
// (the set's only available one). Rolling the class back ends the rollout
// with the old Node.
func TestScaleDownMidRolloutDropsSurplusNewNodes(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "roll-shrink")
	createClass(t, "roll-shrink-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.RegistrationTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	})
	createRollingSet(t, ns, "web", "roll-shrink-sim", 4, intstr.FromString("100%"), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "4 nodes", rolledOut(c, t, ns, "web", 4))
	w := watchFleet(t, ns, "web", 8, 1)

	updateClass(t, "roll-shrink-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Simulated.FailurePercent = ptr.To[int32](100)
	})
	_, cs := clients(t)
	eventually(t, time.Minute, "4 new nodes that do not come up", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return set.Status.UpdatedReplicas == 4 && set.Status.ReadyReplicas == 4,
			fmt.Sprintf("%d updated, %d Ready", set.Status.UpdatedReplicas, set.Status.ReadyReplicas)
	})

	scale(t, ns, "web", 1)
	eventually(t, time.Minute, "at most replicas + maxSurge = 2 nodes", func(ctx context.Context) (bool, string) {
		if ok, why := observed(t, ns, "web")(ctx); !ok {
			return false, why
		}
		nodes, err := setNodes(ctx, t, ns, "web")
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, n := range nodes {
			if n.DeletionTimestamp == nil && nodeutil.IsReady(&n) {
				ready++
			}
		}
		return len(nodes) <= 2 && ready == 1, fmt.Sprintf("%d nodes (terminating ones included), %d Ready", len(nodes), ready)
	})

	updateClass(t, "roll-shrink-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Simulated.FailurePercent = nil
	})
	eventually(t, 2*time.Minute, "rolled back to 1 node", rolledOut(c, t, ns, "web", 1))
	w.assertHeld(t)
}

// TestPauseMidRolloutKeepsItsNodes: a rollout paused once its surge Node
// was made stops where it is. The new Node, still booting, is not deleted,
// and once it is Ready no outdated Node is replaced; resuming finishes the
// rollout within its bounds.
func TestPauseMidRolloutKeepsItsNodes(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ns := createNamespace(t, "roll-pause")
	createClass(t, "roll-pause-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.RegistrationTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	})
	createRollingSet(t, ns, "api", "roll-pause-sim", 3, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "3 nodes", rolledOut(c, t, ns, "api", 3))
	before := nodeNames(t, ns, "api")
	w := watchFleet(t, ns, "api", 4, 3)

	// The new template's machines take 15s to boot: long enough to pause
	// the rollout while its first new Node comes up.
	updateClass(t, "roll-pause-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Simulated.BootDelay = &metav1.Duration{Duration: 15 * time.Second}
	})
	var canary string
	eventually(t, time.Minute, "the rollout's first new node", func(ctx context.Context) (bool, string) {
		for _, name := range nodeNames(t, ns, "api") {
			if !slices.Contains(before, name) {
				canary = name
				return true, ""
			}
		}
		return false, "no new node yet"
	})
	updateSet(t, ns, "api", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Paused = true })
	eventually(t, time.Minute, "paused", func(ctx context.Context) (bool, string) {
		if ok, why := observed(t, ns, "api")(ctx); !ok {
			return false, why
		}
		p := progressing(t, ns, "api")
		return p.Reason == "Paused", p.Reason + ": " + p.Message
	})
	kept := append(slices.Clone(before), canary)
	slices.Sort(kept)
	untouched(t, ns, "api", kept, "a rollout paused while its new node boots keeps every node")

	eventually(t, time.Minute, "the new node Ready, and seen Ready by the controller", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "api", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return set.Status.ReadyReplicas == 4, fmt.Sprintf("%d Ready", set.Status.ReadyReplicas)
	})
	untouched(t, ns, "api", kept, "a paused rollout replaces no outdated node")
	if p := progressing(t, ns, "api"); p.Reason != "Paused" {
		t.Errorf("Progressing %s: %s, want Paused", p.Reason, p.Message)
	}

	updateSet(t, ns, "api", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Paused = false })
	eventually(t, 3*time.Minute, "rolled out after resume", rolledOut(c, t, ns, "api", 3))
	w.assertHeld(t)
}
