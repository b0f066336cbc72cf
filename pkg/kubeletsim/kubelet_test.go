package kubeletsim_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/simulated"
	"nodeset.dev/nodeset/pkg/kubeletsim"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/test/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{}))
}

// fleet runs a Fleet as the node-controller user, with its shipped RBAC, on
// a fresh simulated driver, until the test ends.
func fleet(t *testing.T) (*simulated.Driver, kubernetes.Interface) {
	return fleetWith(t, nil, kubeletsim.Options{
		LeaseDuration: 2 * time.Second, RenewInterval: 300 * time.Millisecond, StatusInterval: time.Second,
	})
}

// fleetWith is fleet with opts, its client's requests counted by count
// (when not nil) and its Node cache seen through lag (when not nil).
func fleetWith(t *testing.T, count func(*http.Request), opts kubeletsim.Options, lag ...func(corelisters.NodeLister) corelisters.NodeLister) (*simulated.Driver, kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, framework.InstallRBAC(ctx, framework.Shared(t)))
	cfg := framework.Shared(t).Config("node-controller")
	if count != nil {
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripper(func(req *http.Request) (*http.Response, error) {
				count(req)
				return rt.RoundTrip(req)
			})
		})
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	factory := kubeinformers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes()
	var lister corelisters.NodeLister = nodes.Lister()
	for _, l := range lag {
		lister = l(lister)
	}
	driver := simulated.New(nil)
	f := kubeletsim.New(client, lister, driver, opts)
	require.NoError(t, f.FinishPods(factory.Core().V1().Pods()))
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
	})
	return driver, kubernetes.NewForConfigOrDie(framework.Shared(t).AdminConfig())
}

func class(mutate func(*nodesetv1alpha1.SimulatedMachine)) drivers.Class {
	spec := &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small",
		Labels: map[string]string{"example.com/rack": "r1"}}
	if mutate != nil {
		mutate(spec)
	}
	return drivers.Class{Name: "sim", Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
		DriverSections: nodesetv1alpha1.DriverSections{Simulated: spec}}}
}

// machineWithNode creates a machine and the Node the NodeSetController would.
func machineWithNode(t *testing.T, driver *simulated.Driver, kube kubernetes.Interface, name string, c drivers.Class) {
	t.Helper()
	ctx := context.Background()
	_, err := driver.Create(ctx, drivers.Machine{Name: name, Class: c})
	require.NoError(t, err)
	_, err = kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		last = why
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not true after %s; last: %s", what, timeout, last)
	}
}

