package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/pkg/generated/informers/externalversions"
	"nodeset.dev/nodeset/test/framework"
)

var (
	nodeClassGVR = schema.GroupVersion(nodesetv1alpha1.GroupVersion).WithResource("nodeclasses")
	nodeSetGVR   = schema.GroupVersion(nodesetv1alpha1.GroupVersion).WithResource("nodesets")
)

func TestCRDsDiscoverable(t *testing.T) {
	disco, err := discovery.NewDiscoveryClientForConfig(framework.Shared(t).AdminConfig())
	require.NoError(t, err)
	resources, err := disco.ServerResourcesForGroupVersion("nodeset.dev/v1alpha1")
	require.NoError(t, err)
	byName := map[string]metav1.APIResource{}
	for _, r := range resources.APIResources {
		byName[r.Name] = r
	}
	require.Contains(t, byName, "nodeclasses")
	require.Contains(t, byName, "nodesets")
	require.Contains(t, byName, "nodesets/scale")
	require.Contains(t, byName, "nodesets/status")
	assert.False(t, byName["nodeclasses"].Namespaced, "NodeClass is cluster-scoped")
	assert.True(t, byName["nodesets"].Namespaced, "NodeSet is namespaced")
	assert.Equal(t, []string{"nds"}, byName["nodesets"].ShortNames)
	assert.Equal(t, []string{"ndc"}, byName["nodeclasses"].ShortNames)
	assert.Equal(t, []string{"nodeset-all"}, byName["nodesets"].Categories)
	assert.Equal(t, []string{"nodeset-all"}, byName["nodeclasses"].Categories)
}

// TestExamplesAccepted creates every object in deploy/examples, in file order,
// and checks that the API server kept each one.
func TestExamplesAccepted(t *testing.T) {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(root, "deploy", "examples", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	sort.Strings(files)
	client := dynamicClient(t)
	count := 0
	for _, file := range files {
		objs, err := framework.ReadObjects(file)
		require.NoError(t, err)
		for _, obj := range objs {
			gvr := gvrFor(t, obj)
			created, err := client.Resource(gvr).Namespace(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{})
			require.NoError(t, err, "%s: %s %s", filepath.Base(file), obj.GetKind(), obj.GetName())
			assert.NotEmpty(t, created.GetUID())
			count++
		}
	}
	assert.GreaterOrEqual(t, count, 7)

	// Defaults from the schema are filled in.
	nodeSet, err := clientset(t).NodesetV1alpha1().NodeSets("team-a").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, nodesetv1alpha1.DeletePolicyNewest, nodeSet.Spec.DeletePolicy)
	class, err := clientset(t).NodesetV1alpha1().NodeClasses().Get(ctx, "sim-dedicated", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, 15*time.Minute, class.Spec.RegistrationTimeout.Duration)
	assert.Equal(t, nodesetv1alpha1.TenancyDedicated, class.Spec.Tenancy)
	assert.Equal(t, nodesetv1alpha1.NamespacesFromSelector, class.Spec.AllowedNamespaces.From)
}

func TestClientsetListerInformerRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := clientset(t)
	ns := createNamespace(t, "roundtrip")

	class := &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "roundtrip"},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{
				InstanceType: "sim.tiny",
				Capacity:     corev1.ResourceList{corev1.ResourceCPU: mustQuantity("1")},
			}},
		},
	}
	created, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, class, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, nodesetv1alpha1.TenancyShared, created.Spec.Tenancy, "tenancy defaults to Shared")
	t.Cleanup(func() {
		_ = cs.NodesetV1alpha1().NodeClasses().Delete(context.Background(), "roundtrip", metav1.DeleteOptions{})
	})

	nodeSet := &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "rt", Namespace: ns},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "roundtrip"},
	}
	createdSet, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, nodeSet, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, ptr.To[int32](1), createdSet.Spec.Replicas, "replicas defaults to 1")
	assert.Equal(t, nodesetv1alpha1.RollingUpdateStrategy, createdSet.Spec.Strategy.Type)

	// Status is a subresource: a status write changes status only.
	createdSet.Status.Replicas = 1
	createdSet.Status.Selector = "nodeset.dev/nodeset=rt"
	createdSet.Spec.Paused = true
	updated, err := cs.NodesetV1alpha1().NodeSets(ns).UpdateStatus(ctx, createdSet, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(1), updated.Status.Replicas)
	assert.False(t, updated.Spec.Paused, "UpdateStatus must not change spec")

	factory := externalversions.NewSharedInformerFactory(cs, 0)
	setInformer := factory.Nodeset().V1alpha1().NodeSets()
	classInformer := factory.Nodeset().V1alpha1().NodeClasses()
	added := make(chan string, 10)
	_, err = setInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { added <- obj.(*nodesetv1alpha1.NodeSet).Name },
	})
	require.NoError(t, err)
	classInformer.Informer()
	stop := make(chan struct{})
	factory.Start(stop)
	defer factory.Shutdown()
	defer close(stop)
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		require.True(t, ok, "cache of %v synced", typ)
	}
	fromLister, err := setInformer.Lister().NodeSets(ns).Get("rt")
	require.NoError(t, err)
	assert.Equal(t, "sim.tiny", mustGetClass(t, classInformer.Lister().Get, "roundtrip").Spec.Simulated.InstanceType)
	assert.Equal(t, createdSet.UID, fromLister.UID)

	_, err = cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "rt2", Namespace: ns},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "roundtrip"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	seen := map[string]bool{}
	for !seen["rt2"] {
		select {
		case name := <-added:
			seen[name] = true
		case <-ctx.Done():
			t.Fatalf("informer never delivered rt2; saw %v", seen)
		}
	}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		sets, err := setInformer.Lister().NodeSets(ns).List(labelsEverything())
		return err == nil && len(sets) == 2, err
	}))
}

