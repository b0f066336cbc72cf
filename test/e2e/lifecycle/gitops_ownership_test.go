package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	nodesetcontroller "nodeset.dev/nodeset/pkg/controller/nodeset"
	"nodeset.dev/nodeset/test/framework"
)

// TestGitOpsAppliedNodeSetKeepsItsFields: a NodeSet applied server-side by
// a GitOps tool, with a duration written as the tool's manifest has it
// (1500ms, which Go would print 1.5s), keeps after each write of the
// controllers the spec it was applied with, byte for byte, its generation
// (raised by a change of replicas only) and the tool's ownership of every
// field it applied: the controllers' writes carry only what they change.
// Each write is looked at: the finalizer added, a scale-up and a
// scale-down naming a Node by cluster-autoscaler, the delete list pruned
// once the Node is gone, the finalizer removed from the deleted set. After
// each, the tool's next apply (not forced) is a no-op, neither a conflict
// nor a change.
func TestGitOpsAppliedNodeSetKeepsItsFields(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "gitops")
	createClass(t, "gitops-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.TenantOverrides = []string{"bootDelay"}
	})
	t.Cleanup(func() {
		_ = cs.NodesetV1alpha1().NodeClasses().Delete(context.Background(), "gitops-sim", metav1.DeleteOptions{})
	})
	// Without spec.replicas, as getting-started.md says for sets that
	// cluster-autoscaler scales.
	set := applyAsGitOps(t, ns, `{"nodeClassName":"gitops-sim","autoscaling":{"minReplicas":0,"maxReplicas":3},
"simulated":{"bootDelay":"1500ms"},"template":{"labels":{"example.com/pool":"pool"}}}`)

	eventually(t, time.Minute, "one Node, the set's finalizer", func(ctx context.Context) (bool, string) {
		got, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if !slices.Contains(got.Finalizers, nodesetcontroller.FinalizerNodes) {
			return false, fmt.Sprintf("finalizers %v", got.Finalizers)
		}
		return converged(c, t, ns, "pool", 1)(ctx)
	})
	set.untouched("finalizer added")

	ca := autoscalerClient(t, c)
	_, err := ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: ns + "/pool", Delta: 1})
	require.NoError(t, err)
	set.scaled(2)
	set.untouched("scale-up by cluster-autoscaler")
	eventually(t, time.Minute, "two Nodes", converged(c, t, ns, "pool", 2))

	nodes, err := setNodes(ctx, t, ns, "pool")
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	victim := nodes[0]
	_, err = ca.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: ns + "/pool", Nodes: []*protos.ExternalGrpcNode{
		{Name: victim.Name, ProviderID: victim.Spec.ProviderID, Labels: victim.Labels}}})
	require.NoError(t, err)
	set.scaled(1)
	set.untouched("scale-down naming a Node")
	eventually(t, time.Minute, "the named Node gone, and off the delete list", func(ctx context.Context) (bool, string) {
		got, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if listed := got.Annotations[nodesetv1alpha1.AnnotationDeleteNodes]; listed != "" {
			return false, "delete-nodes " + listed
		}
		return converged(c, t, ns, "pool", 1)(ctx)
	})
	set.untouched("delete list pruned")

	set.deleteHeld(nodesetcontroller.FinalizerNodes)
	set.untouchedDeleted("finalizer removed from the deleted set")
}

// TestGitOpsAppliedGroupNodeSetKeepsItsFields: the node controller's
// writes of a group driver's NodeSet (its group finalizer, added and
// removed) leave the spec a GitOps tool applied as it is, here an empty
// map, which a Go struct would drop.
func TestGitOpsAppliedGroupNodeSetKeepsItsFields(t *testing.T) {
	startControllers(t)
	_, cs := clients(t)
	const driverName = "gitops-group"
	createNoticeClass(t, driverName, nil)
	publishGroupClass(t, driverName)
	startGroupNodeController(t, &fixedGroupDriver{name: driverName})
	ns := createNamespace(t, "gitops-group")
	set := applyAsGitOps(t, ns, `{"nodeClassName":"gitops-group","replicas":0,"template":{"labels":{}}}`)
	require.Contains(t, set.spec, "template", "the API server keeps the empty map")

	eventually(t, time.Minute, "the set's finalizers", func(ctx context.Context) (bool, string) {
		got, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(got.Finalizers, nodesetcontroller.FinalizerNodes) && slices.Contains(got.Finalizers, nodesetv1alpha1.FinalizerGroup),
			fmt.Sprintf("finalizers %v", got.Finalizers)
	})
	set.untouched("finalizers added")

	set.deleteHeld(nodesetv1alpha1.FinalizerGroup)
	set.untouchedDeleted("group finalizer removed from the deleted set")
}

// gitopsSet is the NodeSet pool of a namespace, applied by the field
// manager gitops, with what the tool expects of it.
type gitopsSet struct {
	t        *testing.T
	sets     dynamic.ResourceInterface
	manifest []byte
	// What the tool applied and last saw: the spec (but replicas), the
	// generation, the fields it owns.
	spec       map[string]any
	generation int64
	owned      string
}

