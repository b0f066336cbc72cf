package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/simulated"
	"nodeset.dev/nodeset/pkg/component"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	nodesetcontroller "nodeset.dev/nodeset/pkg/controller/nodeset"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
	"nodeset.dev/nodeset/test/framework"
)

// contractBaseline makes the API requests nodeset's contract asks of each
// Node, in the order it asks them, and nothing else: its clients (the
// controllers' users, limits, protobuf), its concurrency and the
// simulated kubelets of its run, without its controllers' machinery: no
// informer between one step and the next, no queue, no expectations, no
// status, no Events. Going up, a Node is created as a NodeSet's (its
// finalizer and startup taints), its machine made, and once its kubelet
// reports it Ready one patch records the machine and lifts the startup
// taints; going down, the Node is deleted, cordoned (with the
// unschedulable taint and the drain's start), its pods listed, its
// machine deleted, and its finalizer removed. What nodeset takes beyond
// this is its own; what this takes beyond the baseline is the work the
// contract asks (the registration, the drain, the finalizer), which no
// implementation of it avoids. It returns the seconds to all Ready and
// untainted and to all gone, where the time went, and the steps it had to
// take again.
func contractBaseline(b *testing.B, cp *framework.ControlPlane, n int, m mode) *contractResult {
	const label = "baseline-contract"
	client := func(user string) kubernetes.Interface {
		cfg := limited(cp, m, user, "nodeset-bench-contract", qps, burst)
		cfg.DisableCompression = true
		kube, err := component.NewKube(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return kube
	}
	// Three clients, as in nodeset's run: the nodeset-controller's, and the
	// node controller's and its drains'.
	sets, nodesKube, drainKube := client("nodeset-controller"), client("node-controller"), client("node-controller")
	k := startKubelets(b, cp, n, m, label)
	defer k.stop()
	nodes := k.nodes.GetIndexer()
	names := benchNames(label, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	failures := &stepFailures{}
	defer func() {
		failures.mu.Lock()
		defer failures.mu.Unlock()
		if len(failures.first) > 0 {
			b.Logf("contract baseline: %d steps tried again; the first: %s", failures.count.Load(), strings.Join(failures.first, "; "))
		}
	}()
	register := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer register.ShutDown()
	if _, err := k.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { registerWhenReady(register, obj) },
		UpdateFunc: func(_, obj any) { registerWhenReady(register, obj) },
	}); err != nil {
		b.Fatal(err)
	}
	serve(ctx, register, failures, func(name string) error {
		obj, ok, err := nodes.GetByKey(name)
		if err != nil || !ok {
			return err
		}
		read := obj.(*corev1.Node)
		if !nodeutil.IsReady(read) || !nodeutil.HasStartupTaint(read) {
			return nil
		}
		want := read.DeepCopy()
		want.Spec.ProviderID = simulated.ProviderID(name) // what its Create returned
		want.Annotations[nodesetv1alpha1.AnnotationMachineCreated] = time.Now().UTC().Format(time.RFC3339)
		want.Spec.Taints = nodeutil.RegisteredTaints(want)
		patch, _ := nodeutil.ChangePatch(read, want)
		_, err = nodesKube.CoreV1().Nodes().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
		return err
	})

	r := &contractResult{}
	start := time.Now()
	k.makeNodes(b, sets, nodesetcontroller.MaxNodeWritesInFlight, names, func(name string) *corev1.Node { return contractNode(name, label) })
	k.waitFor(b, n, "Ready and untainted", func(node *corev1.Node) bool { return nodeutil.IsReady(node) && !nodeutil.HasStartupTaint(node) })
	r.ToReady = time.Since(start).Seconds()
	up := [2]time.Time{start, time.Now()}

	// The node controller's own shared pod lists.
	lists := nodecontroller.NewPodLists(drainKube)
	drain := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer drain.ShutDown()
	serve(ctx, drain, failures, func(name string) error {
		obj, ok, err := nodes.GetByKey(name)
		if err != nil || !ok {
			return err
		}
		node := obj.(*corev1.Node)
		if !slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination) {
			return nil
		}
		if !node.Spec.Unschedulable {
			cordoned := node.DeepCopy()
			cordoned.Spec.Unschedulable = true
			cordoned.Annotations[nodesetv1alpha1.AnnotationDrainStarted] = time.Now().UTC().Format(time.RFC3339)
			cordoned.Spec.Taints = append(cordoned.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
			patch, _ := nodeutil.ChangePatch(node, cordoned)
			if node, err = drainKube.CoreV1().Nodes().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
				return err
			}
		}
		if pods, err := lists.OnNode(ctx, name); err != nil {
			return err
		} else if len(pods) > 0 {
			return fmt.Errorf("%s: %d pods on a benchmark Node", name, len(pods))
		}
		if err := k.machines.Delete(ctx, k.class, name); err != nil {
			return err
		}
		patch, ok := nodeutil.RemoveFinalizerPatch(node, nodesetv1alpha1.FinalizerTermination)
		if !ok {
			return nil
		}
		_, err = nodesKube.CoreV1().Nodes().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	start = time.Now()
	parallelOn(b, nodesetcontroller.MaxNodeWritesInFlight, names, func(name string) error {
		err := sets.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		drain.Add(name)
		return err
	})
	waitFor(b, 30*time.Minute, "every contract-baseline Node gone", func(context.Context) (bool, string) {
		left := len(nodes.List())
		return left == 0, fmt.Sprintf("%d Nodes", left)
	})
	r.ToGone = time.Since(start).Seconds()
	r.Retried = failures.count.Load()
	if err := cp.AuditComplete(ctx); err != nil {
		b.Fatal(err)
	}
	events, err := cp.AuditEvents(up[0], up[1])
	if err != nil {
		b.Fatal(err)
	}
	r.ScaleUp = scaleUpTimes(events, up[0], label+"-")
	if events, err = cp.AuditEvents(start, time.Now()); err != nil {
		b.Fatal(err)
	}
	r.ScaleDown = scaleDownTimes(events, start, label+"-")
	return r
}

// contractResult is what the contract baseline measured.
type contractResult struct {
	ToReady float64 `json:"toReadySeconds"`
	ToGone  float64 `json:"toGoneSeconds"`
	// Retried are the steps that failed and were taken again (a patch
	// whose test failed on a Node changed since it was read).
	Retried   int64  `json:"stepsTriedAgain"`
	ScaleUp   *steps `json:"scaleUp"`
	ScaleDown *steps `json:"scaleDown"`
}

// contractNode is a Node as the nodeset-controller creates a NodeSet's:
// the driver annotation, the termination finalizer and the startup taints.
func contractNode(name, label string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{"nodeset.dev/bench": label},
			Annotations: map[string]string{nodesetv1alpha1.AnnotationDriver: nodesetv1alpha1.DriverSimulated},
			Finalizers:  []string{nodesetv1alpha1.FinalizerTermination}},
		Spec: corev1.NodeSpec{Taints: resolve.StartupTaints()},
	}
}