func TestScaleSubresource(t *testing.T) {
	ctx := context.Background()
	cs := clientset(t)
	ns := createNamespace(t, "scale")
	ensureClass(t, "scale-class")
	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "scale-class", Replicas: ptr.To[int32](2)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	scale, err := cs.NodesetV1alpha1().NodeSets(ns).GetScale(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(2), scale.Spec.Replicas)
	_, err = cs.NodesetV1alpha1().NodeSets(ns).UpdateScale(ctx, "web", &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, ResourceVersion: scale.ResourceVersion},
		Spec:       autoscalingv1.ScaleSpec{Replicas: 4},
	}, metav1.UpdateOptions{})
	require.NoError(t, err)
	got, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(4), *got.Spec.Replicas)

	// kubectl scale works through the same subresource, and down to zero.
	out := kubectl(t, "scale", "-n", ns, "nodeset/web", "--replicas=0")
	assert.Contains(t, out, "scaled")
	got, err = cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(0), *got.Spec.Replicas, "replicas 0 must survive defaulting")

	// The selector the controller writes to status is what /scale reports.
	got.Status.Selector = nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns + "," + nodesetv1alpha1.LabelNodeSet + "=web"
	_, err = cs.NodesetV1alpha1().NodeSets(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
	require.NoError(t, err)
	scale, err = cs.NodesetV1alpha1().NodeSets(ns).GetScale(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, got.Status.Selector, scale.Status.Selector)
}

// TestControlPlaneReportsItsRelease: the control plane's binaries say which
// Kubernetes release they are, as a release build does, so that kubectl
// version, Helm's kubeVersion check (the chart needs 1.30 or later) and
// clients' version skew checks work against it.
func TestControlPlaneReportsItsRelease(t *testing.T) {
	disco, err := discovery.NewDiscoveryClientForConfig(framework.Shared(t).AdminConfig())
	require.NoError(t, err)
	info, err := disco.ServerVersion()
	require.NoError(t, err)
	assert.Regexp(t, `^v1\.\d+\.\d+$`, info.GitVersion)
	assert.Equal(t, "1", info.Major)
	assert.Equal(t, strings.Split(info.GitVersion, ".")[1], info.Minor)
	out := kubectl(t, "version", "-o", "json")
	assert.Contains(t, out, `"serverVersion"`)
	assert.Contains(t, out, `"gitVersion": "`+info.GitVersion+`"`)
}

