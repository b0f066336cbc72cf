// Package bench measures nodeset at scale against a real kube-apiserver and
// etcd: both controllers run as processes with the simulated driver, and a
// NodeSet is scaled from zero to N Ready nodes and back. Run it with
// `make bench`; NODESET_BENCH_SIZES sets the sizes (default 100,1000; add
// 5000 for the large run).
//
// For each size a baseline runs first in the same control plane: a minimal
// client-go program doing only the unavoidable work (create each Node, mark
// it Ready, delete it) with the controllers' client QPS and burst. nodeset's
// times are reported as ratios to it, which mean something on a shared
// machine where absolute seconds do not. After nodeset's run, a second
// baseline does the same with the simulated kubelets nodeset's Nodes get
// (see kubeletBaseline), for a ratio beside the first, and a third makes
// the requests nodeset's contract asks of each Node without nodeset's
// controllers (see contractBaseline). API requests are counted from the
// API server's audit log, by user (each controller runs as its own) and
// user agent (the simulated kubelets, standing in for real kubelets, and
// leader election are counted apart from the controllers' work).
package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/simulated"
	"nodeset.dev/nodeset/pkg/component"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/pkg/kubeletsim"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
	"nodeset.dev/nodeset/test/framework"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // no benchmark asked for (make test): no control plane either
	}
	os.Exit(framework.Run(m, framework.Options{AuditLog: true, Users: append(slices.Clone(framework.TestUsers), baselineUser)}))
}

// result is what one size measured.
type result struct {
	Nodes int `json:"nodes"`
	// Mode is how the clients are limited (capped, uncapped) and whether
	// deploy/'s FlowSchemas are installed.
	Mode string `json:"mode"`
	// Seconds from the scale to N Nodes Ready and untainted, and from the
	// scale to zero to every Node and machine gone.
	ToReady float64 `json:"toReadySeconds"`
	ToGone  float64 `json:"toGoneSeconds"`
	// Seconds from the scale to N Nodes schedulable: Ready and untainted,
	// and without the not-ready taint the TaintNodesByCondition admission
	// plugin gives every new Node (lifted by registration, or else by
	// kube-controller-manager at its own pace); -1 when not within
	// schedulableWait.
	ToSchedulable float64 `json:"toSchedulableSeconds"`
	// The baseline's times for the same work, and the ratios.
	BaselineToReady float64 `json:"baselineToReadySeconds"`
	BaselineToGone  float64 `json:"baselineToGoneSeconds"`
	ReadyRatio      float64 `json:"readyRatio"`
	GoneRatio       float64 `json:"goneRatio"`
	// The baseline again with the simulated kubelets nodeset's Nodes get
	// (their registration, status and Lease renewals, the same code and
	// limits): what the same work costs when the API server also serves
	// the kubelets, as in nodeset's run. Reported beside the baseline, not
	// instead of it.
	KubeletBaselineToReady float64 `json:"kubeletBaselineToReadySeconds"`
	KubeletBaselineToGone  float64 `json:"kubeletBaselineToGoneSeconds"`
	// The contract baseline (contractBaseline): the requests nodeset's
	// contract asks of each Node, with nodeset's clients, concurrency and
	// simulated kubelets, without its controllers. nodeset's time beyond
	// it is its own; its time beyond the baseline is the contract's.
	Contract *contractResult `json:"contractBaseline"`
	// API writes per node over its life (scale-up and scale-down), by
	// controller, and requests per node by verb of both controllers.
	WritesPerNode     map[string]float64 `json:"writesPerNode"`
	RequestsPerNode   map[string]float64 `json:"requestsPerNodeByVerb"`
	WritesPerNodeKind map[string]float64 `json:"writesPerNodeByResource"`
	// Writes per minute while nothing changes, by source.
	IdleWritesPerMinute map[string]float64 `json:"idleWritesPerMinute"`
	// IdleControllerWrites are the controllers' idle writes per minute by
	// controller, verb and resource.
	IdleControllerWrites map[string]float64 `json:"idleControllerWritesPerMinute"`
	// CPU seconds and peak RSS of each controller over the whole run.
	CPUSeconds map[string]float64 `json:"cpuSeconds"`
	PeakRSSMiB map[string]float64 `json:"peakRSSMiB"`
	// KubeletsCPUShare is the part of the node controller's CPU that its
	// simulated kubelets used (they run in its process; real kubelets run
	// on the machines), from its CPU profiles; -1 when none completed.
	KubeletsCPUShare float64 `json:"simulatedKubeletsCPUShare"`
	// The API server and etcd, during the scale-up.
	ControlPlaneCPUSeconds float64 `json:"controlPlaneCPUSecondsScaleUp"`
	// ScaleUp and ScaleDown are where a scale's time goes, from the audit
	// log.
	ScaleUp   *steps `json:"scaleUp,omitempty"`
	ScaleDown *steps `json:"scaleDown,omitempty"`
	// NodeQueueUp and NodeQueueDown are the node controller's syncs of
	// Nodes during the scale-up and the scale-down, and how long they
	// waited in its queue and took, from its metrics.
	NodeQueueUp   queueTimes `json:"nodeQueueScaleUp"`
	NodeQueueDown queueTimes `json:"nodeQueueScaleDown"`
	// Refused are the requests the API server refused with 429 Too Many
	// Requests over the whole run, by source; leader election's are lease
	// renewals and acquisitions.
	Refused map[string]float64 `json:"refused429"`
	// ConflictsAfter are the node controller's Node writes refused with
	// 409, per node, by who wrote the Node last before them.
	ConflictsAfter map[string]float64 `json:"nodeConflictsAfterPerNode"`
	// LeaseRenewalMaxSeconds is the longest a leader-election request took
	// at the API server.
	LeaseRenewalMaxSeconds float64 `json:"leaseRenewalMaxSeconds"`
}

