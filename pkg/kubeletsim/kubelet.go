// Package kubeletsim runs the simulated kubelets of the simulated driver's
// machines: once a machine has booted and its Node exists, its kubelet posts
// the Node's Ready status and capacity and renews its Lease in
// kube-node-lease, and finishes the deletion of pods bound to it that are
// terminating, as a real kubelet does once their containers stopped (a
// simulated machine runs no containers, so that is at once). One loop and a small worker pool
// serve every machine, so thousands of them stay cheap.
package kubeletsim

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/simulated"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// LeaseNamespace holds the node Leases.
const LeaseNamespace = corev1.NamespaceNodeLease

// ProfileLabel and ProfileLabelValue mark the simulated kubelets' goroutines
// in CPU profiles.
const ProfileLabel, ProfileLabelValue = "component", "simulated-kubelets"

// KubeletVersion is what simulated kubelets report.
const KubeletVersion = "v1.37.2-simulated"

// statusUpdateFrequency is how often a kubelet looks at its Node's status
// (the kubelet's nodeStatusUpdateFrequency).
const statusUpdateFrequency = 10 * time.Second

// Options tunes the simulated kubelets.
type Options struct {
	// LeaseDuration of the node Leases. Default 40s.
	LeaseDuration time.Duration
	// RenewInterval between Lease renewals. Default 10s.
	RenewInterval time.Duration
	// StatusInterval between Ready heartbeats in the Node status when nothing
	// changed. Default 5m, the kubelet's nodeStatusReportFrequency: with node
	// Leases, its Lease renewals are the heartbeat.
	StatusInterval time.Duration
	// Workers make the API calls. Default 8.
	Workers int
}

// Fleet is the set of simulated kubelets of one simulated driver.
type Fleet struct {
	client kubernetes.Interface
	nodes  corelisters.NodeLister
	driver *simulated.Driver
	opts   Options

	mu    sync.Mutex
	state map[string]*kubelet
	work  *workQueue

	pods       corelisters.PodLister
	terminated workqueue.TypedRateLimitingInterface[types.NamespacedName]
}

// kubelet is the state of one simulated kubelet.
type kubelet struct {
	statusAt time.Time
	// posted says a status was posted, postedReady whether it said Ready.
	posted, postedReady bool
	nextRenew           time.Time
	lease               *coordinationv1.Lease
	busy                bool
}

// New returns the simulated kubelets of driver's machines; nodes is a lister of the cluster's Nodes.
func New(client kubernetes.Interface, nodes corelisters.NodeLister, driver *simulated.Driver, opts Options) *Fleet {
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = 40 * time.Second
	}
	if opts.RenewInterval <= 0 {
		opts.RenewInterval = 10 * time.Second
	}
	if opts.StatusInterval <= 0 {
		opts.StatusInterval = 5 * time.Minute
	}
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	return &Fleet{client: client, nodes: nodes, driver: driver, opts: opts,
		state: map[string]*kubelet{}, work: newWorkQueue()}
}

// FinishPods makes the kubelets remove their terminating pods, which
// otherwise stay in the API until their grace period is waited out by a
// kubelet that never comes. Call it before Run, before the informer starts.
func (f *Fleet) FinishPods(pods coreinformers.PodInformer) error {
	f.pods = pods.Lister()
	f.terminated = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "kubeletsim_pods"})
	enqueue := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.DeletionTimestamp != nil && pod.Spec.NodeName != "" {
			f.terminated.Add(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
		}
	}
	_, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	return err
}