func TestBootedMachineRegistersReadyAndRenewsItsLease(t *testing.T) {
	driver, kube := fleet(t)
	ctx := context.Background()
	machineWithNode(t, driver, kube, "kl-ready", class(nil))

	waitForReady(t, kube, "kl-ready")
	node, err := kube.CoreV1().Nodes().Get(ctx, "kl-ready", metav1.GetOptions{})
	require.NoError(t, err)
	want := simulated.EffectiveCapacity(class(nil).Spec.Simulated)
	for name, q := range want.Resources {
		got := node.Status.Capacity[name]
		assert.Zero(t, q.Cmp(got), "capacity %s: want %s, got %s", name, q.String(), got.String())
	}
	assert.Equal(t, "r1", node.Labels["example.com/rack"], "the class's simulated labels")
	assert.Equal(t, "kl-ready", node.Labels[corev1.LabelHostname])
	assert.Equal(t, kubeletsim.KubeletVersion, node.Status.NodeInfo.KubeletVersion)
	assert.NotEmpty(t, node.Status.Addresses)

	lease, err := kube.CoordinationV1().Leases(kubeletsim.LeaseNamespace).Get(ctx, "kl-ready", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "kl-ready", ptr.Deref(lease.Spec.HolderIdentity, ""))
	require.Len(t, lease.OwnerReferences, 1)
	assert.Equal(t, node.UID, lease.OwnerReferences[0].UID, "the Lease is owned by its Node")
	waitForRenewals(t, kube, lease, 1)

	// The machine goes: its kubelet's Lease goes with it.
	require.NoError(t, driver.Delete(ctx, class(nil), "kl-ready"))
	eventually(t, 30*time.Second, "lease deleted", func(ctx context.Context) (bool, string) {
		_, err := kube.CoordinationV1().Leases(kubeletsim.LeaseNamespace).Get(ctx, "kl-ready", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// waitForReady waits until the Node name is Ready.
func waitForReady(t *testing.T, kube kubernetes.Interface, name string) {
	t.Helper()
	eventually(t, 30*time.Second, "node "+name+" Ready", func(ctx context.Context) (bool, string) {
		node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return nodeutil.IsReady(node), fmt.Sprintf("conditions %v", node.Status.Conditions)
	})
}

// waitForRenewals waits until the kubelet renewed lease n times after the
// renewal it shows.
func waitForRenewals(t *testing.T, kube kubernetes.Interface, lease *coordinationv1.Lease, n int) {
	t.Helper()
	renewals, last := 0, lease.Spec.RenewTime.Time
	eventually(t, 30*time.Second, fmt.Sprintf("%d renewals of lease %s", n, lease.Name), func(ctx context.Context) (bool, string) {
		l, err := kube.CoordinationV1().Leases(kubeletsim.LeaseNamespace).Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if l.Spec.RenewTime.After(last) {
			renewals, last = renewals+1, l.Spec.RenewTime.Time
		}
		return renewals >= n, fmt.Sprintf("%d renewals, renewTime %s", renewals, l.Spec.RenewTime)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// staleLister is a Node cache that never shows a Node's status: one far
// behind the API server.
type staleLister struct{ corelisters.NodeLister }

func (l staleLister) Get(name string) (*corev1.Node, error) {
	node, err := l.NodeLister.Get(name)
	if err != nil {
		return nil, err
	}
	node = node.DeepCopy()
	node.Status = corev1.NodeStatus{}
	return node, nil
}

// TestALaggingCacheDoesNotMakeTheKubeletPostAgain: the kubelet knows what it
// posted; a cache that does not show it yet is no reason to post it again
// (on a busy API server that doubled the simulated kubelets' writes).
func TestALaggingCacheDoesNotMakeTheKubeletPostAgain(t *testing.T) {
	var statusPosts atomic.Int32
	driver, kube := fleetWith(t, func(req *http.Request) {
		if req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/nodes/kl-lagging/status") {
			statusPosts.Add(1)
		}
	}, kubeletsim.Options{LeaseDuration: 2 * time.Second, RenewInterval: 300 * time.Millisecond, StatusInterval: time.Hour},
		func(l corelisters.NodeLister) corelisters.NodeLister { return staleLister{l} })
	machineWithNode(t, driver, kube, "kl-lagging", class(nil))
	waitForReady(t, kube, "kl-lagging")
	// Five renewals later (1.5 s, well within the kubelet's 10 s status
	// loop), the status was posted once.
	lease, err := kube.CoordinationV1().Leases(kubeletsim.LeaseNamespace).Get(context.Background(), "kl-lagging", metav1.GetOptions{})
	require.NoError(t, err)
	waitForRenewals(t, kube, lease, 5)
	assert.Equal(t, int32(1), statusPosts.Load(), "status posts")
}

func TestKubeletWaitsForBootAndNode(t *testing.T) {
	driver, kube := fleet(t)
	ctx := context.Background()
	// A machine without a Node: the kubelet has nothing to register with.
	_, err := driver.Create(ctx, drivers.Machine{Name: "kl-nonode", Class: class(nil)})
	require.NoError(t, err)
	// A machine that boots in 2s.
	machineWithNode(t, driver, kube, "kl-slow", class(func(s *nodesetv1alpha1.SimulatedMachine) {
		s.BootDelay = &metav1.Duration{Duration: 2 * time.Second}
	}))
	created := time.Now()
	eventually(t, 30*time.Second, "slow machine Ready", func(ctx context.Context) (bool, string) {
		node, err := kube.CoreV1().Nodes().Get(ctx, "kl-slow", metav1.GetOptions{})
		return err == nil && nodeutil.IsReady(node), "not ready"
	})
	assert.GreaterOrEqual(t, time.Since(created), 2*time.Second, "Ready before the boot delay passed")
	_, err = kube.CoreV1().Nodes().Get(ctx, "kl-nonode", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a simulated kubelet never creates its Node: %v", err)
	_, err = kube.CoordinationV1().Leases(kubeletsim.LeaseNamespace).Get(ctx, "kl-nonode", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no Lease without a Node: %v", err)
}

func TestFailingMachineNeverBecomesReady(t *testing.T) {
	driver, kube := fleet(t)
	ctx := context.Background()
	machineWithNode(t, driver, kube, "kl-broken", class(func(s *nodesetv1alpha1.SimulatedMachine) {
		s.FailurePercent = ptr.To[int32](100)
	}))
	machineWithNode(t, driver, kube, "kl-healthy", class(nil))
	// Once the healthy one is Ready the fleet has had its chance with both.
	eventually(t, 30*time.Second, "healthy machine Ready", func(ctx context.Context) (bool, string) {
		node, err := kube.CoreV1().Nodes().Get(ctx, "kl-healthy", metav1.GetOptions{})
		return err == nil && nodeutil.IsReady(node), "not ready"
	})
	// Every reconcile round looks at every machine: two more renewals of
	// the healthy machine's Lease are two more rounds for the broken one.
	renewals := 0
	var last time.Time
	eventually(t, 30*time.Second, "two more reconcile rounds", func(ctx context.Context) (bool, string) {
		lease, err := kube.CoordinationV1().Leases(kubeletsim.LeaseNamespace).Get(ctx, "kl-healthy", metav1.GetOptions{})
		if err != nil || lease.Spec.RenewTime == nil {
			return false, fmt.Sprint("no renewed Lease: ", err)
		}
		if renewed := lease.Spec.RenewTime.Time; !renewed.Equal(last) {
			if !last.IsZero() {
				renewals++
			}
			last = renewed
		}
		return renewals >= 2, fmt.Sprintf("%d renewals", renewals)
	})
	node, err := kube.CoreV1().Nodes().Get(ctx, "kl-broken", metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, nodeutil.IsReady(node), "a machine with failurePercent 100 must never report Ready")
	assert.Empty(t, node.Status.Conditions)
	_, err = kube.CoordinationV1().Leases(kubeletsim.LeaseNamespace).Get(ctx, "kl-broken", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no Lease for a failed machine: %v", err)
}

func TestTerminatingPodsAreFinished(t *testing.T) {
	driver, kube := fleet(t)
	ctx := context.Background()
	machineWithNode(t, driver, kube, "kl-pods", class(nil))
	// A Node with no simulated machine: nothing finishes its pods.
	_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kl-foreign"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), "kl-foreign", metav1.DeleteOptions{}) })
	waitForReady(t, kube, "kl-pods")

	pod := func(name, node string) {
		_, err := kube.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](300),
				Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	pod("kl-running", "kl-pods")
	pod("kl-deleted", "kl-pods")
	pod("kl-elsewhere", "kl-foreign")
	t.Cleanup(func() {
		for _, name := range []string{"kl-running", "kl-deleted", "kl-elsewhere"} {
			_ = kube.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	})
	require.NoError(t, kube.CoreV1().Pods("default").Delete(ctx, "kl-deleted", metav1.DeleteOptions{}))
	require.NoError(t, kube.CoreV1().Pods("default").Delete(ctx, "kl-elsewhere", metav1.DeleteOptions{}))

	eventually(t, 30*time.Second, "terminating pod on the simulated machine gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Pods("default").Get(ctx, "kl-deleted", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	running, err := kube.CoreV1().Pods("default").Get(ctx, "kl-running", metav1.GetOptions{})
	require.NoError(t, err, "a pod nobody deleted stays")
	assert.Nil(t, running.DeletionTimestamp)
	elsewhere, err := kube.CoreV1().Pods("default").Get(ctx, "kl-elsewhere", metav1.GetOptions{})
	require.NoError(t, err, "a terminating pod on a node without a simulated kubelet is not this fleet's")
	assert.NotNil(t, elsewhere.DeletionTimestamp)
}

// TestManyMachines registers 300 machines at once: one loop and a small pool
// of workers serve them all.
func TestManyMachines(t *testing.T) {
	driver, kube := fleet(t)
	const n = 300
	for i := range n {
		machineWithNode(t, driver, kube, fmt.Sprintf("kl-many-%03d", i), class(nil))
	}
	eventually(t, 3*time.Minute, "all Ready with Leases", func(ctx context.Context) (bool, string) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		readyCount := 0
		for i := range nodes.Items {
			if nodeutil.IsReady(&nodes.Items[i]) && len(nodes.Items[i].Name) > 8 && nodes.Items[i].Name[:8] == "kl-many-" {
				readyCount++
			}
		}
		leases, err := kube.CoordinationV1().Leases(kubeletsim.LeaseNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return readyCount == n && len(leases.Items) >= n, fmt.Sprintf("%d/%d Ready, %d Leases", readyCount, n, len(leases.Items))
	})
}

// TestPodsOnAnUnreachableNodeAreNotFinished: a kubelet cut off from the API
// server cannot confirm a pod's deletion, so a terminating pod of an
// unreachable simulated machine stays terminating, as on a real one.
func TestPodsOnAnUnreachableNodeAreNotFinished(t *testing.T) {
	driver, kube := fleet(t)
	ctx := context.Background()
	machineWithNode(t, driver, kube, "kl-cut", class(nil))
	waitForReady(t, kube, "kl-cut")
	_, err := kube.CoreV1().Nodes().Patch(ctx, "kl-cut", types.MergePatchType,
		fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"cut off"}}}`, kubeletsim.AnnotationUnreachable), metav1.PatchOptions{})
	require.NoError(t, err)
	// The fleet sees the annotation when its Lease renewals stop (every
	// 300ms otherwise).
	var last string
	var since time.Time
	eventually(t, 30*time.Second, "kl-cut's Lease no longer renewed", func(ctx context.Context) (bool, string) {
		lease, err := kube.CoordinationV1().Leases(kubeletsim.LeaseNamespace).Get(ctx, "kl-cut", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if lease.ResourceVersion != last {
			last, since = lease.ResourceVersion, time.Now()
		}
		return time.Since(since) > 2*time.Second, "renewed at version " + last
	})
	_, err = kube.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kl-stuck"},
		Spec: corev1.PodSpec{NodeName: "kl-cut", TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = kube.CoreV1().Pods("default").Delete(context.Background(), "kl-stuck", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	require.NoError(t, kube.CoreV1().Pods("default").Delete(ctx, "kl-stuck", metav1.DeleteOptions{}))

	// A pod deleted on a reachable machine at the same time is finished:
	// when it is gone, the fleet has looked at both.
	machineWithNode(t, driver, kube, "kl-up", class(nil))
	waitForReady(t, kube, "kl-up")
	_, err = kube.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kl-finished"},
		Spec:       corev1.PodSpec{NodeName: "kl-up", Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().Pods("default").Delete(ctx, "kl-finished", metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, "the reachable machine's pod finished", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Pods("default").Get(ctx, "kl-finished", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	stuck, err := kube.CoreV1().Pods("default").Get(ctx, "kl-stuck", metav1.GetOptions{})
	require.NoError(t, err, "no kubelet confirmed kl-stuck's deletion")
	assert.NotNil(t, stuck.DeletionTimestamp)
}