// mode is one way of running a size: with the clients' rate limits (the
// controllers' default 200 QPS, the baseline's the same) or without any
// client-side limit (the API server's priority and fairness is then the
// only one), and with or without deploy/'s FlowSchemas.
type mode struct {
	name       string
	uncapped   bool
	flowSchema bool
	// idle measures the idle window in this mode.
	idle bool
}

var allModes = []mode{
	{name: "capped", idle: true},
	{name: "uncapped", uncapped: true},
	{name: "uncapped+fs", uncapped: true, flowSchema: true},
}

// baselineUser is who the baseline runs as: a plain user (not in
// system:masters, whose requests priority and fairness exempts), so that
// the API server limits it as it limits the controllers.
const baselineUser = "nodeset-bench-baseline"

// idleWindow is how long writes are counted with N idle nodes.
var idleWindow = 2 * time.Minute

var results []*result

// BenchmarkFleet scales a simulated NodeSet 0 -> n Ready -> 0 for each size,
// after the baseline for that size, with fresh controller processes for each.
func BenchmarkFleet(b *testing.B) {
	sizes := []int{100, 1000}
	if v := os.Getenv("NODESET_BENCH_SIZES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("NODESET_BENCH_SIZES=%q: %q is not a size", v, f)
			}
			sizes = append(sizes, n)
		}
	}
	if v, err := time.ParseDuration(os.Getenv("NODESET_BENCH_IDLE")); err == nil {
		idleWindow = v
	}
	modes := allModes
	if v := os.Getenv("NODESET_BENCH_MODES"); v != "" {
		modes = nil
		for _, f := range strings.Split(v, ",") {
			i := slices.IndexFunc(allModes, func(m mode) bool { return m.name == strings.TrimSpace(f) })
			if i < 0 {
				b.Fatalf("NODESET_BENCH_MODES=%q: %q is not one of capped, uncapped, uncapped+fs", v, f)
			}
			modes = append(modes, allModes[i])
		}
	}
	grantBaseline(b, framework.Shared(b))
	for _, n := range sizes {
		for _, m := range modes {
			b.Run(fmt.Sprintf("nodes=%d/%s", n, m.name), func(b *testing.B) {
				if m.flowSchema {
					installFlowSchemas(b, framework.Shared(b))
				}
				for i := range b.N {
					fleet(b, n, m, i)
				}
			})
		}
	}
	report(b, results)
}

// fleet measures one size in one mode: the baseline, then nodeset.
func fleet(b *testing.B, n int, m mode, i int) {
	r := &result{Nodes: n, Mode: m.name}
	r.BaselineToReady, r.BaselineToGone = baseline(b, framework.Shared(b), n, m)
	scaleUpAndDown(b, n, fmt.Sprintf("bench-%d-%s-%d", n, strings.ReplaceAll(m.name, "+", "-"), i), r, m)
	// After nodeset's run, not before: kube-controller-manager's node
	// lifecycle controller goes on writing to the kubelet baseline's deleted
	// Nodes (status updates answered 404) for more than ten minutes at
	// 10,000, and nodeset's counts and times must be its own.
	r.KubeletBaselineToReady, r.KubeletBaselineToGone = kubeletBaseline(b, framework.Shared(b), n, m)
	r.Contract = contractBaseline(b, framework.Shared(b), n, m)
	r.ReadyRatio, r.GoneRatio = r.ToReady/r.BaselineToReady, r.ToGone/r.BaselineToGone
	results = append(results, r)
	b.ReportMetric(r.ToReady, "s-to-ready")
	b.ReportMetric(r.ReadyRatio, "x-baseline-ready")
	b.ReportMetric(r.ToGone, "s-to-gone")
	b.ReportMetric(r.GoneRatio, "x-baseline-gone")
	b.ReportMetric(r.WritesPerNode["controllers"], "writes/node")
	b.ReportMetric(r.PeakRSSMiB["node-controller"], "node-ctrl-peak-MiB")
	b.ReportMetric(r.PeakRSSMiB["nodeset-controller"], "nodeset-ctrl-peak-MiB")
}

