// Package bench measures nodeset at scale against a real kube-apiserver and
// etcd: both controllers run as processes with the simulated driver, and a
// NodeSet is scaled from zero to N Ready nodes and back. Run it with
// `make bench`; NODESET_BENCH_NODES sets the large size (default 2000).
//
// Figures are per size, and the large size is compared with a small one
// measured in the same run, so the ratios mean something on a shared machine
// where absolute seconds do not.
package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
	"nodeset.dev/nodeset/test/framework"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // no benchmark asked for (make test): no control plane either
	}
	os.Exit(framework.Run(m, framework.Options{}))
}

// result is what one size measured.
type result struct {
	nodes                   int
	toReady, toGone         time.Duration
	nodeCPU, nodesetCPU     time.Duration // during scale-up
	controlPlaneCPU         time.Duration // etcd + kube-apiserver, during scale-up
	idleNodeCPU             time.Duration // node controller, over idleWindow once all are Ready
	nodePeakRSS, nodesetRSS int64
}

const idleWindow = 20 * time.Second

var results = map[int]*result{}

// BenchmarkFleet scales a simulated NodeSet 0 -> n Ready -> 0 for a small and
// a large n, with fresh controller processes for each.
func BenchmarkFleet(b *testing.B) {
	large := 2000
	if v, err := strconv.Atoi(os.Getenv("NODESET_BENCH_NODES")); err == nil && v > 0 {
		large = v
	}
	for _, n := range []int{100, large} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for i := range b.N {
				r := scaleUpAndDown(b, n, fmt.Sprintf("bench-%d-%d", n, i))
				results[n] = r
				b.ReportMetric(r.toReady.Seconds(), "s-to-ready")
				b.ReportMetric(float64(n)/r.toReady.Seconds(), "nodes/s")
				b.ReportMetric(r.toGone.Seconds(), "s-to-gone")
				b.ReportMetric(float64(r.nodeCPU.Milliseconds())/float64(n), "node-ctrl-cpu-ms/node")
				b.ReportMetric(float64(r.nodesetCPU.Milliseconds())/float64(n), "nodeset-ctrl-cpu-ms/node")
				b.ReportMetric(float64(r.controlPlaneCPU.Milliseconds())/float64(n), "apiserver+etcd-cpu-ms/node")
				b.ReportMetric(100*r.idleNodeCPU.Seconds()/idleWindow.Seconds(), "idle-node-ctrl-cpu-%")
				b.ReportMetric(float64(r.nodePeakRSS)/(1<<20), "node-ctrl-peak-MiB")
				b.ReportMetric(float64(r.nodesetRSS)/(1<<20), "nodeset-ctrl-peak-MiB")
			}
		})
	}
	small, big := results[100], results[large]
	if small != nil && big != nil {
		perNode := func(d time.Duration, n int) float64 { return float64(d) / float64(n) }
		fmt.Printf("\nfleet: %d nodes against 100 in the same run:\n", large)
		fmt.Printf("  time to Ready per node:       x%.2f\n", perNode(big.toReady, large)/perNode(small.toReady, 100))
		fmt.Printf("  node-controller CPU per node: x%.2f\n", perNode(big.nodeCPU, large)/perNode(small.nodeCPU, 100))
		fmt.Printf("  node-controller peak memory:  %.0f MiB vs %.0f MiB (+%.1f KiB per node)\n",
			float64(big.nodePeakRSS)/(1<<20), float64(small.nodePeakRSS)/(1<<20),
			float64(big.nodePeakRSS-small.nodePeakRSS)/1024/float64(large-100))
		fmt.Printf("  idle node-controller CPU:     %.1f%% vs %.1f%% of one core (Lease renewals every 10s)\n",
			100*big.idleNodeCPU.Seconds()/idleWindow.Seconds(), 100*small.idleNodeCPU.Seconds()/idleWindow.Seconds())
	}
}

