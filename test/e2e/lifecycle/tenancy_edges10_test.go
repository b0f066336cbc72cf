package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodesetv1alpha1client "nodeset.dev/nodeset/pkg/generated/clientset/versioned/typed/nodeset/v1alpha1"
)

// TestTenantEdgeSetsStayTheirOwnAndQuiet: a namespace's editor, with the
// webhook away, writes NodeSets at the edges the schema admits: the
// largest int32 for replicas and its autoscaling bounds, 100% surge and
// unavailability at the namespace's limit, empty maps where nil
// is the default, no replicas at all, a label value the schema admits and
// Kubernetes does not, and a marker of its own in its annotations and the
// Node annotations it may set. The controllers act on each within its
// rules (no Node past the class's limits, none for a refused set), echo
// none of the tenant's text into an Event outside its namespace or into
// a NodeClass, and, once each set is judged, write nothing more: a set at
// rest costs the controllers, which every tenant shares, no write loop.
func TestTenantEdgeSetsStayTheirOwnAndQuiet(t *testing.T) {
	c := startControllers(t)
	kube, admin := clients(t)
	ctx := context.Background()
	attacker, other := createNamespace(t, "t10-edges-a"), createNamespace(t, "t10-edges-o")
	const class = "t10-edges"
	createClass(t, class, func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](8), MaxNodesPerNamespace: ptr.To[int32](4)}
	})
	peak := watchPeak(t, class)
	withoutWebhook(t)
	_, cs := tenant(t, "tenant-a", attacker)
	sets := cs.NodesetV1alpha1().NodeSets(attacker)
	marker := "t10marker" + strings.Repeat("x", 1000)

	intMax := tenantSet("int-max", class, 2147483647)
	intMax.Spec.Autoscaling = &nodesetv1alpha1.Autoscaling{MinReplicas: 2147483647, MaxReplicas: 2147483647}
	surge := tenantSet("surge", class, 2)
	surge.Spec.Strategy.RollingUpdate = &nodesetv1alpha1.RollingUpdateNodeSet{
		MaxSurge: ptr.To(intstr.FromString("100%")), MaxUnavailable: ptr.To(intstr.FromString("100%"))}
	empty := tenantSet("empty", class, 1)
	empty.Spec.Template = nodesetv1alpha1.NodeTemplate{Labels: map[string]string{}, Annotations: map[string]string{}, Taints: []nodesetv1alpha1.Taint{}}
	empty.Annotations = map[string]string{"example.com/note": strings.Repeat(marker, 100)}
	empty.Spec.Template.Annotations["example.com/note"] = marker
	unset := tenantSet("unset", class, 0)
	unset.Spec.Replicas = nil
	unicode := tenantSet("unicode", class, 1)
	unicode.Spec.Template.Labels = map[string]string{"example.com/team": "équipe"}
	zero := tenantSet("zero", class, 0)
	zero.Spec.Autoscaling = &nodesetv1alpha1.Autoscaling{MinReplicas: 0, MaxReplicas: 0}
	zero.Spec.Paused = true
	for _, set := range []*nodesetv1alpha1.NodeSet{surge, empty, unset, unicode, zero} {
		_, err := sets.Create(ctx, set, metav1.CreateOptions{})
		require.NoError(t, err, "%s: the schema admits it", set.Name)
	}

	acceptedWith(t, attacker, "unicode", "InvalidTemplate", `spec.template.labels["example.com/team"] value "équipe"`)
	eventually(t, 3*time.Minute, "surge, empty and unset", func(ctx context.Context) (bool, string) {
		for name, n := range map[string]int{"surge": 2, "empty": 1, "unset": 1} {
			if ok, msg := converged(c, t, attacker, name, n)(ctx); !ok {
				return false, name + ": " + msg
			}
		}
		return true, ""
	})
	nodes, err := setNodes(ctx, t, attacker, "empty")
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	assert.Equal(t, marker, nodes[0].Annotations["example.com/note"], "the Node carries the annotation the tenant may set")

	// A rollout of the set that may surge and lose every node at once.
	require.NoError(t, retryUpdateSet(ctx, sets, "surge", func(s *nodesetv1alpha1.NodeSet) {
		s.Spec.Template.Labels = map[string]string{"example.com/round": "2"}
	}))
	eventually(t, 3*time.Minute, "the surge set rolled", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, attacker, "surge")
		if err != nil {
			return false, err.Error()
		}
		rolled := 0
		for _, n := range nodes {
			if n.Labels["example.com/round"] == "2" && n.DeletionTimestamp == nil {
				rolled++
			}
		}
		return rolled == 2 && len(nodes) == 2, fmt.Sprintf("%d of %d Nodes rolled", rolled, len(nodes))
	})
	// The namespace's room is taken: the largest set gets none of it.
	_, err = sets.Create(ctx, intMax, metav1.CreateOptions{})
	require.NoError(t, err, "int-max: the schema admits it")
	acceptedWith(t, attacker, "int-max", "LimitExceeded", "spec.limits.maxNodesPerNamespace")
	ns, all := peak.peaks(attacker)
	assert.LessOrEqual(t, ns, 4, "the namespace never ran more than maxNodesPerNamespace")
	assert.LessOrEqual(t, all, 8, "the class never ran more than maxNodes")
	assert.GreaterOrEqual(t, ns, 4, "the watch saw the namespace's Nodes")

	// At rest: the attacker's sets are judged; a set of another namespace
	// made now converges, and meanwhile nothing of the attacker's is
	// written again.
	rest := map[string]string{}
	eventually(t, time.Minute, "every set's status is of its generation", func(ctx context.Context) (bool, string) {
		list, err := sets.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		want := map[string]string{"surge": "Accepted", "empty": "Accepted", "unset": "Accepted", "zero": "Accepted",
			"int-max": "LimitExceeded", "unicode": "InvalidTemplate"}
		for _, s := range list.Items {
			accepted := meta.FindStatusCondition(s.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			progressing := meta.FindStatusCondition(s.Status.Conditions, nodesetv1alpha1.NodeSetProgressing)
			if s.Status.ObservedGeneration != s.Generation || accepted == nil || accepted.Reason != want[s.Name] {
				return false, fmt.Sprintf("%s: %+v", s.Name, accepted)
			}
			if s.Name == "surge" && (progressing == nil || progressing.Reason != "Complete" || s.Status.UpdatedReplicas != 2) {
				return false, fmt.Sprintf("surge: %+v", progressing)
			}
			rest[s.Name] = s.ResourceVersion
		}
		return len(rest) == 6, fmt.Sprint(rest)
	})
	eventsBefore, listedBefore := eventCount(ctx, t, attacker)
	createSet(t, other, "probe", class, 2)
	eventually(t, 2*time.Minute, "the other namespace's set", converged(c, t, other, "probe", 2))
	list, err := sets.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, s := range list.Items {
		assert.Equal(t, rest[s.Name], s.ResourceVersion, "%s: written again while at rest (status %+v)", s.Name, s.Status.Conditions)
	}
	eventsAfter, listedAfter := eventCount(ctx, t, attacker)
	assert.Equal(t, eventsBefore, eventsAfter, "no Warning about the attacker's sets while they are at rest: before\n%s\nafter\n%s", listedBefore, listedAfter)

	// The tenant's marker is in no Event outside its namespace and in no
	// NodeClass.
	events, err := kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, e := range events.Items {
		if e.Namespace != attacker {
			assert.NotContains(t, e.Message, "t10marker", "Event %s/%s (%s on %s)", e.Namespace, e.Name, e.Reason, e.InvolvedObject.Name)
		}
		assert.LessOrEqual(t, len(e.Message), 40000, "Event %s/%s is bounded", e.Namespace, e.Name)
	}
	classes, err := admin.NodesetV1alpha1().NodeClasses().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, cl := range classes.Items {
		assert.NotContains(t, fmt.Sprint(cl.Status), "t10marker", "NodeClass %s", cl.Name)
	}
	for _, name := range []string{"int-max", "unicode", "zero"} {
		nodes, err := setNodes(ctx, t, attacker, name)
		require.NoError(t, err)
		assert.Empty(t, nodes, "%s has no Node", name)
	}
}

// eventCount sums the counts of the Warning Events in namespace (a
// refusal said again is one; the node controller's routine steps are told
// in Normal Events per period, after the fact), and lists them.
func eventCount(ctx context.Context, t *testing.T, namespace string) (int32, string) {
	t.Helper()
	kube, _ := clients(t)
	events, err := kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var n int32
	var listed []string
	for _, e := range events.Items {
		if e.Type != corev1.EventTypeWarning {
			continue
		}
		n += max(e.Count, 1)
		listed = append(listed, fmt.Sprintf("%s %s x%d: %.200s", e.InvolvedObject.Name, e.Reason, e.Count, e.Message))
	}
	return n, strings.Join(listed, "\n")
}

// retryUpdateSet changes a NodeSet through sets, again on a conflict.
func retryUpdateSet(ctx context.Context, sets nodesetv1alpha1client.NodeSetInterface, name string, mutate func(*nodesetv1alpha1.NodeSet)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		set, err := sets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(set)
		_, err = sets.Update(ctx, set, metav1.UpdateOptions{})
		return err
	})
}
