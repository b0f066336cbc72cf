package plan

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// readyFor makes n Ready since d before testNow.
func readyFor(n *corev1.Node, d time.Duration) *corev1.Node {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(testNow.Add(-d))}}
	return n
}

func names(nodes []*corev1.Node) []string {
	out := []string{}
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

// TestAScaleDownRemovesNodesNotYetAvailableFirst: with minReadySeconds, a
// Node Ready for less than that is not available yet (status counts it so):
// a scale-down removes it before available ones, whatever the delete
// policy, as a ReplicaSet removes the pods Ready for the shortest time
// first. Outdated Nodes still go before up-to-date ones.
func TestAScaleDownRemovesNodesNotYetAvailableFirst(t *testing.T) {
	for _, tt := range []struct {
		name   string
		policy nodesetv1alpha1.DeletePolicy
		nodes  func() []*corev1.Node
		count  int
		want   []string
	}{
		{"oldest policy, the newest Node just came up", nodesetv1alpha1.DeletePolicyOldest, func() []*corev1.Node {
			return []*corev1.Node{
				readyFor(node("a", "team-a", "web", "h", 3*time.Hour, true), 3*time.Hour),
				readyFor(node("b", "team-a", "web", "h", 2*time.Hour, true), 2*time.Hour),
				readyFor(node("c", "team-a", "web", "h", time.Minute, true), 10*time.Second),
			}
		}, 1, []string{"c"}},
		{"newest policy, the oldest Node Ready again a moment ago", nodesetv1alpha1.DeletePolicyNewest, func() []*corev1.Node {
			return []*corev1.Node{
				readyFor(node("a", "team-a", "web", "h", 3*time.Hour, true), 10*time.Second),
				readyFor(node("b", "team-a", "web", "h", 2*time.Hour, true), 2*time.Hour),
				readyFor(node("c", "team-a", "web", "h", time.Hour, true), time.Hour),
			}
		}, 1, []string{"a"}},
		{"not Ready, then not yet available, then by policy", nodesetv1alpha1.DeletePolicyNewest, func() []*corev1.Node {
			return []*corev1.Node{
				readyFor(node("a", "team-a", "web", "h", 3*time.Hour, true), 10*time.Second),
				node("b", "team-a", "web", "h", 2*time.Hour, false),
				readyFor(node("c", "team-a", "web", "h", time.Hour, true), time.Hour),
			}
		}, 3, []string{"b", "a", "c"}},
		{"outdated before up-to-date, then not yet available first", nodesetv1alpha1.DeletePolicyNewest, func() []*corev1.Node {
			return []*corev1.Node{
				readyFor(node("a", "team-a", "web", "h", 3*time.Hour, true), 10*time.Second),
				readyFor(node("b", "team-a", "web", "stale", 2*time.Hour, true), 2*time.Hour),
				readyFor(node("c", "team-a", "web", "stale", 4*time.Hour, true), 20*time.Second),
				readyFor(node("d", "team-a", "web", "h", time.Hour, true), time.Hour),
			}
		}, 4, []string{"c", "b", "a", "d"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set := newSet(0)
			set.Spec.Strategy.Type = nodesetv1alpha1.OnDeleteStrategy
			set.Spec.DeletePolicy = tt.policy
			set.Spec.MinReadySeconds = 60
			nodes := tt.nodes()
			set.Spec.Replicas = ptr32(int32(len(nodes) - tt.count))
			p := Decide(set, "h", nodes, testNow)
			assert.Equal(t, tt.want, names(p.Remove))
			assert.Zero(t, p.Create)
		})
	}
}

// TestARolloutRemovesOutdatedNodesNotYetAvailableFirst: among outdated
// Nodes, one Ready for less than minReadySeconds goes before an available
// one: removing it leaves the available one serving. It still costs one
// of maxUnavailable (it runs pods).
func TestARolloutRemovesOutdatedNodesNotYetAvailableFirst(t *testing.T) {
	set := rollingSet(2, intstr.FromInt32(1), intstr.FromInt32(1))
	set.Spec.MinReadySeconds = 60
	available := readyFor(node("x", "team-a", "web", "old", time.Minute*2, true), time.Hour)
	available.CreationTimestamp = metav1.NewTime(testNow.Add(-time.Minute)) // the newest: first by policy
	flapped := readyFor(node("y", "team-a", "web", "old", 3*time.Hour, true), 10*time.Second)
	p := Decide(set, "new", []*corev1.Node{available, flapped}, testNow)
	assert.Equal(t, []string{"y"}, names(p.Remove), "the Node not yet available goes, the available one stays")
	assert.Equal(t, 1, p.Create)
}

// TestARolloutRightAfterAScaleUpRemovesWhatMaxUnavailableAllows: every
// outdated Node Ready for less than minReadySeconds (the set was scaled up
// a moment before its template changed). Each costs one of
// maxUnavailable, and counts as serving until then: as many go as
// maxUnavailable allows, all of them at 100 %, as a Deployment scales its
// old ReplicaSet down by what maxUnavailable allows whether or not its
// pods are available yet. None going would hold the rollout for
// minReadySeconds with nothing to wait for.
func TestARolloutRightAfterAScaleUpRemovesWhatMaxUnavailableAllows(t *testing.T) {
	for _, tt := range []struct {
		name               string
		surge, unavailable intstr.IntOrString
		want               int
	}{
		{"maxUnavailable 2 of 6", intstr.FromInt32(0), intstr.FromInt32(2), 2},
		{"maxUnavailable 100%", intstr.FromInt32(0), intstr.FromString("100%"), 6},
		{"maxUnavailable 0", intstr.FromInt32(1), intstr.FromInt32(0), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set := rollingSet(6, tt.surge, tt.unavailable)
			set.Spec.MinReadySeconds = 600
			var nodes []*corev1.Node
			for i := range 6 {
				nodes = append(nodes, readyFor(node(string(rune('a'+i)), "team-a", "web", "old", time.Minute, true), 30*time.Second))
			}
			p := Decide(set, "new", nodes, testNow)
			assert.Len(t, p.Remove, tt.want)
		})
	}
}

func ptr32(v int32) *int32 { return &v }

// TestAScaleDownMidRolloutKeepsTheAvailableOutdatedNode: scaled down to
// 1 mid-rollout, with two new Nodes Ready for less than minReadySeconds
// and one available outdated Node. The new Node beyond replicas is not
// available: it must not count as serving, or the outdated Node would go
// and leave no available Node where maxUnavailable 0 promises one.
func TestAScaleDownMidRolloutKeepsTheAvailableOutdatedNode(t *testing.T) {
	set := rollingSet(1, intstr.FromInt32(1), intstr.FromInt32(0))
	set.Spec.MinReadySeconds = 60
	old := readyFor(node("a", "team-a", "web", "old", time.Hour, true), time.Hour)
	c := readyFor(node("c", "team-a", "web", "new", time.Minute, true), 10*time.Second)
	d := readyFor(node("d", "team-a", "web", "new", time.Minute, true), 10*time.Second)
	p := Decide(set, "new", []*corev1.Node{old, c, d}, testNow)
	assert.Empty(t, names(p.Remove), "no Node goes while the outdated one is the only available one")
}