// report prints the table and writes the JSON.
func report(b *testing.B, results []*result) {
	if len(results) == 0 {
		return
	}
	t := &table[*result]{results: results, label: 62, column: 14}
	t.row("nodes", func(r *result) string { return strconv.Itoa(r.Nodes) })
	t.row("client limits", func(r *result) string { return r.Mode })
	t.row("0 -> N Ready, s", func(r *result) string { return num(r.ToReady) })
	t.row("  baseline, s", func(r *result) string { return num(r.BaselineToReady) })
	t.row("  ratio (target <= 1.5)", func(r *result) string { return num(r.ReadyRatio) })
	t.row("  baseline with simulated kubelets, s", func(r *result) string { return num(r.KubeletBaselineToReady) })
	t.row("  ratio to it", func(r *result) string { return num(r.ToReady / r.KubeletBaselineToReady) })
	t.row("  contract baseline (nodeset's requests, no controllers), s", func(r *result) string { return num(r.Contract.ToReady) })
	t.row("  ratio to it", func(r *result) string { return num(r.ToReady / r.Contract.ToReady) })
	t.row("  last Node schedulable (no not-ready taint either) at, s", func(r *result) string { return num(r.ToSchedulable) })
	upRows(t, "  ", func(r *result) *steps { return r.ScaleUp })
	queueRows(t, func(r *result) queueTimes { return r.NodeQueueUp })
	t.row("N -> 0 gone, s", func(r *result) string { return num(r.ToGone) })
	t.row("  baseline, s", func(r *result) string { return num(r.BaselineToGone) })
	t.row("  ratio (target <= 1.2; uncapped <= 1.5)", func(r *result) string { return num(r.GoneRatio) })
	t.row("  baseline with simulated kubelets, s", func(r *result) string { return num(r.KubeletBaselineToGone) })
	t.row("  ratio to it", func(r *result) string { return num(r.ToGone / r.KubeletBaselineToGone) })
	t.row("  contract baseline (nodeset's requests, no controllers), s", func(r *result) string { return num(r.Contract.ToGone) })
	t.row("  ratio to it", func(r *result) string { return num(r.ToGone / r.Contract.ToGone) })
	stepRows(t, "  ", downSteps, func(r *result) *steps { return r.ScaleDown })
	queueRows(t, func(r *result) queueTimes { return r.NodeQueueDown })
	t.row("contract baseline: steps tried again", func(r *result) string { return strconv.FormatInt(r.Contract.Retried, 10) })
	upRows(t, "  contract: ", func(r *result) *steps { return r.Contract.ScaleUp })
	stepRows(t, "  contract: ", downSteps, func(r *result) *steps { return r.Contract.ScaleDown })
	for _, k := range []string{"controllers", "nodeset-controller", "node-controller", "simulated-kubelets", "kube-controller-manager"} {
		label := "writes per node, " + k
		if k == "controllers" {
			label += " (target <= 5)"
		}
		t.row(label, func(r *result) string { return num(r.WritesPerNode[k]) })
	}
	for _, k := range sortedKeys(results, func(r *result) map[string]float64 { return r.WritesPerNodeKind }) {
		t.row("  "+k, func(r *result) string { return num(r.WritesPerNodeKind[k]) })
	}
	for _, k := range sortedKeys(results, func(r *result) map[string]float64 { return r.RequestsPerNode }) {
		t.row("requests per node, "+k, func(r *result) string { return num(r.RequestsPerNode[k]) })
	}
	for _, k := range []string{"controllers", "leader-election", "simulated-kubelets"} {
		label := "idle writes/min, " + k
		if k == "controllers" {
			label += " (target 0)"
		}
		t.row(label, func(r *result) string { return cell(r.IdleWritesPerMinute, k) })
		if k == "controllers" {
			for _, kind := range sortedKeys(results, func(r *result) map[string]float64 { return r.IdleControllerWrites }) {
				t.row("  "+kind, func(r *result) string { return cell(r.IdleControllerWrites, kind) })
			}
		}
	}
	for _, k := range []string{"leader-election", "controllers", "simulated-kubelets"} {
		label := "refused (429), " + k
		if k == "leader-election" {
			label += " (target 0)"
		}
		t.row(label, func(r *result) string { return cell(r.Refused, k) })
	}
	t.row("slowest leader-election request, s", func(r *result) string { return num(r.LeaseRenewalMaxSeconds) })
	for _, k := range sortedKeys(results, func(r *result) map[string]float64 { return r.ConflictsAfter }) {
		t.row("node-controller 409s per node after "+k, func(r *result) string { return cell(r.ConflictsAfter, k) })
	}
	for _, k := range []string{"nodeset-controller", "node-controller"} {
		t.row("CPU s, "+k, func(r *result) string { return num(r.CPUSeconds[k]) })
	}
	for _, k := range []string{"nodeset-controller", "node-controller"} {
		t.row("CPU ms per node, "+k, func(r *result) string { return num(1000 * r.CPUSeconds[k] / float64(r.Nodes)) })
	}
	t.row("  share of it: simulated kubelets", func(r *result) string {
		if r.KubeletsCPUShare < 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*r.KubeletsCPUShare)
	})
	t.row("  without the simulated kubelets", func(r *result) string {
		if r.KubeletsCPUShare < 0 {
			return "-"
		}
		return num(1000 * r.CPUSeconds["node-controller"] * (1 - r.KubeletsCPUShare) / float64(r.Nodes))
	})
	t.row("ms per node, 0 -> N Ready", func(r *result) string { return num(1000 * r.ToReady / float64(r.Nodes)) })
	t.row("ms per node, N -> 0 gone", func(r *result) string { return num(1000 * r.ToGone / float64(r.Nodes)) })
	t.row("peak RSS MiB, nodeset-controller (<= 120)", func(r *result) string { return num(r.PeakRSSMiB["nodeset-controller"]) })
	t.row("peak RSS MiB, node-controller (<= 250)", func(r *result) string { return num(r.PeakRSSMiB["node-controller"]) })
	t.row("API server + etcd CPU s, scale-up", func(r *result) string { return num(r.ControlPlaneCPUSeconds) })
	// BenchmarkAWSCalls, when it ran before in this process (make bench),
	// in the same table: one figure per fleet of eks-asg NodeSets, in the
	// first column.
	for _, a := range awsResults {
		label := fmt.Sprintf("AWS calls per node, %d eks-asg set(s) x %d", a.NodeSets, a.Nodes/max(a.NodeSets, 1))
		if a.NodeSets == 1 && a.Nodes >= 100 {
			label += " (<= 1.5)"
		}
		t.row(label, firstColumn(results, num(a.CallsPerNode)))
		t.row(fmt.Sprintf("  AWS calls per steady poll (every %s)", awsPollInterval), firstColumn(results, num(a.CallsPerPoll)))
	}
	fmt.Printf("\nfleet benchmark (idle window %s):\n%s", idleWindow, t.out.String())
	writeJSON(b, "NODESET_BENCH_JSON", "bench.json", map[string]any{"idleWindowSeconds": idleWindow.Seconds(), "results": results, "aws": awsResults})
}

// firstColumn is a row's cell function that shows v under the first result
// only, for a figure measured once for the whole table.
func firstColumn(results []*result, v string) func(*result) string {
	return func(r *result) string {
		if r != results[0] {
			return ""
		}
		return v
	}
}

// queueRows adds the node controller's syncs per Node, and how long they
// waited and took.
func queueRows(t *table[*result], of func(*result) queueTimes) {
	t.row("  node-controller syncs per node", func(r *result) string { return num(of(r).Syncs / float64(r.Nodes)) })
	t.row("  node-controller sync, queue wait / work, mean ms", func(r *result) string {
		return fmt.Sprintf("%.1f / %.1f", 1000*of(r).WaitMean, 1000*of(r).SyncMean)
	})
}