// registerWhenReady queues a Node its kubelet reports Ready while it still
// has its startup taints.
func registerWhenReady(q workqueue.TypedRateLimitingInterface[string], obj any) {
	if node, ok := obj.(*corev1.Node); ok && nodeutil.IsReady(node) && nodeutil.HasStartupTaint(node) {
		q.Add(node.Name)
	}
}

// stepFailures counts the steps that failed, and keeps the first few errors.
type stepFailures struct {
	count atomic.Int64
	mu    sync.Mutex
	first []string
}

func (s *stepFailures) add(err error) {
	if s.count.Add(1) > 3 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first = append(s.first, err.Error())
}

// serve runs f on the node controller's default number of workers for each
// name q gives, until ctx is done or q shuts down, as the node controller
// runs its syncs; a step f fails is counted in failures.
func serve(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], failures *stepFailures, f func(string) error) {
	component.StartWorkers(ctx, q, nodecontroller.DefaultWorkers, "node", func(_ context.Context, name string) error {
		err := f(name)
		if err != nil {
			failures.add(err)
		}
		return err
	})
}

// queueTimes are the mean seconds an item of a controller's work queue
// waited in it and took to sync, from the controller's metrics.
type queueTimes struct {
	Syncs     float64 `json:"syncs"`
	WaitMean  float64 `json:"waitMeanSeconds"`
	SyncMean  float64 `json:"syncMeanSeconds"`
	waitTotal float64
	syncTotal float64
}

// readQueue reads the sums and counts of the named work queue's wait and
// sync histograms from a controller's /metrics.
func readQueue(port int, queue string) (queueTimes, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return queueTimes{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return queueTimes{}, err
	}
	var q queueTimes
	suffix := `{name="` + queue + `"} `
	sums := map[string]*float64{
		"workqueue_queue_duration_seconds_sum" + suffix:  &q.waitTotal,
		"workqueue_work_duration_seconds_sum" + suffix:   &q.syncTotal,
		"workqueue_work_duration_seconds_count" + suffix: &q.Syncs,
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		for prefix, into := range sums {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				if *into, err = strconv.ParseFloat(v, 64); err != nil {
					return queueTimes{}, fmt.Errorf("%s: %w", line, err)
				}
			}
		}
	}
	return q, nil
}

// since is what the queue did from before to q.
func (q queueTimes) since(before queueTimes) queueTimes {
	out := queueTimes{Syncs: q.Syncs - before.Syncs, waitTotal: q.waitTotal - before.waitTotal, syncTotal: q.syncTotal - before.syncTotal}
	if out.Syncs > 0 {
		out.WaitMean, out.SyncMean = out.waitTotal/out.Syncs, out.syncTotal/out.Syncs
	}
	return out
}
