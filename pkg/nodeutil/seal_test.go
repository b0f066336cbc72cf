package nodeutil

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestSealIsALabelValueOfItsThreeNames: the seal is a valid label value,
// the same for the same namespace, set and class, and another when any of
// them differs, however the three are cut.
func TestSealIsALabelValueOfItsThreeNames(t *testing.T) {
	seal := Seal("team-a", "web", "m5-large")
	assert.Empty(t, validation.IsValidLabelValue(seal))
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{40}$`), seal)
	assert.Equal(t, seal, Seal("team-a", "web", "m5-large"))
	seen := map[string]bool{seal: true}
	for _, other := range [][3]string{
		{"team-b", "web", "m5-large"}, {"team-a", "api", "m5-large"}, {"team-a", "web", "m5-xlarge"},
		{"team-aweb", "", "m5-large"}, {"team-a", "webm5-large", ""}, {"", "", "m5-large"}, {"team", "a-web", "m5-large"},
	} {
		s := Seal(other[0], other[1], other[2])
		assert.False(t, seen[s], "%v has a seal of its own", other)
		seen[s] = true
	}
	assert.Equal(t, seal, SealOf(map[string]string{nodesetv1alpha1.LabelNodeSetNamespace: "team-a", nodesetv1alpha1.LabelNodeSet: "web",
		nodesetv1alpha1.LabelNodeClass: "m5-large", "tier": "web"}))
}

func sealedLabels(namespace, set, class string) map[string]string {
	l := map[string]string{nodesetv1alpha1.LabelNodeClass: class, nodesetv1alpha1.LabelSeal: Seal(namespace, set, class)}
	if set != "" {
		l[nodesetv1alpha1.LabelNodeSetNamespace], l[nodesetv1alpha1.LabelNodeSet] = namespace, set
	}
	return l
}

// TestMembershipNeedsTheSeal: a Node whose NodeSet or class labels no
// longer match its seal is of no NodeSet and no class; one with no seal
// (made before the seal existed) is taken at its labels' word.
func TestMembershipNeedsTheSeal(t *testing.T) {
	relabel := func(l map[string]string, key, value string) map[string]string {
		out := map[string]string{}
		for k, v := range l {
			out[k] = v
		}
		if value == "" {
			delete(out, key)
		} else {
			out[key] = value
		}
		return out
	}
	own := sealedLabels("team-a", "web", "m5")
	unsealed := relabel(own, nodesetv1alpha1.LabelSeal, "")
	for _, tt := range []struct {
		name     string
		labels   map[string]string
		tampered bool
		set      string
		class    string
	}{
		{name: "sealed as labelled", labels: own, set: "team-a/web", class: "m5"},
		{name: "no seal", labels: unsealed, set: "team-a/web", class: "m5"},
		{name: "static, sealed", labels: sealedLabels("", "", "m5"), class: "m5"},
		{name: "another namespace", labels: relabel(own, nodesetv1alpha1.LabelNodeSetNamespace, "victim"), tampered: true},
		{name: "another set", labels: relabel(own, nodesetv1alpha1.LabelNodeSet, "api"), tampered: true},
		{name: "another class", labels: relabel(own, nodesetv1alpha1.LabelNodeClass, "m6"), tampered: true},
		{name: "no class", labels: relabel(own, nodesetv1alpha1.LabelNodeClass, ""), tampered: true},
		{name: "set labels removed", labels: relabel(relabel(own, nodesetv1alpha1.LabelNodeSet, ""), nodesetv1alpha1.LabelNodeSetNamespace, ""), tampered: true},
		{name: "static node joins a set", labels: relabel(relabel(sealedLabels("", "", "m5"), nodesetv1alpha1.LabelNodeSet, "web"),
			nodesetv1alpha1.LabelNodeSetNamespace, "team-a"), tampered: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.tampered, Tampered(tt.labels))
			ns, name, ok := NodeSetOf(tt.labels)
			if tt.set == "" {
				assert.False(t, ok)
			} else {
				assert.True(t, ok)
				assert.Equal(t, tt.set, ns+"/"+name)
			}
			assert.Equal(t, tt.class, ClassOf(tt.labels))
			setSelector := Members(labels.SelectorFromSet(labels.Set{nodesetv1alpha1.LabelNodeSetNamespace: tt.labels[nodesetv1alpha1.LabelNodeSetNamespace],
				nodesetv1alpha1.LabelNodeSet: tt.labels[nodesetv1alpha1.LabelNodeSet]}))
			assert.Equal(t, tt.set != "", setSelector.Matches(labels.Set(tt.labels)))
			assert.Equal(t, !tt.tampered && tt.labels[nodesetv1alpha1.LabelNodeClass] != "",
				ClassSelector(tt.labels[nodesetv1alpha1.LabelNodeClass]).Matches(labels.Set(tt.labels)))
		})
	}
}

// TestAListerLeavesOutTamperedNodes: a lister's List with Members, of a
// selector or of everything, does not return a relabelled Node.
func TestAListerLeavesOutTamperedNodes(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	tampered := sealedLabels("team-a", "web", "m5")
	tampered[nodesetv1alpha1.LabelNodeSetNamespace] = "victim"
	for name, l := range map[string]map[string]string{"own": sealedLabels("victim", "web", "m5"), "relabelled": tampered} {
		require.NoError(t, indexer.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}))
	}
	lister := corelisters.NewNodeLister(indexer)
	for _, selector := range []labels.Selector{
		Members(labels.Everything()),
		Members(labels.SelectorFromSet(labels.Set{nodesetv1alpha1.LabelNodeSetNamespace: "victim", nodesetv1alpha1.LabelNodeSet: "web"})),
		ClassSelector("m5"),
		Members(labels.Everything()).Add(),
		Members(labels.Everything()).DeepCopySelector(),
	} {
		nodes, err := lister.List(selector)
		require.NoError(t, err)
		var names []string
		for _, n := range nodes {
			names = append(names, n.Name)
		}
		assert.Equal(t, []string{"own"}, names, "selector %s", selector)
	}
}

// TestAStrangerIsAnUnsealedHeldNodeMadeSinceItsClassSeals: only a Node
// that holds nodeset's finalizer and has no seal can be none of nodeset's:
// one made at or after its class's status.sealedSince, or any such Node
// once that time is past.
func TestAStrangerIsAnUnsealedHeldNodeMadeSinceItsClassSeals(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	class := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "sim"},
		Status: nodesetv1alpha1.NodeClassStatus{SealedSince: &metav1.Time{Time: since}}}
	node := func(created time.Time, held bool, seal string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: "sim"}}}
		if held {
			n.Finalizers = []string{nodesetv1alpha1.FinalizerTermination}
		}
		if seal != "" {
			n.Labels[nodesetv1alpha1.LabelSeal] = seal
		}
		return n
	}
	before, after := since.Add(-time.Second), since.Add(time.Hour)
	assert.True(t, Stranger(node(since, true, ""), class, before), "made at sealedSince")
	assert.True(t, Stranger(node(after, true, ""), class, after))
	assert.False(t, Stranger(node(before, true, ""), class, before), "an earlier release's, before sealedSince is past")
	assert.True(t, Stranger(node(before, true, ""), class, since), "any unsealed one once sealedSince is past")
	assert.False(t, Stranger(node(after, true, Seal("", "", "sim")), class, after), "sealed")
	assert.False(t, Stranger(node(after, false, ""), class, after), "not held: no Node of any set or class anyway")
	assert.False(t, Stranger(node(after, true, ""), nil, after), "no class")
	assert.False(t, Stranger(node(after, true, ""), &nodesetv1alpha1.NodeClass{}, after), "a class not served since the seal")
	assert.False(t, MadeSealed(node(before, true, ""), class), "made before")
	assert.True(t, MadeSealed(node(since, true, ""), class))

	sealed, older, stranger := node(after, true, Seal("", "", "sim")), node(before, true, ""), node(after, true, "")
	assert.Equal(t, []*corev1.Node{sealed, older}, WithoutStrangers([]*corev1.Node{sealed, stranger, older}, class, before),
		"only the stranger is left out, the order kept")
	assert.Equal(t, []*corev1.Node{sealed}, WithoutStrangers([]*corev1.Node{sealed, stranger, older}, class, after))

	unheld := node(before, false, "")
	deleting := node(before, false, "")
	deleting.DeletionTimestamp = &metav1.Time{Time: since}
	assert.False(t, Held(unheld))
	assert.True(t, Held(deleting), "being deleted: released, or gone in a moment")
	assert.Equal(t, []*corev1.Node{sealed, older, deleting}, Replicas([]*corev1.Node{sealed, unheld, stranger, older, deleting}, class, before),
		"a set's replicas: held, and no stranger")
}

func TestAForeignNodeHasAHostButNoSealOrHold(t *testing.T) {
	classed := func(mutate func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: "sim"}}}
		mutate(n)
		return n
	}
	reported := func(n *corev1.Node) { n.Status.NodeInfo.KubeletVersion = "v1.37.2" }
	assert.True(t, Foreign(classed(reported)), "a kubelet reports on it")
	assert.True(t, Foreign(classed(func(n *corev1.Node) { n.Spec.ProviderID = "simulated:///elsewhere" })), "it has a providerID")
	assert.False(t, Foreign(classed(func(*corev1.Node) {})), "an admin's Node for a machine to come")
	assert.False(t, Foreign(classed(func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusNeverUpdated"}}
	})), "only kube-controller-manager's word on it, no kubelet's")
	assert.False(t, Foreign(classed(func(n *corev1.Node) {
		reported(n)
		n.Finalizers = []string{nodesetv1alpha1.FinalizerTermination}
	})), "held")
	assert.False(t, Foreign(classed(func(n *corev1.Node) {
		reported(n)
		n.Labels[nodesetv1alpha1.LabelSeal] = Seal("", "", "sim")
	})), "sealed, its finalizer taken off by its kubelet")
}