// upRows adds where a scale-up's time went: its creates are timed only
// as a whole (see scaleUpTimes).
func upRows(t *table[*result], prefix string, of func(*result) *steps) {
	t.row(prefix+"last "+upSteps[0]+" at, s", func(r *result) string { return cell(of(r).Last, upSteps[0]) })
	stepRows(t, prefix, upSteps[1:], of)
}

// stepRows adds where a scale's time went: when the last Node took each
// step, and how long each step took per Node.
func stepRows(t *table[*result], prefix string, names []string, of func(*result) *steps) {
	for _, step := range names {
		t.row(prefix+"last "+step+" at, s", func(r *result) string { return cell(of(r).Last, step) })
	}
	for i := 1; i < len(names); i++ {
		step := names[i-1] + " -> " + names[i]
		t.row(prefix+"per node "+step+", median s", func(r *result) string { return cell(of(r).Median, step) })
		t.row(prefix+"per node "+step+", p90 s", func(r *result) string { return cell(of(r).P90, step) })
		t.row(prefix+"  of which "+names[i]+" at the API server, median s", func(r *result) string { return cell(of(r).Server, names[i]) })
	}
}

// qps and burst are the controllers' client limits here, and the baseline's.
const qps, burst = 200, 400

// kubeletQPS is the limit of the simulated kubelets together for what
// they do besides renewing Leases. Real kubelets each have a client of
// their own (50 QPS by default), so N of them are not held to one limit;
// at the controllers' 200 the simulated kubelets' own writes (a status and
// a Lease for each new Node, then the renewals) became what the scale-up
// waited on from N = 1000.
const kubeletQPS = 1000

// leaseRenewInterval is the simulated kubelets' (the kubelet's default).
const leaseRenewInterval = 10 * time.Second

// kubeletLimit is the simulated kubelets' QPS for n Nodes: kubeletQPS on
// top of their renewals (n per leaseRenewInterval). With 1000 alone, the
// 10,000 renewals of each 10 s took the whole budget, and the new Nodes'
// kubelets, starved, reported Ready a minute and a half after their Node
// was made.
func kubeletLimit(n int) int { return kubeletQPS + int(float64(n)/leaseRenewInterval.Seconds()) }