// Run serves the kubelets until ctx is done.
func (f *Fleet) Run(ctx context.Context) {
	// Its goroutines, and those they start (their connections' too), carry
	// a profiler label: a CPU profile of the process then tells the
	// simulated kubelets' share from the node controller's own.
	defer pprof.SetGoroutineLabels(ctx)
	ctx = pprof.WithLabels(ctx, pprof.Labels(ProfileLabel, ProfileLabelValue))
	pprof.SetGoroutineLabels(ctx)
	logger := klog.FromContext(ctx).WithName("kubeletsim")
	ctx = klog.NewContext(ctx, logger)
	if _, err := f.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		logger.Error(err, "Cannot create the node lease namespace; Lease renewals will fail until it exists")
	}
	var wg sync.WaitGroup
	for range f.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				fn, ok := f.work.take()
				if !ok {
					return
				}
				fn(ctx)
			}
		}()
	}
	if f.terminated != nil {
		defer f.terminated.ShutDown()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f.finishPod(ctx) {
			}
		}()
	}
	tick := time.NewTicker(min(f.opts.RenewInterval/4, 500*time.Millisecond))
	defer tick.Stop()
	for {
		f.reconcile()
		select {
		case <-ctx.Done():
			if f.terminated != nil {
				f.terminated.ShutDown()
			}
			f.work.stop()
			wg.Wait()
			return
		case <-tick.C:
		case <-f.driver.Changed():
		}
	}
}

// AnnotationNotReady on a simulated machine's Node makes its kubelet report
// Ready=False with the annotation's value as the message, as a real kubelet
// does when its container runtime fails; removing it makes it Ready again.
const AnnotationNotReady = "simulated.nodeset.dev/not-ready"

func wantsReady(node *corev1.Node) bool { return node.Annotations[AnnotationNotReady] == "" }

// AnnotationUnreachable on a simulated machine's Node silences its kubelet:
// it neither posts the Node's status nor renews its Lease, as when the
// machine is cut off from the API server, so the node lifecycle controller
// marks the Node's Ready condition Unknown once its grace period passes.
// Removing it lets the kubelet heartbeat again.
const AnnotationUnreachable = "simulated.nodeset.dev/unreachable"

func unreachable(node *corev1.Node) bool { return node.Annotations[AnnotationUnreachable] != "" }

// reconcile schedules the status posts, Lease renewals and Lease deletions that are due.
func (f *Fleet) reconcile() {
	now := time.Now()
	machines := f.driver.Machines()
	present := make(map[string]bool, len(machines))
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range machines {
		m := machines[i]
		present[m.Name] = true
		if m.Fails || now.Before(m.BootAt) {
			continue
		}
		node, err := f.nodes.Get(m.Name)
		if err != nil {
			continue // the Node does not exist (yet): nothing to register with
		}
		if unreachable(node) {
			continue
		}
		k := f.state[m.Name]
		if k == nil {
			k = &kubelet{}
			f.state[m.Name] = k
		}
		if k.busy {
			continue
		}
		// Whether its readiness changed is told by what this kubelet posted
		// last, not by a cache that may not show it yet (posting again for
		// a lagging cache doubled the kubelets' writes on a busy API
		// server). A Node whose condition still disagrees after
		// statusUpdateFrequency, someone else having written it (as
		// kube-controller-manager does when a Lease lapses), is answered
		// then, as the kubelet's status loop would.
		wants := wantsReady(node)
		postStatus := now.Sub(k.statusAt) >= f.opts.StatusInterval || !k.posted || k.postedReady != wants ||
			(nodeutil.IsReady(node) != wants && now.Sub(k.statusAt) >= statusUpdateFrequency)
		renew := !now.Before(k.nextRenew)
		if !postStatus && !renew {
			continue
		}
		k.busy = true
		// A kubelet's first status (its registration) goes before the
		// others' renewals: real kubelets do not wait on one another, and
		// here they share a pool of workers.
		f.work.add(!k.posted, func(ctx context.Context) { f.serve(ctx, m, k, postStatus, renew) })
	}
	for name, k := range f.state {
		if present[name] || k.busy {
			continue
		}
		k.busy = true
		f.work.add(false, func(ctx context.Context) { f.forget(ctx, name) })
	}
}

