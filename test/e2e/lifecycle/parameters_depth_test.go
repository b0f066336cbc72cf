package lifecycle

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/test/framework"
)

const depthRefusal = "spec.parameters may nest objects and lists at most 32 levels deep"

// nestedObjects is spec.parameters with levels objects, one in another:
// {"k":{"k":...{"k":"v"}}}.
func nestedObjects(levels int) string {
	return strings.Repeat(`{"k":`, levels-1) + `{"k":"v"}` + strings.Repeat("}", levels-1)
}

// nestedLists is spec.parameters with an object holding levels-1 lists, one
// in another: {"k":[[...["v"]]]}.
func nestedLists(levels int) string {
	return `{"k":` + strings.Repeat("[", levels-1) + `"v"` + strings.Repeat("]", levels-1) + "}"
}

func parametersSet(name, class, parameters string) *nodesetv1alpha1.NodeSet {
	set := tenantSet(name, class, 0)
	set.Spec.Parameters = &runtime.RawExtension{Raw: []byte(parameters)}
	return set
}

// TestParametersNestedPastTheLimitAreRefused applies the shipped
// parameters-depth policy (deploy/admission) and writes, as a namespace's
// editor, NodeSets whose free-form spec.parameters nest deeper than 32
// levels: kube-apiserver refuses them with the rule, including one nested
// just under the 10,000 levels kube-apiserver takes in a request, which it
// would store and then fail to read back, breaking the NodeSet list and
// watch for every client. 32 levels are admitted. A NodeSet stored with deep
// parameters before the policy can still be relabelled and deleted.
func TestParametersNestedPastTheLimitAreRefused(t *testing.T) {
	startControllers(t)
	ctx := context.Background()
	_, admin := clients(t)
	cp := framework.Shared(t)
	ns := createNamespace(t, fmt.Sprintf("depth-%d", time.Now().UnixNano()%100000))
	_, tenantCS := tenant(t, "tenant-a", ns)

	class := &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "depth-out-of-tree"},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver:          "depth.example.com",
			Parameters:      &runtime.RawExtension{Raw: []byte(`{"size":"small"}`)},
			TenantOverrides: []string{"k"},
		},
	}
	_, err := admin.NodesetV1alpha1().NodeClasses().Create(ctx, class, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		_ = admin.NodesetV1alpha1().NodeClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})

	// Stored before the policy: 40 levels.
	before, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, parametersSet("before", class.Name, nestedObjects(40)), metav1.CreateOptions{})
	require.NoError(t, err, "40 levels, before the policy")

	root, err := framework.RepoRoot()
	require.NoError(t, err)
	policy := filepath.Join(root, "deploy", "admission", "parameters-depth.yaml")
	require.NoError(t, framework.Apply(ctx, cp.AdminConfig(), policy))
	t.Cleanup(func() { require.NoError(t, framework.Delete(context.Background(), cp.AdminConfig(), policy)) })

	// kube-apiserver takes a new policy up in the background: probe until
	// it refuses.
	sets := tenantCS.NodesetV1alpha1().NodeSets(ns)
	eventually(t, 2*time.Minute, "the policy refuses 33 levels", func(ctx context.Context) (bool, string) {
		_, err := sets.Create(ctx, parametersSet("probe", class.Name, nestedObjects(33)), metav1.CreateOptions{})
		if err == nil {
			_ = sets.Delete(ctx, "probe", metav1.DeleteOptions{})
			return false, "33 levels admitted"
		}
		return strings.Contains(err.Error(), depthRefusal), err.Error()
	})

	for name, parameters := range map[string]string{
		"objects-33":  nestedObjects(33),
		"lists-33":    nestedLists(33),
		"objects-200": nestedObjects(200),
	} {
		_, err := sets.Create(ctx, parametersSet(name, class.Name, parameters), metav1.CreateOptions{})
		require.Error(t, err, name)
		assert.True(t, apierrors.IsInvalid(err), "%s: %v", name, err)
		assert.Contains(t, err.Error(), depthRefusal, name)
	}
	for name, parameters := range map[string]string{
		"objects-32": nestedObjects(32),
		"lists-32":   nestedLists(32),
	} {
		_, err := sets.Create(ctx, parametersSet(name, class.Name, parameters), metav1.CreateOptions{})
		require.NoError(t, err, name)
	}

	// Just under kube-apiserver's own limit, sent as is (a Go client would
	// not encode it).
	deep := `{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeSet","metadata":{"name":"deep"},` +
		`"spec":{"nodeClassName":"` + class.Name + `","parameters":` + nestedObjects(9993) + `}}`
	err = tenantCS.NodesetV1alpha1().RESTClient().Post().Namespace(ns).Resource("nodesets").
		Body([]byte(deep)).SetHeader("Content-Type", "application/json").Do(ctx).Error()
	require.Error(t, err, "9993 levels")
	assert.Contains(t, err.Error(), depthRefusal)
	list, err := admin.NodesetV1alpha1().NodeSets("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "the NodeSet list after the deep create")
	assert.NotEmpty(t, list.Items)

	// An update that deepens spec.parameters is refused; one that leaves it
	// as it was is admitted, on an object stored before the policy too.
	_, err = sets.Patch(ctx, "objects-32", types.MergePatchType,
		[]byte(`{"spec":{"parameters":`+nestedObjects(33)+`}}`), metav1.PatchOptions{})
	require.Error(t, err, "deepened to 33 levels")
	assert.Contains(t, err.Error(), depthRefusal)
	_, err = sets.Patch(ctx, before.Name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"team":"a"}},"spec":{"replicas":1}}`), metav1.PatchOptions{})
	require.NoError(t, err, "relabel and scale the set stored before the policy")
	_, err = sets.Patch(ctx, before.Name, types.MergePatchType,
		[]byte(`{"spec":{"parameters":`+nestedObjects(41)+`}}`), metav1.PatchOptions{})
	require.Error(t, err, "change the deep parameters of the set stored before the policy")
	assert.Contains(t, err.Error(), depthRefusal)
	require.NoError(t, sets.Delete(ctx, before.Name, metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "the set stored before the policy is gone", func(ctx context.Context) (bool, string) {
		_, err := sets.Get(ctx, before.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	// NodeClasses too.
	deepClass := class.DeepCopy()
	deepClass.ObjectMeta = metav1.ObjectMeta{Name: "depth-out-of-tree-deep"}
	deepClass.Spec.Parameters = &runtime.RawExtension{Raw: []byte(nestedObjects(33))}
	_, err = admin.NodesetV1alpha1().NodeClasses().Create(ctx, deepClass, metav1.CreateOptions{})
	require.Error(t, err, "a class with 33 levels")
	assert.Contains(t, err.Error(), depthRefusal)
}
