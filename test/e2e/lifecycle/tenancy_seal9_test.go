package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// nodeHistory records, from a watch on every Node, which Nodes were added
// and which were deleted (or marked for deletion) while it ran.
type nodeHistory struct {
	mu      sync.Mutex
	added   []string
	deleted []string
}

func watchNodeHistory(ctx context.Context, t *testing.T, kube kubernetes.Interface) *nodeHistory {
	t.Helper()
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	w, err := kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	h := &nodeHistory{}
	go func() {
		for ev := range w.ResultChan() {
			node, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			h.mu.Lock()
			switch {
			case ev.Type == watch.Added:
				h.added = append(h.added, node.Name)
			case ev.Type == watch.Deleted || node.DeletionTimestamp != nil:
				if !slices.Contains(h.deleted, node.Name) {
					h.deleted = append(h.deleted, node.Name)
				}
			}
			h.mu.Unlock()
		}
	}()
	t.Cleanup(w.Stop)
	return h
}

func (h *nodeHistory) seen() (added, deleted []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.added), slices.Clone(h.deleted)
}

// TestAKubeletCannotMoveItsNodeIntoAnotherSetOrClass runs both controllers
// against an API server with the NodeRestriction admission plugin and the
// Node authorizer. Every Node nodeset makes carries a seal of its
// namespace, NodeSet and NodeClass in a label no kubelet can add, change or
// remove. A kubelet may still relabel its Node with another namespace's
// set, or another class: such a Node counts for no set and no class, its
// own set neither replaces it nor is the victim's scaled down for it, the
// Node is told about, and its labels are put back. A Node made before the
// seal existed is sealed (and, on a Dedicated class, given the restricted
// tenant label) as it is labelled.
func TestAKubeletCannotMoveItsNodeIntoAnotherSetOrClass(t *testing.T) {
	p := startRestricted(t, 10*time.Minute, "seal-victim", "seal-attacker", "seal-legacy")
	ctx, kube, cs := p.ctx, p.kube, p.cs
	newClass := func(name string, tenancy nodesetv1alpha1.Tenancy, maxNodes *int32) {
		spec := nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated, Tenancy: tenancy,
			DriverSections:      nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}},
			RegistrationTimeout: &metav1.Duration{Duration: 5 * time.Minute}}
		if maxNodes != nil {
			spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: maxNodes}
		}
		_, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec},
			metav1.CreateOptions{})
		require.NoError(t, err)
	}
	newClass("seal-shared", nodesetv1alpha1.TenancyShared, nil)
	newClass("seal-limited", nodesetv1alpha1.TenancyShared, ptr.To[int32](1))
	newSet := func(ns, name, class string, replicas int32) {
		_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: class, Replicas: ptr.To(replicas),
				Strategy: nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.OnDeleteStrategy}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	setNodes := func(ctx context.Context, ns, name string) ([]corev1.Node, error) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{
			LabelSelector: nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns + "," + nodesetv1alpha1.LabelNodeSet + "=" + name})
		if err != nil {
			return nil, err
		}
		return nodes.Items, nil
	}
	readyNodes := func(ns, name string, want int) []corev1.Node {
		t.Helper()
		var found []corev1.Node
		eventually(t, 3*time.Minute, fmt.Sprintf("%d Ready Nodes of %s/%s", want, ns, name), func(ctx context.Context) (bool, string) {
			nodes, err := setNodes(ctx, ns, name)
			if err != nil {
				return false, err.Error()
			}
			found = found[:0]
			for _, n := range nodes {
				if nodeutil.IsReady(&n) && !nodeutil.HasStartupTaint(&n) {
					found = append(found, n)
				}
			}
			return len(found) == want && len(nodes) == want, fmt.Sprintf("%d Nodes, %d Ready", len(nodes), len(found))
		})
		return found
	}
	// The attacker's Node is the oldest: a victim set that took it for one
	// of its own would scale down one of its own (deletePolicy Newest).
	newSet("seal-attacker", "web", "seal-shared", 1)
	attackerNode := readyNodes("seal-attacker", "web", 1)[0]
	newSet("seal-victim", "web", "seal-shared", 2)
	victimNodes := readyNodes("seal-victim", "web", 2)
	assert.Equal(t, nodeutil.Seal("seal-attacker", "web", "seal-shared"), attackerNode.Labels[nodesetv1alpha1.LabelSeal], "nodeset sealed the Node")

	asKubelet := p.asKubelet
	relabel := func(node string, labels map[string]any) error { return p.relabel(t, node, labels) }

	t.Run("the seal is out of a kubelet's reach", func(t *testing.T) {
		err := relabel(attackerNode.Name, map[string]any{nodesetv1alpha1.LabelSeal: nodeutil.Seal("seal-victim", "web", "seal-shared")})
		assert.True(t, apierrors.IsForbidden(err), "a kubelet changes no seal: %v", err)
		err = relabel(attackerNode.Name, map[string]any{nodesetv1alpha1.LabelSeal: nil})
		assert.True(t, apierrors.IsForbidden(err), "nor removes one: %v", err)
		_, err = asKubelet("seal-forged").CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "seal-forged",
			Labels: map[string]string{nodesetv1alpha1.LabelNodeSetNamespace: "seal-victim", nodesetv1alpha1.LabelNodeSet: "web",
				nodesetv1alpha1.LabelNodeClass: "seal-shared", nodesetv1alpha1.LabelSeal: nodeutil.Seal("seal-victim", "web", "seal-shared")}}},
			metav1.CreateOptions{})
		assert.True(t, apierrors.IsForbidden(err), "nor registers a Node with one: %v", err)
		// A Node nodeset did not seal gets no seal from its kubelet either.
		_, err = kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "seal-bare"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), "seal-bare", metav1.DeleteOptions{}) })
		err = relabel("seal-bare", map[string]any{nodesetv1alpha1.LabelSeal: nodeutil.Seal("seal-victim", "web", "seal-shared")})
		assert.True(t, apierrors.IsForbidden(err), "nor adds one: %v", err)
	})

	t.Run("into another namespace's set", func(t *testing.T) {
		history := watchNodeHistory(ctx, t, kube)
		require.NoError(t, relabel(attackerNode.Name, map[string]any{nodesetv1alpha1.LabelNodeSetNamespace: "seal-victim"}),
			"a kubelet may change nodeset.dev/ labels")
		eventuallyTampered(t, kube, attackerNode.Name, "seal-victim")
		eventually(t, time.Minute, "the labels put back", func(ctx context.Context) (bool, string) {
			n, err := kube.CoreV1().Nodes().Get(ctx, attackerNode.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return n.Labels[nodesetv1alpha1.LabelNodeSetNamespace] == "seal-attacker", fmt.Sprint(n.Labels)
		})
		sealSettled(t, cs, "seal-victim", "web", 2)
		sealSettled(t, cs, "seal-attacker", "web", 1)
		added, deleted := history.seen()
		assert.Empty(t, added, "no Node made: neither a replacement of the attacker's, nor one for the victim")
		assert.Empty(t, deleted, "no Node deleted: the victim's set kept its own Nodes")
		nodes, err := setNodes(ctx, "seal-victim", "web")
		require.NoError(t, err)
		assert.ElementsMatch(t, sealNodeNames(victimNodes), sealNodeNames(nodes))
	})

	t.Run("into another class, out of its class's limit", func(t *testing.T) {
		newSet("seal-attacker", "batch", "seal-limited", 1)
		limited := readyNodes("seal-attacker", "batch", 1)[0]
		newSet("seal-attacker", "more", "seal-limited", 0)
		history := watchNodeHistory(ctx, t, kube)
		require.NoError(t, relabel(limited.Name, map[string]any{nodesetv1alpha1.LabelNodeClass: "seal-shared"}))
		eventuallyTampered(t, kube, limited.Name, "seal-shared")
		// The class's one Node still counts for it, relabelled or not: a
		// second Node of the class is refused.
		_, err := cs.NodesetV1alpha1().NodeSets("seal-attacker").Patch(ctx, "more", types.MergePatchType,
			[]byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
		require.Error(t, err, "the class's limit holds")
		assert.Contains(t, err.Error(), "spec.limits.maxNodes of 1")
		eventually(t, time.Minute, "the class label put back", func(ctx context.Context) (bool, string) {
			n, err := kube.CoreV1().Nodes().Get(ctx, limited.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return n.Labels[nodesetv1alpha1.LabelNodeClass] == "seal-limited", fmt.Sprint(n.Labels)
		})
		sealSettled(t, cs, "seal-attacker", "batch", 1)
		sealSettled(t, cs, "seal-attacker", "more", 0)
		added, deleted := history.seen()
		assert.Empty(t, added, "no Node beyond the class's limit, and no replacement")
		assert.Empty(t, deleted, "the relabelled Node was not taken for a Node of an earlier set of another class")
	})

	t.Run("a Node made before the seal existed is sealed", func(t *testing.T) {
		newClass("seal-dedicated", nodesetv1alpha1.TenancyDedicated, nil)
		newSet("seal-legacy", "old", "seal-dedicated", 1)
		made := readyNodes("seal-legacy", "old", 1)[0]
		require.Equal(t, "seal-legacy", made.Labels[nodesetv1alpha1.LabelTenantRestricted])
		history := watchNodeHistory(ctx, t, kube)
		// Written back as an earlier release made it: nodeset's labels and
		// no seal, and (before the restricted tenant label) no
		// node-restriction.kubernetes.io/nodeset-tenant. The admin's
		// credentials may remove both; a kubelet's may not.
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{
			nodesetv1alpha1.LabelSeal: nil, nodesetv1alpha1.LabelTenantRestricted: nil}}})
		require.NoError(t, err)
		_, err = kube.CoreV1().Nodes().Patch(ctx, made.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		require.NoError(t, err)
		eventually(t, time.Minute, "the old Node sealed, with the restricted tenant label", func(ctx context.Context) (bool, string) {
			n, err := kube.CoreV1().Nodes().Get(ctx, made.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return n.Labels[nodesetv1alpha1.LabelSeal] == nodeutil.Seal("seal-legacy", "old", "seal-dedicated") &&
				n.Labels[nodesetv1alpha1.LabelTenantRestricted] == "seal-legacy", fmt.Sprint(n.Labels)
		})
		sealSettled(t, cs, "seal-legacy", "old", 1)
		added, deleted := history.seen()
		assert.Empty(t, added, "the old Node is the set's one replica all along")
		assert.Empty(t, deleted)
	})
}

// eventuallyTampered waits for the NodeLabelsTampered Event of node whose
// message names claimed.
func eventuallyTampered(t *testing.T, kube kubernetes.Interface, node, claimed string) {
	t.Helper()
	eventually(t, time.Minute, "a NodeLabelsTampered Event on "+node, func(ctx context.Context) (bool, string) {
		events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			if e.Reason == "NodeLabelsTampered" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, `"`+claimed+`"`) {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, fmt.Sprint(seen)
	})
}

// sealSettled waits for the set's status to show replicas Nodes for its
// current generation.
func sealSettled(t *testing.T, cs versioned.Interface, ns, name string, replicas int32) {
	t.Helper()
	eventually(t, time.Minute, fmt.Sprintf("%s/%s settled at %d", ns, name, replicas), func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return set.Status.ObservedGeneration == set.Generation && set.Status.Replicas == replicas && set.Status.ReadyReplicas == replicas,
			fmt.Sprintf("status %+v", set.Status)
	})
}

func sealNodeNames(nodes []corev1.Node) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}