// workQueue holds the kubelets' due work, without bound (a kubelet has at
// most one item in it: see kubelet.busy); its takers get registrations
// first.
type workQueue struct {
	mu          sync.Mutex
	ready       *sync.Cond
	first, rest []func(context.Context)
	stopped     bool
}

func newWorkQueue() *workQueue {
	q := &workQueue{}
	q.ready = sync.NewCond(&q.mu)
	return q
}

func (q *workQueue) add(first bool, fn func(context.Context)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if first {
		q.first = append(q.first, fn)
	} else {
		q.rest = append(q.rest, fn)
	}
	q.ready.Signal()
}

// take waits for an item; false once the queue is stopped.
func (q *workQueue) take() (func(context.Context), bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.first) == 0 && len(q.rest) == 0 && !q.stopped {
		q.ready.Wait()
	}
	if q.stopped {
		return nil, false
	}
	from := &q.rest
	if len(q.first) > 0 {
		from = &q.first
	}
	fn := (*from)[0]
	(*from)[0] = nil
	*from = (*from)[1:]
	return fn, true
}

func (q *workQueue) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	q.ready.Broadcast()
}

// finishPod deletes one terminating pod whose node is a running simulated
// machine; it returns false once the queue is shut down.
func (f *Fleet) finishPod(ctx context.Context) bool {
	key, quit := f.terminated.Get()
	if quit {
		return false
	}
	defer f.terminated.Done(key)
	pod, err := f.pods.Pods(key.Namespace).Get(key.Name)
	if err != nil || pod.DeletionTimestamp == nil || !f.running(pod.Spec.NodeName) {
		f.terminated.Forget(key)
		return true
	}
	err = f.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.FromContext(ctx).V(2).Info("Finishing a terminating pod failed; will retry", "pod", klog.KObj(pod), "err", err)
		f.terminated.AddRateLimited(key)
		return true
	}
	f.terminated.Forget(key)
	return true
}

// running says whether name is a booted, healthy simulated machine whose
// kubelet reaches the API server: only those finish their pods.
func (f *Fleet) running(name string) bool {
	m, ok := f.driver.Machine(name)
	if !ok || m.Fails || time.Now().Before(m.BootAt) {
		return false
	}
	node, err := f.nodes.Get(name)
	return err == nil && !unreachable(node)
}

func (f *Fleet) serve(ctx context.Context, m simulated.Machine, k *kubelet, postStatus, renew bool) {
	logger := klog.FromContext(ctx)
	now := time.Now()
	statusAt, nextRenew, lease := k.statusAt, k.nextRenew, k.lease
	posted, postedReady := k.posted, k.postedReady
	if postStatus {
		if ready, err := f.postStatus(ctx, m, now); err != nil {
			logger.V(2).Info("Posting simulated node status failed; will retry", "node", m.Name, "err", err)
		} else {
			statusAt, posted, postedReady = now, true, ready
		}
	}
	if renew {
		var err error
		if lease, err = f.renewLease(ctx, m.Name, lease, now); err != nil {
			logger.V(2).Info("Renewing simulated node lease failed; will retry", "node", m.Name, "err", err)
			lease, nextRenew = nil, now.Add(time.Second)
		} else {
			nextRenew = now.Add(f.opts.RenewInterval)
		}
	}
	f.mu.Lock()
	k.statusAt, k.nextRenew, k.lease, k.busy = statusAt, nextRenew, lease, false
	k.posted, k.postedReady = posted, postedReady
	f.mu.Unlock()
}

// forget deletes the Lease of a machine that is gone.
func (f *Fleet) forget(ctx context.Context, name string) {
	err := f.client.CoordinationV1().Leases(LeaseNamespace).Delete(ctx, name, metav1.DeleteOptions{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).V(2).Info("Deleting simulated node lease failed; will retry", "node", name, "err", err)
		f.state[name].busy = false
		return
	}
	delete(f.state, name)
}

