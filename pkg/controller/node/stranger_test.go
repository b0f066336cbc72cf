package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// sealingClass is a class whose Nodes nodeset seals since sealedSince.
func sealingClass(name string, sealedSince time.Time) *nodesetv1alpha1.NodeClass {
	class := testClass(name)
	class.Status.SealedSince = &metav1.Time{Time: sealedSince}
	return class
}

// registeredByItsKubelet is a Node as a kubelet can register its own: with
// a NodeSet's labels and nodeset's finalizer (NodeRestriction checks
// neither), a host and a status, and no seal (which it cannot add), at
// created.
func registeredByItsKubelet(name, class string, created time.Time) *corev1.Node {
	node := markReady(setNode(name, class))
	node.CreationTimestamp = metav1.NewTime(created)
	node.Spec.Taints = nil
	node.Spec.ProviderID = "test:///" + name
	node.Status.NodeInfo.KubeletVersion = "v1.35.0"
	return node
}

func notSealedEvents(events []string) []string { return eventsOf(events, ReasonNodeNotSealed) }

// TestANodeAKubeletRegisteredWithASetsLabelsIsMarkedNoneOfNodesets: a
// Node that holds nodeset's finalizer and claims a NodeSet, made after its
// class began sealing its Nodes and unsealed, is none of nodeset's: it is
// marked with the seal "none" (which its kubelet cannot take off), told
// about once, and no machine is made or removed for it, its deletion
// included. The same Node made before sealedSince is an earlier release's
// and is sealed as labelled.
func TestANodeAKubeletRegisteredWithASetsLabelsIsMarkedNoneOfNodesets(t *testing.T) {
	since := testNow.Add(-time.Hour)
	for _, tt := range []struct {
		name    string
		node    func() *corev1.Node
		deleted bool
	}{
		{name: "registered Ready", node: func() *corev1.Node { return registeredByItsKubelet("rogue", "sim", since.Add(time.Minute)) }},
		{name: "registered with no host, as a Node waiting for its machine", node: func() *corev1.Node {
			node := setNode("rogue", "sim")
			node.CreationTimestamp = metav1.NewTime(since)
			return node
		}},
		{name: "deleted", deleted: true, node: func() *corev1.Node { return registeredByItsKubelet("rogue", "sim", since.Add(time.Minute)) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node := tt.node()
			if tt.deleted {
				node.DeletionTimestamp = &metav1.Time{Time: testNow}
			}
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{sealingClass("sim", since)}, node)
			require.NoError(t, f.sync("rogue"))
			got := f.get("rogue")
			assert.Equal(t, nodesetv1alpha1.SealNone, got.Labels[nodesetv1alpha1.LabelSeal])
			assert.True(t, nodeutil.Tampered(got.Labels), "a member of no NodeSet or class")
			assert.Equal(t, "team-a", got.Labels[nodesetv1alpha1.LabelNodeSetNamespace], "its labels are left as they are")
			events := notSealedEvents(f.events())
			require.Len(t, events, 1)
			assert.Contains(t, events[0], "Warning NodeNotSealed The Node claims NodeSet team-a/web of NodeClass sim and holds finalizer nodeset.dev/termination, but nodeset did not make it")
			assert.Contains(t, events[0], since.UTC().Format(time.RFC3339))

			require.NoError(t, f.sync("rogue"))
			require.NoError(t, f.sync("rogue"))
			assert.Empty(t, f.events(), "marked once, then left alone")
			assert.Zero(t, f.driver.creates, "no machine made for it")
			assert.Empty(t, f.driver.deletes, "none removed for it")
			assert.Contains(t, f.get("rogue").Finalizers, nodesetv1alpha1.FinalizerTermination, "its finalizer is taken off by hand")
		})
	}

	t.Run("made before sealedSince, not past yet: an earlier release's, sealed as labelled", func(t *testing.T) {
		later := testNow.Add(time.Minute)
		old := registeredByItsKubelet("old", "sim", testNow.Add(-time.Second))
		f := newFixture(t, []*nodesetv1alpha1.NodeClass{sealingClass("sim", later)}, old)
		f.driver.machines["old"] = "test:///old"
		require.NoError(t, f.sync("old"))
		assert.Equal(t, nodeutil.Seal("team-a", "web", "sim"), f.get("old").Labels[nodesetv1alpha1.LabelSeal])
		assert.Empty(t, notSealedEvents(f.events()))
	})

	t.Run("made before sealedSince, claiming a set once it is past", func(t *testing.T) {
		// A kubelet's Node older than the upgrade that adds a set's labels
		// and the finalizer after it: no earlier release's Node is left
		// unsealed by then.
		older := registeredByItsKubelet("older", "sim", since.Add(-time.Hour))
		f := newFixture(t, []*nodesetv1alpha1.NodeClass{sealingClass("sim", since)}, older)
		require.NoError(t, f.sync("older"))
		assert.Equal(t, nodesetv1alpha1.SealNone, f.get("older").Labels[nodesetv1alpha1.LabelSeal])
		assert.Len(t, notSealedEvents(f.events()), 1)
		assert.Zero(t, f.driver.creates)
	})

	t.Run("a class no node controller of this release served yet takes it at its labels' word", func(t *testing.T) {
		f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, registeredByItsKubelet("old", "sim", testNow))
		f.driver.machines["old"] = "test:///old"
		require.NoError(t, f.sync("old"))
		assert.Equal(t, nodeutil.Seal("team-a", "web", "sim"), f.get("old").Labels[nodesetv1alpha1.LabelSeal])
	})
}