func scaleUpAndDown(b *testing.B, n int, name string, r *result, m mode) {
	ctx := context.Background()
	cp := framework.Shared(b)
	// The deployment's leader-election timings, not the tests' short ones: a
	// controller busy with thousands of Nodes on two shared cores must not
	// lose its lease over a slow renewal.
	limits := []string{"--kube-api-qps=" + strconv.Itoa(qps), "--kube-api-burst=" + strconv.Itoa(burst),
		"--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s"}
	// Real kubelets each have their own client and do not wait on one
	// another; the simulated ones share a pool of workers, which must not
	// make them slower than real ones. With 8, and 1000 QPS renewals
	// included, the last of 10,000 reported Ready 90 s after the last Node
	// was made; with 64 at 5000, a third of them reported Ready more than
	// --provider-id-wait after their machine, their Lease renewals (500 a
	// second) having taken the pool. One in flight per 20 Nodes keeps up
	// with renewals every 10 s at up to 0.5 s each.
	kubeletQPSFlag, kubeletBurstFlag := strconv.Itoa(kubeletLimit(n)), strconv.Itoa(2*kubeletLimit(n))
	kubeletWorkers := strconv.Itoa(max(64, n/20))
	if m.uncapped {
		// The simulated kubelets too: real kubelets have a client each.
		limits[0], kubeletQPSFlag = "--kube-api-qps=-1", "-1"
	}
	// The node controller is profiled in every run (profile), the others
	// with NODESET_BENCH_PPROF.
	profiles := os.Getenv("NODESET_BENCH_PPROF")
	limits = append(limits, "--pprof")
	controllers, err := framework.NewControllers(ctx, cp, framework.ControllerOptions{
		NodeSetArgs: append([]string{"-v=1"}, limits...),
		// The node controller's default workers and the deployment's orphan
		// collection period: the framework's tests run fewer workers and a
		// collection every 2 s, which at 10,000 Nodes was 3 % of the node
		// controller's sampled CPU.
		NodeArgs: append([]string{"-v=1", "--workers=" + strconv.Itoa(nodecontroller.DefaultWorkers), "--orphan-collection-interval=5m", "--simulated-lease-renew-interval=" + leaseRenewInterval.String(),
			"--simulated-kube-api-qps=" + kubeletQPSFlag, "--simulated-kubelet-workers=" + kubeletWorkers, "--simulated-kube-api-burst=" + kubeletBurstFlag}, limits...),
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := controllers.Start(); err != nil {
		b.Fatal(err)
	}
	defer controllers.Stop()
	defer noRestarts(b, controllers)
	if err := controllers.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
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
				InstanceType: "sim.small", BootDelay: &metav1.Duration{Duration: 0}}},
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
	informer, unwatch := watchNodes(b, cp, resolve.Selector(set).String())
	defer unwatch()
	watched := informer.GetIndexer()

	pids := map[string]int{"node-controller": controllers.Node.Pid(), "nodeset-controller": controllers.NodeSet.Pid()}
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

	stopProfiles := profile(b, cp, profiles, fmt.Sprintf("%d-%s", n, m.name), map[string]int{
		"nodeset-controller": controllers.NodeSetMetricsPort, "node-controller": controllers.NodeMetricsPort})
	first := cpu()
	queue := func() queueTimes {
		q, err := readQueue(controllers.NodeMetricsPort, "node")
		if err != nil {
			b.Fatal(err)
		}
		return q
	}
	queueBefore := queue()
	upStart := time.Now()
	scale(b, cs, ns, int32(n))
	waitFor(b, 30*time.Minute, fmt.Sprintf("%d nodes Ready", n), func(ctx context.Context) (bool, string) {
		nodes := watched.List()
		ready := countNodes(nodes, func(node *corev1.Node) bool {
			return nodeutil.IsReady(node) && !hasTaint(node, nodesetv1alpha1.TaintUnregistered)
		})
		return ready == n && len(nodes) == n, fmt.Sprintf("%d/%d Ready and untainted, %d Nodes", ready, n, len(nodes))
	})
	upEnd := time.Now()
	r.NodeQueueUp = queue().since(queueBefore)
	if profiles != "" {
		saveHeaps(b, profiles, fmt.Sprintf("%d-%s", n, m.name), map[string]int{
			"nodeset-controller": controllers.NodeSetMetricsPort, "node-controller": controllers.NodeMetricsPort})
	}
	r.ToReady = upEnd.Sub(upStart).Seconds()
	r.ControlPlaneCPUSeconds = (cpu()["controlplane"] - first["controlplane"]).Seconds()
	r.ToSchedulable = untilSchedulable(b, watched, n, upStart)

	// The scale-up's last status write, then what nothing changing costs.
	setStatus(b, cs, ns, "fleet", n)
	if m.idle {
		// The scale-up's last routine Events go out up to a
		// --routine-event-period (5 s) after it: the idle window starts
		// once the controllers have written nothing for longer than that.
		settled(b, cp, upStart, 6*time.Second)
	}
	idleStart := time.Now()
	if m.idle {
		// The idle window is the measurement: writes per minute while
		// nothing changes, so a fixed window is the point.
		time.Sleep(idleWindow)
	}
	idleEnd := time.Now()
	if m.idle {
		logEvents(b, kube, idleStart, idleEnd)
	}

	queueBefore = queue()
	downStart := time.Now()
	scale(b, cs, ns, 0)
	waitFor(b, 30*time.Minute, "all Nodes and machines gone", func(ctx context.Context) (bool, string) {
		// The machines are asked for only once the Nodes are gone (a Node
		// goes after its machine): listing thousands of them four times a
		// second took the node controller's CPU that the run measures.
		if nodes := len(watched.List()); nodes > 0 {
			return false, fmt.Sprintf("%d Nodes", nodes)
		}
		machines, ok := controllers.Machines(ctx)
		return ok && len(machines) == 0, fmt.Sprintf("0 Nodes, %d machines", len(machines))
	})
	downEnd := time.Now()
	r.NodeQueueDown = queue().since(queueBefore)
	r.ToGone = downEnd.Sub(downStart).Seconds()
	r.KubeletsCPUShare = stopProfiles()
	// The NodeSet's last status write after its Nodes are gone.
	setStatus(b, cs, ns, "fleet", 0)
	last := cpu()
	r.CPUSeconds, r.PeakRSSMiB = map[string]float64{}, map[string]float64{}
	for name, pid := range pids {
		r.CPUSeconds[name] = (last[name] - first[name]).Seconds()
		_, peak, _ := framework.Memory(pid)
		r.PeakRSSMiB[name] = float64(peak) / (1 << 20)
	}
	if err := cp.AuditComplete(ctx); err != nil {
		b.Fatal(err) // a count from a log that lost events would be wrong
	}
	end := time.Now()
	countRequests(b, cp, r, n, [][2]time.Time{{upStart, idleStart}, {downStart, end}}, [2]time.Time{idleStart, idleEnd})
	if !m.idle {
		r.IdleWritesPerMinute, r.IdleControllerWrites = nil, nil
	}
	events, err := cp.AuditEvents(upStart, end)
	if err != nil {
		b.Fatal(err)
	}
	r.Refused, r.LeaseRenewalMaxSeconds = refusals(events)
	r.ConflictsAfter = conflictsAfter(events, n)
	up, err := cp.AuditEvents(upStart, idleStart)
	if err != nil {
		b.Fatal(err)
	}
	r.ScaleUp = scaleUpTimes(up, upStart, set.Name+"-")
	down, err := cp.AuditEvents(downStart, end)
	if err != nil {
		b.Fatal(err)
	}
	r.ScaleDown = scaleDownTimes(down, downStart, set.Name+"-")
	_ = cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "fleet", metav1.DeleteOptions{})
	_ = cs.NodesetV1alpha1().NodeClasses().Delete(ctx, name, metav1.DeleteOptions{})
}

// profile takes CPU profiles back to back, 10 s each, until stop is called:
// always the node controller's, to tell the simulated kubelets' CPU (their
// goroutines carry a profiler label) from its own; with dir set
// (NODESET_BENCH_PPROF=dir) also the nodeset-controller's and the API
// server's, and all are saved into dir (`go tool pprof` merges the files of
// one process given together). stop returns the share of the node
// controller's sampled CPU time that was the simulated kubelets', or -1
// when no profile completed.
func profile(b *testing.B, cp *framework.ControlPlane, dir, run string, ports map[string]int) (stop func() float64) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	admin, err := rest.HTTPClientFor(cp.AdminConfig())
	if err != nil {
		b.Fatal(err)
	}
	type target struct {
		client *http.Client
		url    string
	}
	const node = "node-controller"
	targets := map[string]target{}
	for name, port := range ports {
		if dir != "" || name == node {
			targets[name] = target{http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=10", port)}
		}
	}
	if dir != "" {
		targets["kube-apiserver"] = target{admin, cp.Host + "/debug/pprof/profile?seconds=10"}
	}
	var mu sync.Mutex
	var kubelets, total int64 // CPU nanoseconds sampled
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for name, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
				if err != nil {
					b.Error(err)
					return
				}
				resp, err := t.client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						b.Logf("profile of %s: %v", name, err)
					}
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s: %s", resp.Status, body)
				}
				if err == nil && name == node {
					var labelled, all int64
					if labelled, all, err = labelledCPU(body, kubeletsim.ProfileLabel, kubeletsim.ProfileLabelValue); err == nil {
						mu.Lock()
						kubelets, total = kubelets+labelled, total+all
						mu.Unlock()
					}
				}
				if err == nil && dir != "" {
					err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s-%03d.pb.gz", run, name, i)), body, 0o644)
				}
				if err != nil {
					b.Logf("profile of %s: %v", name, err)
				}
			}
		}()
	}
	return func() float64 {
		cancel()
		wg.Wait()
		if total == 0 {
			return -1
		}
		return float64(kubelets) / float64(total)
	}
}

