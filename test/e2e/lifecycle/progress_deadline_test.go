package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodesetcontroller "nodeset.dev/nodeset/pkg/controller/nodeset"
)

// TestAMachineThatNeverRegistersMissesTheProgressDeadline: a NodeSet whose
// machine never registers reports ProgressDeadlineExceeded once
// progressDeadlineSeconds pass without progress: when nothing else
// happens meanwhile (the registration timeout far off), and when its
// machine is replaced again and again (each replacement is no progress).
// Scaled to 0 the set is done: Complete, with no progress time.
func TestAMachineThatNeverRegistersMissesTheProgressDeadline(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ns := createNamespace(t, "deadline")
	for _, tc := range []struct {
		class        string
		registration time.Duration
	}{
		{"quiet-never-ready", 10 * time.Minute},
		{"churning-never-ready", 2 * time.Second},
	} {
		t.Run(tc.class, func(t *testing.T) {
			createClass(t, tc.class, func(class *nodesetv1alpha1.NodeClass) {
				class.Spec.Simulated.FailurePercent = ptr.To[int32](100)
				class.Spec.RegistrationTimeout = &metav1.Duration{Duration: tc.registration}
			})
			_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(context.Background(), &nodesetv1alpha1.NodeSet{
				ObjectMeta: metav1.ObjectMeta{Name: tc.class, Namespace: ns},
				Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: tc.class, Replicas: ptr.To[int32](1),
					ProgressDeadlineSeconds: ptr.To[int32](6)},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
			eventually(t, 2*time.Minute, "ProgressDeadlineExceeded", func(ctx context.Context) (bool, string) {
				set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, tc.class, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				progressing := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetProgressing)
				if progressing == nil || set.Status.LastProgressTime == nil {
					return false, fmt.Sprintf("Progressing %v, lastProgressTime %v", progressing, set.Status.LastProgressTime)
				}
				return progressing.Status == metav1.ConditionFalse && progressing.Reason == nodesetcontroller.ReasonProgressDeadlineExceeded &&
						strings.HasPrefix(progressing.Message, "no progress for 6s (progressDeadlineSeconds) since "+set.Status.LastProgressTime.UTC().Format(time.RFC3339)),
					fmt.Sprintf("Progressing %s %s: %s", progressing.Status, progressing.Reason, progressing.Message)
			})
			scale(t, ns, tc.class, 0)
			eventually(t, 2*time.Minute, "scaled to 0, done", func(ctx context.Context) (bool, string) {
				set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, tc.class, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				progressing := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetProgressing)
				if progressing == nil {
					return false, "no Progressing condition"
				}
				return progressing.Reason == nodesetcontroller.ReasonComplete && set.Status.LastProgressTime == nil,
					fmt.Sprintf("Progressing %s: %s, lastProgressTime %v", progressing.Reason, progressing.Message, set.Status.LastProgressTime)
			})
			eventually(t, 2*time.Minute, "no node left", converged(c, t, ns, tc.class, 0))
		})
	}
}