// TestTheSealPassMarksNodesNodesetDidNotMake: the pass that seals an
// earlier release's Nodes marks a Node made since sealedSince instead,
// whatever driver its annotation names, and seals the one made before.
func TestTheSealPassMarksNodesNodesetDidNotMake(t *testing.T) {
	since := testNow.Add(5 * time.Minute) // an upgrade's grace, not past yet
	rogue := registeredByItsKubelet("rogue", "sim", since)
	rogue.Annotations = map[string]string{nodesetv1alpha1.AnnotationDriver: "elsewhere"}
	old := registeredByItsKubelet("old", "sim", testNow.Add(-time.Minute))
	late := registeredByItsKubelet("late", "sim", testNow.Add(-time.Minute))
	late.Finalizers = nil
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{sealingClass("sim", since)}, rogue, old, late)
	f.controller.sealUnsealed(t.Context())
	assert.Equal(t, nodesetv1alpha1.SealNone, f.get("rogue").Labels[nodesetv1alpha1.LabelSeal])
	assert.Equal(t, nodeutil.Seal("team-a", "web", "sim"), f.get("old").Labels[nodesetv1alpha1.LabelSeal])
	assert.Len(t, notSealedEvents(f.events()), 1)

	// Past sealedSince, an unsealed Node that holds the finalizer now is
	// a kubelet's, however old.
	f.now = since
	late = f.get("late")
	late.Finalizers = []string{nodesetv1alpha1.FinalizerTermination}
	late, err := f.kube.CoreV1().Nodes().Update(t.Context(), late, metav1.UpdateOptions{})
	require.NoError(t, err)
	f.updateCache(late)
	f.controller.sealUnsealed(t.Context())
	assert.Equal(t, nodesetv1alpha1.SealNone, f.get("late").Labels[nodesetv1alpha1.LabelSeal])
}