// saveHeaps saves each controller's heap profile into dir, with N Nodes
// Ready (NODESET_BENCH_PPROF): what their peak RSS is made of.
func saveHeaps(b *testing.B, dir, run string, ports map[string]int) {
	for name, port := range ports {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap", port))
		if err != nil {
			b.Logf("heap profile of %s: %v", name, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s-heap.pb.gz", run, name)), body, 0o644)
		}
		if err != nil {
			b.Logf("heap profile of %s: %v", name, err)
		}
	}
}

// labelledCPU sums a CPU profile's sampled CPU time, and the part of it
// whose samples carry the label key=value.
func labelledCPU(raw []byte, key, value string) (labelled, total int64, err error) {
	p, err := pprofile.ParseData(raw)
	if err != nil {
		return 0, 0, err
	}
	cpu := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			cpu = i
		}
	}
	if cpu < 0 {
		return 0, 0, fmt.Errorf("no cpu samples in the profile")
	}
	for _, sample := range p.Sample {
		v := sample.Value[cpu]
		total += v
		if slices.Contains(sample.Label[key], value) {
			labelled += v
		}
	}
	return labelled, total, nil
}

// logEvents logs the controllers' Events created or repeated in [from, to):
// what the idle window's Event writes were.
func logEvents(b *testing.B, kube kubernetes.Interface, from, to time.Time) {
	events, err := kube.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range events.Items {
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if c := e.Source.Component; (c == "node-controller" || c == "nodeset-controller") && !last.Before(from.Truncate(time.Second)) && last.Before(to) {
			b.Logf("idle window Event: %s %s %s/%s %s (count %d): %s", c, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, last.Format(time.RFC3339), e.Count, e.Message)
		}
	}
}

// settled returns once the audit log has no write of the controllers since
// from for quiet, or after a minute (the idle window then counts what goes
// on).
func settled(b *testing.B, cp *framework.ControlPlane, from time.Time, quiet time.Duration) {
	var last time.Time
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute+quiet, true, func(ctx context.Context) (bool, error) {
		if err := cp.SyncAuditLog(ctx); err != nil {
			return false, err
		}
		events, err := cp.AuditEvents(from, time.Time{})
		if err != nil {
			return false, err
		}
		last = from
		for _, e := range events {
			if src := source(e); (src == "nodeset-controller" || src == "node-controller") && e.IsWrite() {
				last = e.RequestReceived
			}
		}
		return time.Since(last) > quiet, nil
	})
	if err != nil {
		b.Logf("the controllers did not stop writing (last write %s ago): %v", time.Since(last).Round(time.Second), err)
	}
}

// source says whose request an audit event is: a controller, the simulated
// kubelets (which stand in for real kubelets), leader election, or none of
// those ("").
func source(e framework.AuditEvent) string {
	switch e.User.Username {
	case "nodeset-controller", "node-controller":
	case framework.KubeletsName:
		return "simulated-kubelets"
	default:
		return ""
	}
	switch {
	case e.IsLeaderElection():
		return "leader-election"
	case strings.HasPrefix(e.UserAgent, "nodeset-simulated-kubelet"):
		return "simulated-kubelets"
	}
	return e.User.Username
}

// controllerManagers says whether an audit event is kube-controller-manager's
// work, but not its leader election: with --use-service-account-credentials
// each of its controllers is the service account of its name in kube-system
// (the node lifecycle controller is system:serviceaccount:kube-system:node-controller).
func controllerManagers(e framework.AuditEvent) bool {
	if e.ObjectRef != nil && e.ObjectRef.Resource == "leases" && e.ObjectRef.Namespace == metav1.NamespaceSystem &&
		e.ObjectRef.Name == "kube-controller-manager" {
		return false
	}
	return e.User.Username == framework.ControllerManagerName || strings.HasPrefix(e.User.Username, "system:serviceaccount:kube-system:")
}

// countRequests fills the request figures from the audit log: over the
// nodes' lives (the windows) per node, and over the idle window per minute.
func countRequests(b *testing.B, cp *framework.ControlPlane, r *result, n int, life [][2]time.Time, idle [2]time.Time) {
	r.WritesPerNode, r.RequestsPerNode, r.WritesPerNodeKind = map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, w := range life {
		events, err := cp.AuditEvents(w[0], w[1])
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range events {
			src := source(e)
			if controllerManagers(e) && e.IsWrite() {
				// kube-controller-manager's work for the same Nodes (taints,
				// its own bookkeeping): not nodeset's, but the API server's.
				r.WritesPerNode["kube-controller-manager"] += 1 / float64(n)
				r.WritesPerNodeKind["kube-controller-manager: "+writeKind(e)] += 1 / float64(n)
			}
			if src == "" || src == "leader-election" {
				continue
			}
			if src != "simulated-kubelets" {
				r.RequestsPerNode[e.Verb] += 1 / float64(n)
			}
			if !e.IsWrite() {
				continue
			}
			r.WritesPerNode[src] += 1 / float64(n)
			if src != "simulated-kubelets" {
				r.WritesPerNode["controllers"] += 1 / float64(n)
				r.WritesPerNodeKind[src+": "+writeKind(e)] += 1 / float64(n)
			}
		}
	}
	events, err := cp.AuditEvents(idle[0], idle[1])
	if err != nil {
		b.Fatal(err)
	}
	r.IdleWritesPerMinute = map[string]float64{"controllers": 0, "leader-election": 0, "simulated-kubelets": 0}
	r.IdleControllerWrites = map[string]float64{}
	minutes := idle[1].Sub(idle[0]).Minutes()
	for _, e := range events {
		src := source(e)
		if src == "" || !e.IsWrite() {
			continue
		}
		if src == "nodeset-controller" || src == "node-controller" {
			r.IdleControllerWrites[src+": "+writeKind(e)] += 1 / minutes
			src = "controllers"
		}
		r.IdleWritesPerMinute[src] += 1 / minutes
	}
}