// applyAsGitOps applies a NodeSet pool with the given spec (JSON) to the
// namespace, as the field manager gitops.
func applyAsGitOps(t *testing.T, namespace, spec string) *gitopsSet {
	t.Helper()
	dyn, err := dynamic.NewForConfig(framework.Shared(t).AdminConfig())
	require.NoError(t, err)
	s := &gitopsSet{t: t, sets: dyn.Resource(schema.GroupVersionResource{Group: nodesetv1alpha1.GroupName, Version: "v1alpha1", Resource: "nodesets"}).Namespace(namespace),
		manifest: fmt.Appendf(nil, `{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeSet","metadata":{"name":"pool","namespace":%q},"spec":%s}`, namespace, spec)}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = s.sets.Patch(ctx, "pool", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = s.sets.Delete(ctx, "pool", metav1.DeleteOptions{})
	})
	applied, err := s.apply(false)
	require.NoError(t, err)
	s.saw(applied)
	require.NotEmpty(t, s.owned)
	return s
}

func (s *gitopsSet) apply(force bool) (*unstructured.Unstructured, error) {
	return s.sets.Patch(context.Background(), "pool", types.ApplyPatchType, s.manifest, metav1.PatchOptions{FieldManager: "gitops", Force: ptr.To(force)})
}

// saw records the set as the tool expects it from now on.
func (s *gitopsSet) saw(set *unstructured.Unstructured) {
	s.spec = specButReplicas(set)
	s.generation = set.GetGeneration()
	s.owned = gitopsFields(set)
}

// scaled says that the replicas were changed, which raises the generation.
func (s *gitopsSet) scaled(replicas int64) {
	s.t.Helper()
	set, err := s.sets.Get(context.Background(), "pool", metav1.GetOptions{})
	require.NoError(s.t, err)
	got, _, _ := unstructured.NestedInt64(set.Object, "spec", "replicas")
	require.Equal(s.t, replicas, got, "spec.replicas")
	s.generation++
}

// untouched checks the set after a write of the controllers: the spec and
// the fields the tool applied are as it applied them, the generation is
// as expected, and the tool's next apply neither conflicts nor changes
// anything. What differs is put back by a forced apply, so that the next
// step looks at its own write only.
func (s *gitopsSet) untouched(step string) {
	s.t.Helper()
	ok := s.check(step)
	reapplied, err := s.apply(false)
	ok = assert.NoError(s.t, err, "%s: the GitOps tool's next apply", step) && ok
	if err == nil {
		ok = assert.Equal(s.t, s.generation, reapplied.GetGeneration(), "%s: the GitOps tool's next apply changes nothing", step) && ok
	}
	if !ok {
		reapplied, err = s.apply(true)
		require.NoError(s.t, err)
		s.saw(reapplied)
	}
}

// untouchedDeleted is untouched for a deleted set, which the tool no
// longer applies.
func (s *gitopsSet) untouchedDeleted(step string) {
	s.t.Helper()
	s.check(step)
}

func (s *gitopsSet) check(step string) bool {
	s.t.Helper()
	set, err := s.sets.Get(context.Background(), "pool", metav1.GetOptions{})
	require.NoError(s.t, err)
	ok := assert.True(s.t, equality.Semantic.DeepEqual(s.spec, specButReplicas(set)), "%s: the spec as applied:\n%v\nnow:\n%v", step, s.spec, specButReplicas(set))
	ok = assert.Equal(s.t, s.generation, set.GetGeneration(), "%s: generation", step) && ok
	return assert.JSONEq(s.t, s.owned, gitopsFields(set), "%s: the fields the GitOps tool owns", step) && ok
}

// deleteHeld deletes the set while another finalizer holds it, and waits
// until the controller's finalizer is gone.
func (s *gitopsSet) deleteHeld(finalizer string) {
	s.t.Helper()
	ctx := context.Background()
	held, err := s.sets.Patch(ctx, "pool", types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/finalizers/-","value":"example.com/hold"}]`),
		metav1.PatchOptions{FieldManager: "hold"})
	require.NoError(s.t, err)
	require.Contains(s.t, held.GetFinalizers(), finalizer)
	// The deletion raises the generation: what it is is read from the
	// write of the deletion itself, the first after the finalizer's.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	w, err := s.sets.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=pool", ResourceVersion: held.GetResourceVersion()})
	require.NoError(s.t, err)
	defer w.Stop()
	require.NoError(s.t, s.sets.Delete(ctx, "pool", metav1.DeleteOptions{}))
	for s.generation = 0; s.generation == 0; {
		ev, open := <-w.ResultChan()
		require.True(s.t, open, "the watch of the set ended before its deletion was seen")
		if set, isSet := ev.Object.(*unstructured.Unstructured); isSet && set.GetDeletionTimestamp() != nil {
			s.generation = set.GetGeneration()
		}
	}
	eventually(s.t, time.Minute, finalizer+" removed", func(ctx context.Context) (bool, string) {
		set, err := s.sets.Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !slices.Contains(set.GetFinalizers(), finalizer), fmt.Sprintf("finalizers %v", set.GetFinalizers())
	})
}

func specButReplicas(set *unstructured.Unstructured) map[string]any {
	spec, _, _ := unstructured.NestedMap(set.Object, "spec")
	delete(spec, "replicas")
	return spec
}

// gitopsFields is the field set the manager gitops applied, as JSON ("" for none).
func gitopsFields(set *unstructured.Unstructured) string {
	for _, entry := range set.GetManagedFields() {
		if entry.Manager == "gitops" && entry.Operation == metav1.ManagedFieldsOperationApply && entry.FieldsV1 != nil {
			return entry.FieldsV1.GetRawString()
		}
	}
	return ""
}