// postStatus posts the machine's status and says whether it was Ready.
func (f *Fleet) postStatus(ctx context.Context, m simulated.Machine, now time.Time) (bool, error) {
	node, err := f.nodes.Get(m.Name)
	if err != nil {
		return false, err
	}
	// The kubelet keeps its well-known labels on an existing Node.
	labels := map[string]string{corev1.LabelHostname: m.Name}
	for k, v := range m.Capacity.Labels {
		if strings.HasPrefix(k, nodesetv1alpha1.ReservedKeyPrefix) {
			continue // nodeset's own labels tie the Node to its NodeSet: never the kubelet's
		}
		labels[k] = v
	}
	missing := map[string]string{}
	for k, v := range labels {
		if node.Labels[k] != v {
			missing[k] = v
		}
	}
	if len(missing) > 0 {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": missing}})
		if _, err := f.client.CoreV1().Nodes().Patch(ctx, m.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return false, err
		}
	}
	ready, reason, message := corev1.ConditionTrue, "KubeletReady", "simulated kubelet is posting ready status"
	if !wantsReady(node) {
		ready, reason, message = corev1.ConditionFalse, "KubeletNotReady", node.Annotations[AnnotationNotReady]
	}
	readySince := metav1.NewTime(now)
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == ready {
			readySince = c.LastTransitionTime
		}
	}
	heartbeat := metav1.NewTime(now)
	condition := func(t corev1.NodeConditionType, status corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: status, Reason: reason, Message: message,
			LastHeartbeatTime: heartbeat, LastTransitionTime: readySince}
	}
	status := corev1.NodeStatus{
		Capacity:    m.Capacity.Resources,
		Allocatable: m.Capacity.Allocatable,
		Conditions: []corev1.NodeCondition{
			condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			condition(corev1.NodeReady, ready, reason, message),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: internalIP(m.Name)},
			{Type: corev1.NodeHostName, Address: m.Name},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: KubeletVersion, OperatingSystem: "linux", Architecture: "amd64",
			OSImage: "nodeset simulated machine", ContainerRuntimeVersion: "simulated://1.0",
			MachineID: m.Name, SystemUUID: m.Name, BootID: fmt.Sprint(m.CreatedAt.Unix()),
		},
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return false, err
	}
	_, err = f.client.CoreV1().Nodes().Patch(ctx, m.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return ready == corev1.ConditionTrue, err
}

func (f *Fleet) renewLease(ctx context.Context, name string, lease *coordinationv1.Lease, now time.Time) (*coordinationv1.Lease, error) {
	leases := f.client.CoordinationV1().Leases(LeaseNamespace)
	renew := metav1.NewMicroTime(now)
	if lease == nil {
		node, err := f.nodes.Get(name)
		if err != nil {
			return nil, err
		}
		created, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID}}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(name),
				LeaseDurationSeconds: ptr.To(int32(f.opts.LeaseDuration / time.Second)),
				RenewTime:            &renew,
			},
		}, metav1.CreateOptions{})
		if err == nil || !apierrors.IsAlreadyExists(err) {
			return withoutManagedFields(created, err)
		}
		if lease, err = leases.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, err
		}
	}
	lease = lease.DeepCopy()
	lease.Spec.RenewTime = &renew
	lease.Spec.HolderIdentity = ptr.To(name)
	return withoutManagedFields(leases.Update(ctx, lease, metav1.UpdateOptions{}))
}

// withoutManagedFields drops the managed fields of a Lease kept for its next
// renewal: a fleet keeps one per Node, and an update without them leaves
// the API server's as they are.
func withoutManagedFields(lease *coordinationv1.Lease, err error) (*coordinationv1.Lease, error) {
	if lease != nil {
		lease.ManagedFields = nil
	}
	return lease, err
}

// internalIP derives a stable address in 10.128.0.0/9 from the node's name.
func internalIP(name string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	v := h.Sum32()&0x7fffff | 0x800000
	return net.IPv4(10, byte(v>>16), byte(v>>8), byte(v)).String()
}