// writeKind names a write by verb and resource; a refused one (conflict,
// not found) with its status code.
func writeKind(e framework.AuditEvent) string {
	kind := e.Verb + " " + e.ObjectRef.Resource
	if e.ObjectRef.Subresource != "" {
		kind += "/" + e.ObjectRef.Subresource
	}
	if !e.Succeeded() && e.ResponseStatus != nil {
		kind += fmt.Sprintf(" (%d)", e.ResponseStatus.Code)
	}
	return kind
}

// baseline does the unavoidable work for n Nodes with a minimal client-go
// program at the controllers' QPS and burst (none when uncapped): create
// each Node, mark it Ready (its status, as a kubelet would), and delete it.
// It returns the seconds to all Ready and to all gone.
func baseline(b *testing.B, cp *framework.ControlPlane, n int, m mode) (toReady, toGone float64) {
	kube := baselineClient(cp, m)
	names := benchNames("baseline", n)
	ctx := context.Background()
	start := time.Now()
	parallel(b, names, func(name string) error {
		_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"nodeset.dev/bench": "baseline"}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		// A patch, as a kubelet's status update is: kube-controller-manager
		// taints a new Node at once, so an update of the created object
		// would conflict.
		ready, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{Type: corev1.NodeReady,
			Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}})
		if err != nil {
			return err
		}
		_, err = kube.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, ready, metav1.PatchOptions{}, "status")
		return err
	})
	toReady = time.Since(start).Seconds()
	start = time.Now()
	parallel(b, names, func(name string) error {
		return kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
	return toReady, time.Since(start).Seconds()
}

// kubeletBaseline is the baseline with simulated kubelets: the same
// client creates and deletes the Nodes, and the simulated kubelets (the
// node controller's code, with the limits and workers it has in nodeset's
// run) register each Node, report it Ready and renew its Lease until its
// machine is deleted after the Node. It returns the seconds to all Ready
// (as the kubelets report it) and to all Nodes deleted.
func kubeletBaseline(b *testing.B, cp *framework.ControlPlane, n int, m mode) (toReady, toGone float64) {
	kube := baselineClient(cp, m)
	const label = "baseline-kubelets"
	k := startKubelets(b, cp, n, m, label)
	defer k.stop()
	ctx := context.Background()
	names := benchNames(label, n)

	start := time.Now()
	k.makeNodes(b, kube, 16, names, func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nodeset.dev/bench": label}}}
	})
	k.waitFor(b, n, "Ready", nodeutil.IsReady)
	toReady = time.Since(start).Seconds()
	start = time.Now()
	parallel(b, names, func(name string) error {
		if err := kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		return k.machines.Delete(ctx, k.class, name)
	})
	return toReady, time.Since(start).Seconds()
}

// benchKubelets are simulated kubelets for a baseline's Nodes.
type benchKubelets struct {
	// nodes watches the Nodes labelled nodeset.dev/bench=<label>.
	nodes cache.SharedIndexInformer
	// machines are the Nodes' machines: a Node's kubelet registers it
	// once its machine is made, and stops once it is deleted.
	machines *simulated.Driver
	class    drivers.Class
	stop     func()
}

// startKubelets runs simulated kubelets for the Nodes labelled
// nodeset.dev/bench=label: the node controller's code, as its user, with
// the client limits and workers they have in nodeset's run. stop waits
// until the kubelets have deleted their Leases (once their machines are
// gone; not timed, but done before the next run, whose requests are
// counted) and stops them.
func startKubelets(b *testing.B, cp *framework.ControlPlane, n int, m mode, label string) *benchKubelets {
	kubelets, err := component.NewKube(limited(cp, m, framework.KubeletsName,
		"nodeset-simulated-kubelet/v1alpha1 nodeset-bench-baseline", float32(kubeletLimit(n)), 2*kubeletLimit(n)))
	if err != nil {
		b.Fatal(err)
	}
	// The kubelets' user has the node controller's role, as in nodeset's run.
	if err := framework.InstallRBAC(context.Background(), cp); err != nil {
		b.Fatal(err)
	}
	informer, unwatch := watchNodes(b, cp, "nodeset.dev/bench="+label)
	machines := simulated.New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	fleet := kubeletsim.New(kubelets, corelisters.NewNodeLister(informer.GetIndexer()), machines, kubeletsim.Options{
		RenewInterval: leaseRenewInterval, Workers: max(64, n/20)})
	done := make(chan struct{})
	go func() {
		defer close(done)
		fleet.Run(ctx)
	}()
	class := drivers.Class{Name: label, Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
		DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{
			InstanceType: "sim.small", BootDelay: &metav1.Duration{}}}}}
	return &benchKubelets{nodes: informer, machines: machines, class: class, stop: func() {
		defer unwatch()
		defer func() { cancel(); <-done }()
		admin := kubernetes.NewForConfigOrDie(withRate(cp))
		waitFor(b, 5*time.Minute, "the "+label+" kubelets' Leases gone", func(ctx context.Context) (bool, string) {
			leases, err := admin.CoordinationV1().Leases(kubeletsim.LeaseNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			left := 0
			for _, l := range leases.Items {
				if strings.HasPrefix(l.Name, label+"-") {
					left++
				}
			}
			return left == 0, fmt.Sprintf("%d Leases", left)
		})
	}}
}