func TestKubectl(t *testing.T) {
	out := kubectl(t, "explain", "nodeset.spec.strategy")
	assert.Contains(t, out, "strategy says how nodes are replaced")
	assert.Contains(t, out, "rollingUpdate")
	assert.Contains(t, out, "RollingUpdate (the default), OnDelete or Managed")

	out = kubectl(t, "explain", "nodeclass.spec.tenantOverrides")
	assert.Contains(t, out, "Every\n    other field is restricted")

	// In a NodeSet a driver section holds overrides of its class's section,
	// only of the fields the class lists in tenantOverrides: explain tells
	// the tenant so, not that the NodeSet configures the driver.
	for _, section := range []string{"simulated", "dockerMachine", "eksAutoscalingGroup", "eksManagedNodeGroup"} {
		out = kubectl(t, "explain", "nodeset.spec."+section)
		description := strings.Join(strings.Fields(strings.SplitN(strings.SplitN(out, "DESCRIPTION:", 2)[1], "FIELDS:", 2)[0]), " ")
		assert.Contains(t, description, "a NodeSet sets only the fields its NodeClass lists in spec.tenantOverrides", "kubectl explain nodeset.spec.%s", section)
	}

	ns := createNamespace(t, "printer")
	ensureClass(t, "printer-class")
	cs := clientset(t)
	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(context.Background(), &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "printer-class", Replicas: ptr.To[int32](3)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	out = kubectl(t, "get", "nds", "-n", ns)
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	assert.Equal(t, []string{"NAME", "CLASS", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"}, header)
	assert.Regexp(t, `db\s+printer-class\s+3\s+`, out)
	// -o wide adds the strategy, the cloud group and the selector, as
	// kubectl get deployments -o wide adds its selector.
	out = kubectl(t, "get", "nds", "-n", ns, "-o", "wide")
	header = strings.Fields(strings.SplitN(out, "\n", 2)[0])
	assert.Equal(t, []string{"NAME", "CLASS", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "AGE",
		"STRATEGY", "GROUP", "SELECTOR"}, header)
	assert.Regexp(t, `db\s+printer-class\s+3\s+.*RollingUpdate`, out)
	out = kubectl(t, "get", "nodeclass", "printer-class", "-o", "wide")
	header = strings.Fields(strings.SplitN(out, "\n", 2)[0])
	assert.Equal(t, []string{"NAME", "DRIVER", "TENANCY", "VALID", "AGE", "KIND", "MAX-NODES", "MAX-PER-NAMESPACE"}, header)

	// The category lists both kinds.
	out = kubectl(t, "get", "nodeset-all", "-n", ns)
	assert.Contains(t, out, "nodeset.nodeset.dev/db")
	assert.Contains(t, out, "nodeclass.nodeset.dev/printer-class")

	// The singular names are the kinds: no category shadows them, so every
	// form people type first addresses one object.
	for _, args := range [][]string{{"nodeset", "db"}, {"nodeset/db"}, {"nds", "db"}, {"nodesets", "db"}} {
		out = kubectl(t, append([]string{"get", "-n", ns, "-o", "name"}, args...)...)
		assert.Equal(t, "nodeset.nodeset.dev/db\n", out, "kubectl get %v", args)
	}
	out = kubectl(t, "get", "nodeset", "-n", ns)
	assert.Regexp(t, `db\s+printer-class\s+3\s+`, out, "kubectl get nodeset lists NodeSets with their columns")
	out = kubectl(t, "get", "nodeclass", "printer-class", "-o", "name")
	assert.Equal(t, "nodeclass.nodeset.dev/printer-class\n", out)
	out = kubectl(t, "describe", "nodeset", "db", "-n", ns)
	assert.Contains(t, out, "Name:         db")
	out = kubectl(t, "scale", "-n", ns, "nodeset", "db", "--replicas=4")
	assert.Contains(t, out, "scaled")
	out = kubectl(t, "delete", "nodeset", "db", "-n", ns, "--wait=false")
	assert.Contains(t, out, `nodeset.nodeset.dev "db" deleted`)
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, framework.Shared(t).Kubectl(), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+framework.Shared(t).KubeconfigPath)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
	return string(out)
}

func clientset(t *testing.T) versioned.Interface {
	t.Helper()
	cs, err := versioned.NewForConfig(framework.Shared(t).AdminConfig())
	require.NoError(t, err)
	return cs
}

func kubeClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(framework.Shared(t).AdminConfig())
	require.NoError(t, err)
	return cs
}

func dynamicClient(t *testing.T) dynamic.Interface {
	t.Helper()
	client, err := dynamic.NewForConfig(framework.Shared(t).AdminConfig())
	require.NoError(t, err)
	return client
}

func gvrFor(t *testing.T, obj *unstructured.Unstructured) schema.GroupVersionResource {
	t.Helper()
	switch obj.GetKind() {
	case "Namespace":
		return corev1.SchemeGroupVersion.WithResource("namespaces")
	case "NodeClass":
		return nodeClassGVR
	case "NodeSet":
		return nodeSetGVR
	}
	t.Fatalf("no resource known for kind %s", obj.GetKind())
	return schema.GroupVersionResource{}
}

var namespaceCounter int

func createNamespace(t *testing.T, prefix string) string {
	t.Helper()
	namespaceCounter++
	name := fmt.Sprintf("%s-%d-%d", prefix, namespaceCounter, time.Now().UnixNano()%100000)
	_, err := kubeClient(t).CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return name
}

func ensureClass(t *testing.T, name string) {
	t.Helper()
	_, err := clientset(t).NodesetV1alpha1().NodeClasses().Create(context.Background(), &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver:         nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

func labelsEverything() labels.Selector { return labels.Everything() }

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

func mustGetClass(t *testing.T, get func(string) (*nodesetv1alpha1.NodeClass, error), name string) *nodesetv1alpha1.NodeClass {
	t.Helper()
	class, err := get(name)
	require.NoError(t, err)
	return class
}
