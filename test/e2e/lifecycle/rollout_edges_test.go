package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestMinReadySecondsRolloutSurvivesTakeover: a rollout with
// minReadySeconds waits for each new Node to have been Ready that long. A
// nodeset controller that takes over during the wait finds the status
// already right and writes nothing; it must still go on when the wait ends,
// not at the next resync or Node heartbeat minutes later.
func TestMinReadySecondsRolloutSurvivesTakeover(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ns := createNamespace(t, "roll-minready")
	createClass(t, "roll-minready-sim", nil)
	createRollingSet(t, ns, "db", "roll-minready-sim", 1, intstr.FromInt32(1), intstr.FromInt32(0))
	const minReady = 20 * time.Second
	updateSet(t, ns, "db", func(s *nodesetv1alpha1.NodeSet) { s.Spec.MinReadySeconds = int32(minReady / time.Second) })
	eventually(t, 2*time.Minute, "1 node", rolledOut(c, t, ns, "db", 1))
	eventually(t, minReady+time.Minute, "the node available", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return set.Status.AvailableReplicas == 1, fmt.Sprintf("%d available", set.Status.AvailableReplicas)
	})

	updateSet(t, ns, "db", setVersion("2"))
	eventually(t, time.Minute, "the new node Ready, not yet available", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := set.Status
		return s.ObservedGeneration == set.Generation && s.Replicas == 2 && s.ReadyReplicas == 2 && s.AvailableReplicas == 1,
			fmt.Sprintf("replicas %d ready %d available %d", s.Replicas, s.ReadyReplicas, s.AvailableReplicas)
	})
	start := time.Now()
	c.restart(t, c.nodeset, syscall.SIGKILL)
	eventually(t, minReady+time.Minute, "rolled out after minReadySeconds", rolledOut(c, t, ns, "db", 1))
	t.Logf("rolled out %s after the takeover", time.Since(start).Round(time.Second))
}

// TestClassEditKeepsRolloutStatus: an admin's edit of a NodeClass that
// changes no node (its limits) is validated by the node controller in a
// moment; meanwhile the status of its NodeSets keeps saying their Nodes are
// up to date: no template hash lost, no UP-TO-DATE 0, no rolling update
// that is not there.
func TestClassEditKeepsRolloutStatus(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "classedit-status")
	createClass(t, "classedit-sim", nil)
	createRollingSet(t, ns, "web", "classedit-sim", 2, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "2 nodes", rolledOut(c, t, ns, "web", 2))
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	hash := set.Status.TemplateHash

	watchCtx, stop := context.WithCancel(ctx)
	w, err := cs.NodesetV1alpha1().NodeSets(ns).Watch(watchCtx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", "web").String(), ResourceVersion: set.ResourceVersion})
	require.NoError(t, err)
	var (
		mu         sync.Mutex
		violations []string
		seen       int
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*nodesetv1alpha1.NodeSet)
			if !ok {
				continue
			}
			mu.Lock()
			seen++
			progressing := meta.FindStatusCondition(s.Status.Conditions, nodesetv1alpha1.NodeSetProgressing)
			if s.Status.TemplateHash != hash || s.Status.UpdatedReplicas != 2 ||
				(progressing != nil && progressing.Reason == "RollingUpdate") {
				violations = append(violations, fmt.Sprintf("templateHash %q, updatedReplicas %d, Progressing %+v",
					s.Status.TemplateHash, s.Status.UpdatedReplicas, progressing))
			}
			mu.Unlock()
		}
	}()
	defer func() { stop(); <-done }()

	for i := range 3 {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "classedit-sim", metav1.GetOptions{})
			if err != nil {
				return err
			}
			class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To(int32(100 + i))}
			_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
			return err
		}))
		waitClassValidGeneration(t, "classedit-sim")
	}
	// A change of the set after the edits: once the watch has it, it has
	// every status written during them.
	updateSet(t, ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Labels = map[string]string{"example.com/checked": "yes"} })
	eventually(t, time.Minute, "the set's change watched", func(context.Context) (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return seen > 0, fmt.Sprintf("%d events", seen)
	})
	eventually(t, time.Minute, "status observed", observed(t, ns, "web"))
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, violations, "the status during the class edits")
}

// waitClassValidGeneration waits until the node controller judged the
// class's current generation Valid.
func waitClassValidGeneration(t *testing.T, name string) {
	t.Helper()
	_, cs := clients(t)
	eventually(t, time.Minute, "NodeClass "+name+" validated", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == class.Generation, fmt.Sprintf("Valid: %+v", cond)
	})
}