// makeNodes creates each named Node through kube, on the given number of
// workers, and then its machine, so that its kubelet registers it.
func (k *benchKubelets) makeNodes(b *testing.B, kube kubernetes.Interface, workers int, names []string, node func(name string) *corev1.Node) {
	ctx := context.Background()
	parallelOn(b, workers, names, func(name string) error {
		if _, err := kube.CoreV1().Nodes().Create(ctx, node(name), metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := k.machines.Create(ctx, drivers.Machine{Name: name, Class: k.class})
		return err
	})
}

// waitFor waits until n of the kubelets' Nodes are what ok says (state
// names it).
func (k *benchKubelets) waitFor(b *testing.B, n int, state string, ok func(*corev1.Node) bool) {
	waitFor(b, 30*time.Minute, fmt.Sprintf("%d Nodes %s", n, state), func(context.Context) (bool, string) {
		count := countNodes(k.nodes.GetIndexer().List(), ok)
		return count == n, fmt.Sprintf("%d/%d %s", count, n, state)
	})
}

// benchNames are n Node names for a baseline.
func benchNames(label string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d-%05d", label, n, i)
	}
	return names
}

// baselineClient is the baselines' client: the baseline's user, at the
// controllers' QPS and burst, or without a limit when uncapped.
func baselineClient(cp *framework.ControlPlane, m mode) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(limited(cp, m, baselineUser, "nodeset-bench-baseline", qps, burst))
}

// limited is user's config with the user agent and client limits given, or
// without a QPS limit when the mode is uncapped.
func limited(cp *framework.ControlPlane, m mode, user, agent string, qps float32, burst int) *rest.Config {
	cfg := cp.Config(user)
	cfg.QPS, cfg.Burst = qps, burst
	if m.uncapped {
		cfg.QPS = -1
	}
	cfg.UserAgent = agent
	return cfg
}

// parallel runs f for every name on 16 workers, as the controllers' workers do.
func parallel(b *testing.B, names []string, f func(string) error) { parallelOn(b, 16, names, f) }

// parallelOn runs f for every name on the given number of workers.
func parallelOn(b *testing.B, workers int, names []string, f func(string) error) {
	work := make(chan string)
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				if err := f(name); err != nil {
					errs <- err
				}
			}
		}()
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// watchNodes keeps the selected Nodes as a watch delivers them (protobuf, no
// compression, as the controllers'), so that waiting for N Ready Nodes does
// not make the API server list thousands of Nodes four times a second: such
// polling took a tenth of its CPU during a scale-down of 5000.
func watchNodes(b *testing.B, cp *framework.ControlPlane, selector string) (informer cache.SharedIndexInformer, stop func()) {
	cfg := cp.AdminConfig()
	cfg.DisableCompression = true
	kube, err := component.NewKube(cfg)
	if err != nil {
		b.Fatal(err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	informer = factory.Core().V1().Nodes().Informer()
	done := make(chan struct{})
	factory.Start(done)
	if !cache.WaitForCacheSync(done, informer.HasSynced) {
		b.Fatal("the Node watch did not sync")
	}
	return informer, func() { close(done); factory.Shutdown() }
}

// withRate is the admin config with a rate limit that does not slow the
// benchmark's own polling.
func withRate(cp *framework.ControlPlane) *rest.Config {
	cfg := cp.AdminConfig()
	cfg.QPS, cfg.Burst = 100, 200
	return cfg
}

func scale(b *testing.B, cs versioned.Interface, ns string, replicas int32) {
	if err := framework.Scale(context.Background(), cs, ns, "fleet", replicas); err != nil {
		b.Fatal(err)
	}
}

// schedulableWait bounds the wait for N schedulable Nodes after N Ready.
const schedulableWait = 10 * time.Minute

// untilSchedulable waits until the n Nodes watched are Ready without any
// taint of their start (nodeset's startup taints, the admission plugin's
// not-ready) and returns the seconds since start, or -1 when that takes
// longer than schedulableWait after the call.
func untilSchedulable(b *testing.B, watched cache.Store, n int, start time.Time) float64 {
	last, err := poll(schedulableWait, func(context.Context) (bool, string) {
		nodes := watched.List()
		schedulable := countNodes(nodes, func(node *corev1.Node) bool {
			return nodeutil.IsReady(node) && !nodeutil.HasStartupTaint(node) && !hasTaint(node, corev1.TaintNodeNotReady)
		})
		return schedulable == n && len(nodes) == n, fmt.Sprintf("%d/%d schedulable", schedulable, n)
	})
	if err != nil {
		b.Logf("%d Nodes schedulable: not within %s; last: %s", n, schedulableWait, last)
		return -1
	}
	return time.Since(start).Seconds()
}

func hasTaint(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// setStatus waits until the NodeSet's status says the controller has seen
// its latest generation and counts n Nodes, all Ready and available: its
// last status write of a scale to n.
func setStatus(b *testing.B, cs versioned.Interface, namespace, name string, n int) {
	b.Helper()
	waitFor(b, 5*time.Minute, fmt.Sprintf("NodeSet status of %d Ready Nodes", n), func(ctx context.Context) (bool, string) {
		s, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := s.Status
		return st.ObservedGeneration == s.Generation && int(st.Replicas) == n && int(st.ReadyReplicas) == n && int(st.AvailableReplicas) == n,
			fmt.Sprintf("observed %d of %d, %d Nodes, %d Ready, %d available", st.ObservedGeneration, s.Generation, st.Replicas, st.ReadyReplicas, st.AvailableReplicas)
	})
}

func waitFor(b *testing.B, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	b.Helper()
	if last, err := poll(timeout, cond); err != nil {
		b.Fatalf("%s: not true after %s; last: %s", what, timeout, last)
	}
}

// poll asks cond four times a second until it holds or timeout passes, and
// returns what cond said last.
func poll(timeout time.Duration, cond func(ctx context.Context) (bool, string)) (last string, err error) {
	err = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		last = why
		return ok, nil
	})
	return last, err
}

// countNodes counts the Nodes among objs that ok says yes to.
func countNodes(objs []any, ok func(*corev1.Node) bool) int {
	count := 0
	for _, obj := range objs {
		if ok(obj.(*corev1.Node)) {
			count++
		}
	}
	return count
}