// TestAKubeletsOwnNodeOfAClassIsNotTakenForALoneNode: since a class's
// Nodes are sealed, nodeset seals a lone Node before its machine is made,
// so an unsealed Node a kubelet registered with the class label (its Node
// deleted by hand, its finalizer taken off first) does not get its
// machine taken for a lone Node of the class, and that machine, which no
// Node of nodeset's accounts for any more, is collected. Before
// sealedSince the machine is taken for the Node's, as before, and so is a
// sealed Node's whose finalizer its kubelet took off.
func TestAKubeletsOwnNodeOfAClassIsNotTakenForALoneNode(t *testing.T) {
	since := testNow.Add(-time.Hour)
	kubelets := func(created time.Time) *corev1.Node {
		node := loneNode("mine", "sim", nil)
		node.CreationTimestamp = metav1.NewTime(created)
		node.Spec.ProviderID = "test:///mine"
		node.Status.NodeInfo.KubeletVersion = "v1.35.0"
		return node
	}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{sealingClass("sim", since)}, kubelets(since.Add(time.Minute)))
	synced(f)
	f.driver.machines["mine"] = "test:///mine"
	f.driver.createdAt = map[string]int64{"mine": f.now.Add(-time.Hour).Unix()}
	require.NoError(t, f.sync("mine"))
	got := f.get("mine")
	assert.NotContains(t, got.Finalizers, nodesetv1alpha1.FinalizerTermination, "not held")
	assert.NotContains(t, got.Labels, nodesetv1alpha1.LabelSeal, "not sealed")
	assert.Contains(t, strings.Join(f.events(), "\n"), "Warning "+ReasonForeignNode+" Not provisioned: a kubelet reports on it, and it was registered after NodeClass sim began sealing its Nodes")
	removed, err := f.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"mine"}, removed, "its machine is no Node's of nodeset's")

	before := newFixture(t, []*nodesetv1alpha1.NodeClass{sealingClass("sim", since)}, kubelets(since.Add(-time.Minute)))
	synced(before)
	before.driver.machines["mine"] = "test:///mine"
	before.driver.createdAt = map[string]int64{"mine": before.now.Add(-time.Hour).Unix()}
	require.NoError(t, before.sync("mine"))
	assert.Contains(t, before.get("mine").Finalizers, nodesetv1alpha1.FinalizerTermination, "an earlier release's: held")
	removed, err = before.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	assert.Empty(t, removed)

	unheld := registeredByItsKubelet("web-a", "sim", since.Add(time.Minute))
	unheld.Labels[nodesetv1alpha1.LabelSeal] = nodeutil.Seal("team-a", "web", "sim")
	unheld.Finalizers = nil
	sealed := newFixture(t, []*nodesetv1alpha1.NodeClass{sealingClass("sim", since)}, unheld)
	sealed.driver.machines["web-a"] = "test:///web-a"
	require.NoError(t, sealed.sync("web-a"))
	assert.Contains(t, sealed.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination, "nodeset's own Node: held again")
}

// TestAMachineIsAccountedForOnlyByANodeOfNodesets: orphan collection keeps
// a machine whose Node nodeset made or holds (sealed, relabelled or not;
// held and made before sealedSince, marked none of nodeset's or not; a
// lone Node no kubelet reported on yet), and collects one whose Node of
// its name was made since sealedSince and marked none of nodeset's.
func TestAMachineIsAccountedForOnlyByANodeOfNodesets(t *testing.T) {
	since := testNow.Add(-time.Hour)
	relabelled := sealedSetNode("relabelled", "sim")
	relabelled.Labels[nodesetv1alpha1.LabelNodeSetNamespace] = "victim"
	marked := registeredByItsKubelet("marked", "sim", since)
	marked.Labels[nodesetv1alpha1.LabelSeal] = nodesetv1alpha1.SealNone
	earlier := registeredByItsKubelet("earlier", "sim", since.Add(-time.Minute))
	markedLate := registeredByItsKubelet("marked-late", "sim", since.Add(-time.Minute))
	markedLate.Labels[nodesetv1alpha1.LabelSeal] = nodesetv1alpha1.SealNone
	waiting := loneNode("waiting", "sim", nil)
	waiting.CreationTimestamp = metav1.NewTime(since.Add(time.Minute))
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{sealingClass("sim", since)}, sealedSetNode("sealed", "sim"), relabelled, marked, markedLate, earlier, waiting)
	synced(f)
	f.driver.createdAt = map[string]int64{}
	for _, name := range []string{"sealed", "relabelled", "marked", "marked-late", "earlier", "waiting"} {
		f.driver.machines[name] = "test:///" + name
		f.driver.createdAt[name] = f.now.Add(-time.Hour).Unix()
	}
	removed, err := f.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"marked"}, removed)
}