func scaleUpAndDown(b *testing.B, n int, name string) *result {
	ctx := context.Background()
	cp := framework.Shared
	controllers, err := framework.NewControllers(ctx, cp, framework.ControllerOptions{
		NodeSetArgs: []string{"-v=1", "--kube-api-qps=200", "--kube-api-burst=400"},
		NodeArgs: []string{"-v=1", "--workers=16", "--kube-api-qps=200", "--kube-api-burst=400",
			"--simulated-lease-renew-interval=10s"},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := controllers.Start(); err != nil {
		b.Fatal(err)
	}
	defer controllers.Stop()
	kube := kubernetes.NewForConfigOrDie(withRate(cp))
	cs := versioned.NewForConfigOrDie(withRate(cp))
	ns := name
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{
				InstanceType: "sim.small", BootDelay: &metav1.Duration{Duration: time.Second}}},
			Drain: &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: time.Minute}},
		},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: name, Replicas: ptr.To[int32](0)},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// Wait for the class to be Valid and the set Accepted, so only the
	// scale-up is timed.
	waitFor(b, time.Minute, "NodeSet accepted", func(ctx context.Context) (bool, string) {
		s, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "fleet", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range s.Status.Conditions {
			if c.Type == nodesetv1alpha1.NodeSetAccepted {
				return c.Status == metav1.ConditionTrue, c.Message
			}
		}
		return false, "no Accepted condition"
	})
	selector := resolve.Selector(set).String()

	pids := map[string]int{"node": controllers.Node.Pid(), "nodeset": controllers.NodeSet.Pid()}
	cpu := func() map[string]time.Duration {
		out := map[string]time.Duration{}
		for name, pid := range pids {
			out[name], _ = framework.CPUTime(pid)
		}
		for _, pid := range cp.PIDs {
			t, _ := framework.CPUTime(pid)
			out["controlplane"] += t
		}
		return out
	}

	r := &result{nodes: n}
	before := cpu()
	start := time.Now()
	scale(b, cs, ns, int32(n))
	waitFor(b, 20*time.Minute, fmt.Sprintf("%d nodes Ready", n), func(ctx context.Context) (bool, string) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range nodes.Items {
			if nodeutil.IsReady(&nodes.Items[i]) && !hasTaint(&nodes.Items[i], nodesetv1alpha1.TaintUnregistered) {
				ready++
			}
		}
		return ready == n && len(nodes.Items) == n, fmt.Sprintf("%d/%d Ready and untainted, %d Nodes", ready, n, len(nodes.Items))
	})
	r.toReady = time.Since(start)
	after := cpu()
	r.nodeCPU, r.nodesetCPU, r.controlPlaneCPU = after["node"]-before["node"], after["nodeset"]-before["nodeset"], after["controlplane"]-before["controlplane"]

	idleStart := cpu()["node"]
	time.Sleep(idleWindow)
	r.idleNodeCPU = cpu()["node"] - idleStart
	_, r.nodePeakRSS, _ = framework.Memory(pids["node"])
	_, r.nodesetRSS, _ = framework.Memory(pids["nodeset"])

	start = time.Now()
	scale(b, cs, ns, 0)
	waitFor(b, 20*time.Minute, "all Nodes and machines gone", func(ctx context.Context) (bool, string) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
		if err != nil {
			return false, err.Error()
		}
		machines, ok := controllers.Machines(ctx)
		return ok && len(nodes.Items) == 0 && len(machines) == 0, fmt.Sprintf("%d Nodes, %d machines", len(nodes.Items), len(machines))
	})
	r.toGone = time.Since(start)
	_ = cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "fleet", metav1.DeleteOptions{})
	_ = cs.NodesetV1alpha1().NodeClasses().Delete(ctx, name, metav1.DeleteOptions{})
	return r
}

// withRate is the admin config with a rate limit that does not slow the
// benchmark's own polling.
func withRate(cp *framework.ControlPlane) *rest.Config {
	cfg := cp.AdminConfig()
	cfg.QPS, cfg.Burst = 100, 200
	return cfg
}

func scale(b *testing.B, cs versioned.Interface, ns string, replicas int32) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := cs.NodesetV1alpha1().NodeSets(ns).GetScale(context.Background(), "fleet", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = replicas
		_, err = cs.NodesetV1alpha1().NodeSets(ns).UpdateScale(context.Background(), "fleet", s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

func hasTaint(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func waitFor(b *testing.B, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	b.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		last = why
		return ok, nil
	})
	if err != nil {
		b.Fatalf("%s: not true after %s; last: %s", what, timeout, last)
	}
}