// TestKubectlNodesetRolloutStatusWaitsForTheRollout: run by the tenant
// right after a template edit, kubectl nodeset rollout status returns once
// every Node is of the new template and the old ones are gone, not before
// (the readyReplicas of before the edit are no answer); it fails for a set
// that misses its progress deadline.
func TestKubectlNodesetRolloutStatusWaitsForTheRollout(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	ns := createNamespace(t, "rollout-status")
	createClass(t, "rollout-status-sim", nil)
	createSet(t, ns, "web", "rollout-status-sim", 2)
	tenant(t, "tenant-a", ns)
	rolloutStatus := func(name string) (string, string) {
		return plugin(t, "tenant-a", "-n", ns, "rollout", "status", name, "--timeout=3m")
	}
	// rolledOut runs rollout status on web, which must succeed, and
	// returns the set's Nodes then: 2, none of them going.
	rolledOut := func(after string) []corev1.Node {
		t.Helper()
		out, errText := rolloutStatus("web")
		require.Empty(t, errText, out)
		require.True(t, strings.HasSuffix(out, "NodeSet \"web\" successfully rolled out\n"), out)
		nodes, err := setNodes(ctx, t, ns, "web")
		require.NoError(t, err)
		require.Len(t, nodes, 2, "after %s, the old nodes are gone: %s", after, out)
		for _, n := range nodes {
			require.Nil(t, n.DeletionTimestamp, "after %s: node %s: %s", after, n.Name, out)
		}
		return nodes
	}
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "web", 2))
	updateSet(t, ns, "web", func(s *nodesetv1alpha1.NodeSet) {
		s.Spec.Template.Labels = map[string]string{"tier": "edited"}
	})
	for _, n := range rolledOut("the set's edit") {
		require.Equal(t, "edited", n.Labels["tier"], "node %s is of the new template", n.Name)
	}

	// An edit of the class gives the set no new generation: run right
	// after it, rollout status waits for the set to show the class's new
	// generation (validated first), then for its rollout.
	updateClass(t, "rollout-status-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.NodeTemplate.Labels = map[string]string{"pool": "edited"}
	})
	before := map[string]bool{}
	for _, n := range rolledOut("the class's edit") {
		require.Equal(t, "edited", n.Labels["pool"], "node %s is of the class's new template", n.Name)
		before[n.Name] = true
	}

	// The tenant's restart replaces every node, through the schema and
	// the controllers' tenant rules (its annotation is under nodeset.dev/);
	// a paused set's restart is refused until it is resumed.
	out, errText := plugin(t, "tenant-a", "-n", ns, "rollout", "pause", "web")
	require.Empty(t, errText, out)
	require.Equal(t, "nodeset.nodeset.dev/web paused\n", out)
	_, errText = plugin(t, "tenant-a", "-n", ns, "rollout", "restart", "web")
	require.Contains(t, errText, `NodeSet "web" is paused`)
	out, errText = plugin(t, "tenant-a", "-n", ns, "rollout", "resume", "web")
	require.Empty(t, errText, out)
	out, errText = plugin(t, "tenant-a", "-n", ns, "rollout", "restart", "web")
	require.Empty(t, errText, out)
	require.Equal(t, "nodeset.nodeset.dev/web restarted\n", out)
	for _, n := range rolledOut("the restart") {
		require.False(t, before[n.Name], "node %s is new", n.Name)
		require.NotEmpty(t, n.Annotations[nodesetv1alpha1.AnnotationRestartedAt], "node %s", n.Name)
	}

	createClass(t, "rollout-status-never-ready", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Simulated.FailurePercent = ptr.To[int32](100)
		class.Spec.RegistrationTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	})
	_, cs := clients(t)
	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: ns},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "rollout-status-never-ready", Replicas: ptr.To[int32](1),
			ProgressDeadlineSeconds: ptr.To[int32](5)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	out, errText = rolloutStatus("stuck")
	require.Contains(t, errText, `error: NodeSet "stuck" exceeded its progress deadline: no progress for 5s`, out)
	scale(t, ns, "stuck", 0)
	eventually(t, 2*time.Minute, "no node left", converged(c, t, ns, "stuck", 0))
}

// TestRolloutStatusTellsAWaitFromADriverNobodyServes: run by the tenant
// right after the admin made a class and the tenant a set of it, kubectl
// nodeset rollout status waits while the class waits for its node
// controller's verdict (NodeClassNotValidated) and returns once the set
// is rolled out. For a class whose driver no node controller claims (here
// eks-asg), the set says DriverNotServed once the claim grace has passed
// (--driver-claim-grace, 15 s in these tests), naming the claim Lease,
// and rollout status fails with that reason instead of waiting for its
// --timeout.
func TestRolloutStatusTellsAWaitFromADriverNobodyServes(t *testing.T) {
	startControllers(t)
	ctx := context.Background()
	_, cs := clients(t)
	ns := createNamespace(t, "claims")
	tenant(t, "tenant-a", ns)

	createClass(t, "claims-fresh-sim", nil)
	createSet(t, ns, "web", "claims-fresh-sim", 1)
	out, errText := plugin(t, "tenant-a", "-n", ns, "rollout", "status", "web", "--timeout=3m")
	require.Empty(t, errText, out)
	require.True(t, strings.HasSuffix(out, "NodeSet \"web\" successfully rolled out\n"), out)

	createClass(t, "claims-unserved", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Driver, class.Spec.Simulated = nodesetv1alpha1.DriverEKSASG, nil
		class.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Region: "eu-west-1", InstanceType: "m6i.large"}
	})
	createSet(t, ns, "unserved", "claims-unserved", 1)
	start := time.Now()
	out, errText = plugin(t, "tenant-a", "-n", ns, "rollout", "status", "unserved", "--timeout=3m")
	require.Contains(t, errText, `NodeSet "unserved" is not accepted (DriverNotServed): no node controller serves driver "eks-asg", so nothing validates NodeClass "claims-unserved"`, out)
	require.Contains(t, errText, "(Lease nodeset-system/nodeset-driver-eks-asg)", out)
	require.Less(t, time.Since(start), 3*time.Minute, "failed, not timed out")
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "unserved", metav1.GetOptions{})
	require.NoError(t, err)
	nodes, err := setNodes(ctx, t, ns, "unserved")
	require.NoError(t, err)
	require.Empty(t, nodes, "a set nobody serves gets no Node: %+v", set.Status)
}
