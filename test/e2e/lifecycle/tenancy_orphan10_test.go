package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// nodePeak watches a class's Nodes and keeps the most each namespace, and
// the class, ever had at once, terminating Nodes included: their machines
// still run.
type nodePeak struct {
	mu     sync.Mutex
	owner  map[string]string // Node name -> its NodeSet's namespace
	peakNS map[string]int
	peak   int
}

func watchPeak(t *testing.T, class string) *nodePeak {
	t.Helper()
	kube, _ := clients(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &nodePeak{owner: map[string]string{}, peakNS: map[string]int{}}
	sel := nodesetv1alpha1.LabelNodeClass + "=" + class
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
	require.NoError(t, err)
	for i := range list.Items {
		p.observe(watch.Added, &list.Items[i])
	}
	w, err := kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				p.observe(ev.Type, n)
			}
		}
	}()
	return p
}

func (p *nodePeak) observe(kind watch.EventType, n *corev1.Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if kind == watch.Deleted {
		delete(p.owner, n.Name)
		return
	}
	ns, _, _ := nodeutil.NodeSetOf(n.Labels)
	p.owner[n.Name] = ns
	counts := map[string]int{}
	for _, o := range p.owner {
		counts[o]++
	}
	for o, c := range counts {
		p.peakNS[o] = max(p.peakNS[o], c)
	}
	p.peak = max(p.peak, len(p.owner))
}

func (p *nodePeak) peaks(namespace string) (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peakNS[namespace], p.peak
}

// TestTenantOrphaningNodeSetsStaysWithinLimits: a namespace's editor,
// with the webhook away, deletes its NodeSets in every way the API offers
// (propagationPolicy Orphan, Foreground, its own finalizer, a
// deletecollection) and makes them again at once, under the same name or
// by generateName, to run more Nodes than the class's limits let it. The
// Nodes of a deleted set are never orphaned, and, counted with their
// replacements from the moment they appear, never take the namespace past
// maxNodesPerNamespace nor the class past maxNodes. A set named like
// another namespace's takes none of its Nodes.
func TestTenantOrphaningNodeSetsStaysWithinLimits(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	attacker, victim := createNamespace(t, "t10-orphan-a"), createNamespace(t, "t10-orphan-v")
	const class = "t10-orphan"
	createClass(t, class, func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](3), MaxNodesPerNamespace: ptr.To[int32](2)}
	})
	peak := watchPeak(t, class)
	createSet(t, victim, "v", class, 1)
	eventually(t, 2*time.Minute, "the victim's set", converged(c, t, victim, "v", 1))
	victimNodes, err := setNodes(ctx, t, victim, "v")
	require.NoError(t, err)
	withoutWebhook(t)
	_, cs := tenant(t, "tenant-a", attacker)
	sets := cs.NodesetV1alpha1().NodeSets(attacker)

	// createAgain makes the set as soon as the API server lets it: the
	// deleted one may still be there, held by a finalizer.
	createAgain := func(set *nodesetv1alpha1.NodeSet) string {
		t.Helper()
		var made string
		eventually(t, 2*time.Minute, "made again: "+set.Name+set.GenerateName, func(ctx context.Context) (bool, string) {
			got, err := sets.Create(ctx, set.DeepCopy(), metav1.CreateOptions{})
			if err != nil {
				return false, err.Error()
			}
			made = got.Name
			return true, ""
		})
		return made
	}
	checkPeaks := func(what string) {
		t.Helper()
		ns, all := peak.peaks(attacker)
		assert.LessOrEqual(t, ns, 2, "%s: the namespace never ran more than maxNodesPerNamespace", what)
		assert.LessOrEqual(t, all, 3, "%s: the class never ran more than maxNodes", what)
		assert.GreaterOrEqual(t, ns, 2, "%s: the watch saw the namespace's Nodes", what)
	}

	_, err = sets.Create(ctx, tenantSet("a", class, 2), metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "the attacker's first set", converged(c, t, attacker, "a", 2))
	first, err := setNodes(ctx, t, attacker, "a")
	require.NoError(t, err)

	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationOrphan, metav1.DeletePropagationForeground, metav1.DeletePropagationBackground} {
		require.NoError(t, sets.Delete(ctx, "a", metav1.DeleteOptions{PropagationPolicy: ptr.To(policy)}), string(policy))
		createAgain(tenantSet("a", class, 2))
		eventually(t, 3*time.Minute, "made again after a "+string(policy)+" deletion", converged(c, t, attacker, "a", 2))
		checkPeaks(string(policy))
	}
	kube, _ := clients(t)
	for _, n := range first {
		_, err := kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "the first set's Node %s went with it, orphaned or not: %v", n.Name, err)
	}

	// Its own finalizer holds the set, not its Nodes; a set by
	// generateName takes its room only once they are gone.
	held, err := sets.Get(ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	held.Finalizers = append(held.Finalizers, "example.com/hold")
	_, err = sets.Update(ctx, held, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, sets.Delete(ctx, "a", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}))
	generated := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{GenerateName: "a-"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: class, Replicas: ptr.To[int32](2)}}
	g := createAgain(generated)
	eventually(t, 3*time.Minute, "the held set's Nodes go", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, attacker, "a")
		return err == nil && len(nodes) == 0, fmt.Sprintf("%d Nodes, %v", len(nodes), err)
	})
	eventually(t, 3*time.Minute, "the generated set", converged(c, t, attacker, g, 2))
	checkPeaks("own finalizer")
	// The set the tenant holds is still there, and gets no Node back.
	held, err = sets.Get(ctx, "a", metav1.GetOptions{})
	require.NoError(t, err, "its own finalizer holds the set")
	held.Finalizers = nil
	_, err = sets.Update(ctx, held, metav1.UpdateOptions{})
	require.NoError(t, err)

	// A deletecollection with Orphan, and the same names made again.
	require.NoError(t, sets.DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}, metav1.ListOptions{}))
	createAgain(tenantSet(g, class, 2))
	eventually(t, 3*time.Minute, "made again after a deletecollection", converged(c, t, attacker, g, 2))
	checkPeaks("deletecollection")

	// A set named like the victim's, owned (by its ownerReferences) by
	// something named like it, takes none of its Nodes.
	twin := tenantSet("v", class, 0)
	twin.OwnerReferences = []metav1.OwnerReference{{APIVersion: nodesetv1alpha1.GroupVersion.String(), Kind: "NodeSet",
		Name: "v", UID: types.UID("00000000-0000-0000-0000-000000000001")}}
	_, err = sets.Create(ctx, twin, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "the victim's Node stays the victim's", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, victim, "v")
		if err != nil || len(nodes) != 1 {
			return false, fmt.Sprintf("%d Nodes, %v", len(nodes), err)
		}
		return nodes[0].Name == victimNodes[0].Name && nodes[0].DeletionTimestamp == nil, nodes[0].Name
	})
	mine, err := setNodes(ctx, t, attacker, "v")
	require.NoError(t, err)
	assert.Empty(t, mine, "the twin has no Node")
	checkPeaks("twin")
}
