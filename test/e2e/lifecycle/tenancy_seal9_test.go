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
	"k8s.io/apimachinery/pkg/api/meta"
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
		// The class as an earlier release served it: no sealedSince. The
		// node controller gives it one ten minutes on, so the Node below,
		// made before that, is an earlier release's.
		_, err := cs.NodesetV1alpha1().NodeClasses().Patch(ctx, "seal-dedicated", types.MergePatchType,
			[]byte(`{"status":{"sealedSince":null}}`), metav1.PatchOptions{}, "status")
		require.NoError(t, err)
		eventually(t, time.Minute, "a sealedSince after the Node was made", func(ctx context.Context) (bool, string) {
			class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "seal-dedicated", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return class.Status.SealedSince != nil && class.Status.SealedSince.After(made.CreationTimestamp.Time), fmt.Sprint(class.Status.SealedSince)
		})
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

// TestAKubeletCannotRegisterItsOwnNodeIntoASetOrClass: NodeRestriction
// lets a kubelet register its own Node with any nodeset.dev/ label and
// nodeset's finalizer, or add both to its Node later, and take that
// finalizer off; only the seal is out of its reach, and so is deleting its
// Node. A Node registered or relabelled so, once its class seals its Nodes
// (status.sealedSince, past for a new class), is none of nodeset's: no
// replica of the set it claims (whose Nodes stay), marked with the seal
// "none" and told about. A sealed Node whose finalizer its kubelet took
// off is held again, and its set ends with one Node.
func TestAKubeletCannotRegisterItsOwnNodeIntoASetOrClass(t *testing.T) {
	p := startRestricted(t, 10*time.Minute, "register-victim", "register-attacker")
	ctx, kube, cs := p.ctx, p.kube, p.cs
	_, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "register-shared"},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections:      nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}},
			RegistrationTimeout: &metav1.Duration{Duration: 5 * time.Minute}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for ns, replicas := range map[string]int32{"register-victim": 2, "register-attacker": 1} {
		_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "register-shared", Replicas: ptr.To(replicas),
				Strategy: nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.OnDeleteStrategy}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	sealSettled(t, cs, "register-victim", "web", 2)
	sealSettled(t, cs, "register-attacker", "web", 1)
	sealedNodes := func(t *testing.T, ns string) []string {
		t.Helper()
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{
			LabelSelector: nodesetv1alpha1.LabelSeal + "=" + nodeutil.Seal(ns, "web", "register-shared")})
		require.NoError(t, err)
		return sealNodeNames(nodes.Items)
	}
	victims := sealedNodes(t, "register-victim")
	require.Len(t, victims, 2)
	class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "register-shared", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, class.Status.SealedSince, "the node controller says since when the class's Nodes are sealed")
	assert.False(t, class.Status.SealedSince.After(class.CreationTimestamp.Time), "a new class: since its creation")
	removeByHand := func(name string) {
		t.Cleanup(func() {
			ctx := context.Background()
			_, _ = kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
	// reportReady reports on the named Node as its kubelet does: a patch
	// of its status.
	reportReady := func(t *testing.T, name string) {
		t.Helper()
		now := metav1.Now().UTC().Format(time.RFC3339)
		patch := fmt.Sprintf(`{"status":{"nodeInfo":{"kubeletVersion":"v1.35.0"},"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, now, now)
		_, err := p.asKubelet(name).CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		require.NoError(t, err, "a kubelet reports on its own Node")
	}

	t.Run("registered with another namespace's set's labels and nodeset's finalizer", func(t *testing.T) {
		history := watchNodeHistory(ctx, t, kube)
		_, err := p.asKubelet("register-rogue").CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "register-rogue",
			Labels: map[string]string{nodesetv1alpha1.LabelNodeSetNamespace: "register-victim", nodesetv1alpha1.LabelNodeSet: "web",
				nodesetv1alpha1.LabelNodeClass: "register-shared"},
			Finalizers: []string{nodesetv1alpha1.FinalizerTermination}}}, metav1.CreateOptions{})
		require.NoError(t, err, "NodeRestriction checks neither nodeset.dev/ labels nor finalizers")
		removeByHand("register-rogue")
		reportReady(t, "register-rogue")
		eventually(t, time.Minute, "the Node marked none of nodeset's", func(ctx context.Context) (bool, string) {
			n, err := kube.CoreV1().Nodes().Get(ctx, "register-rogue", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return n.Labels[nodesetv1alpha1.LabelSeal] == nodesetv1alpha1.SealNone, fmt.Sprint(n.Labels)
		})
		eventuallyEventOn(t, kube, "register-rogue", "NodeNotSealed", "claims NodeSet register-victim/web of NodeClass register-shared")
		// A sync of the victim's set that sees the registered Node: scaled
		// to 3, it makes a third Node of its own, the registered one
		// counting for nothing.
		_, err = cs.NodesetV1alpha1().NodeSets("register-victim").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		sealSettled(t, cs, "register-victim", "web", 3)
		own := sealedNodes(t, "register-victim")
		assert.Len(t, own, 3)
		assert.Subset(t, own, victims, "the victim's Nodes stay")
		added, deleted := history.seen()
		assert.ElementsMatch(t, append([]string{"register-rogue"}, slices.DeleteFunc(own, func(n string) bool { return slices.Contains(victims, n) })...), added,
			"no Node made but the victim's third")
		assert.Empty(t, deleted, "none deleted: not the victim's, not the one registered (which the set would have taken for its newest)")
		err = p.relabel(t, "register-rogue", map[string]any{nodesetv1alpha1.LabelSeal: nil})
		assert.True(t, apierrors.IsForbidden(err), "the kubelet cannot take the mark off: %v", err)
	})

	t.Run("a kubelet's older Node given a set's labels and nodeset's finalizer", func(t *testing.T) {
		_, err := p.asKubelet("register-plain").CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "register-plain"}},
			metav1.CreateOptions{})
		require.NoError(t, err)
		removeByHand("register-plain")
		patch := fmt.Sprintf(`{"metadata":{"finalizers":[%q],"labels":{%q:"register-victim",%q:"web",%q:"register-shared"}}}`,
			nodesetv1alpha1.FinalizerTermination, nodesetv1alpha1.LabelNodeSetNamespace, nodesetv1alpha1.LabelNodeSet, nodesetv1alpha1.LabelNodeClass)
		_, err = p.asKubelet("register-plain").CoreV1().Nodes().Patch(ctx, "register-plain", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err, "NodeRestriction lets a kubelet add both to its own Node")
		eventually(t, time.Minute, "the Node marked none of nodeset's", func(ctx context.Context) (bool, string) {
			n, err := kube.CoreV1().Nodes().Get(ctx, "register-plain", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return n.Labels[nodesetv1alpha1.LabelSeal] == nodesetv1alpha1.SealNone, fmt.Sprint(n.Labels)
		})
		sealSettled(t, cs, "register-victim", "web", 3)
		assert.Len(t, sealedNodes(t, "register-victim"), 3)
	})

	t.Run("its finalizer taken off", func(t *testing.T) {
		mine := sealedNodes(t, "register-attacker")
		require.Len(t, mine, 1)
		name := mine[0]
		kubelet := p.asKubelet(name)
		err := kubelet.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		require.True(t, apierrors.IsForbidden(err), "a kubelet may not delete its Node: %v", err)
		_, err = kubelet.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		require.NoError(t, err, "but may take a finalizer off it")
		// Sealed, the Node is nodeset's still: held again, its machine
		// its own; the set ends with one Node, every one of them held.
		eventually(t, 2*time.Minute, "one Node of the set, held", func(ctx context.Context) (bool, string) {
			nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{
				LabelSelector: nodesetv1alpha1.LabelSeal + "=" + nodeutil.Seal("register-attacker", "web", "register-shared")})
			if err != nil {
				return false, err.Error()
			}
			var held []string
			for _, n := range nodes.Items {
				if slices.Contains(n.Finalizers, nodesetv1alpha1.FinalizerTermination) && n.DeletionTimestamp == nil {
					held = append(held, n.Name)
				}
			}
			return len(nodes.Items) == 1 && len(held) == 1, fmt.Sprintf("%d Nodes, held %v", len(nodes.Items), held)
		})
		sealSettled(t, cs, "register-attacker", "web", 1)
	})

	t.Run("registered into a class with limits, without nodeset's finalizer", func(t *testing.T) {
		// A class of 3 Nodes, 2 per namespace; the victim's set has 1.
		_, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "register-limited"},
			Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
				DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}},
				Limits:         &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](3), MaxNodesPerNamespace: ptr.To[int32](2)}}},
			metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = cs.NodesetV1alpha1().NodeSets("register-victim").Create(ctx, &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "capped"},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "register-limited", Replicas: ptr.To[int32](1)}}, metav1.CreateOptions{})
		require.NoError(t, err)
		sealSettled(t, cs, "register-victim", "capped", 1)
		// Two kubelets register their own Nodes into the class, one of
		// them into the victim's set too, without the finalizer, with the
		// status a kubelet registers with: Nodes nodeset never took.
		for name, labels := range map[string]map[string]string{
			"register-squatter": {nodesetv1alpha1.LabelNodeClass: "register-limited", nodesetv1alpha1.LabelNodeSetNamespace: "register-victim",
				nodesetv1alpha1.LabelNodeSet: "capped"},
			"register-classmate": {nodesetv1alpha1.LabelNodeClass: "register-limited"},
		} {
			now := metav1.Now()
			_, err := p.asKubelet(name).CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
				Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.35.0"}, Conditions: []corev1.NodeCondition{{
					Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}}},
				metav1.CreateOptions{})
			require.NoError(t, err)
			removeByHand(name)
			eventuallyEventOn(t, kube, name, "ForeignNode", "register-limited")
		}
		// They take none of the class's room: the victim's set grows to
		// its namespace's 2, and the class's 3 are not reached.
		_, err = cs.NodesetV1alpha1().NodeSets("register-victim").Patch(ctx, "capped", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		sealSettled(t, cs, "register-victim", "capped", 2)
		set, err := cs.NodesetV1alpha1().NodeSets("register-victim").Get(ctx, "capped", metav1.GetOptions{})
		require.NoError(t, err)
		accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		require.NotNil(t, accepted)
		assert.Equal(t, metav1.ConditionTrue, accepted.Status, "%s: %s", accepted.Reason, accepted.Message)
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{
			LabelSelector: nodesetv1alpha1.LabelSeal + "=" + nodeutil.Seal("register-victim", "capped", "register-limited")})
		require.NoError(t, err)
		assert.Len(t, nodes.Items, 2, "the set's own two Nodes")
	})
}

// eventuallyEventOn waits for an Event of reason on node, from the API
// server of kube, whose message contains text.
func eventuallyEventOn(t *testing.T, kube kubernetes.Interface, node, reason, text string) {
	t.Helper()
	eventually(t, time.Minute, "a "+reason+" Event on "+node, func(ctx context.Context) (bool, string) {
		events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			if e.Reason == reason && strings.Contains(e.Message, text) {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, fmt.Sprint(seen)
	})
}

// eventuallyTampered waits for the NodeLabelsTampered Event of node whose
// message names claimed.
func eventuallyTampered(t *testing.T, kube kubernetes.Interface, node, claimed string) {
	t.Helper()
	eventuallyEventOn(t, kube, node, "NodeLabelsTampered", `"`+claimed+`"`)
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
