package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/pkg/generated/informers/externalversions"
	nodesetlisters "nodeset.dev/nodeset/pkg/generated/listers/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// noticeVisibility is how long a received notice stays hidden on the fake
// queue before it is given again, unless acknowledged.
const noticeVisibility = 500 * time.Millisecond

// noticeDriver is a group driver whose cloud sends interruption notices on
// a queue held in memory: at-least-once, as SQS is (a notice received and
// not acknowledged is given again after noticeVisibility). It serves a
// driver name of its own, so the package's node-controller process leaves
// its Nodes to the controller the test runs.
type noticeDriver struct {
	name string

	mu        sync.Mutex
	queue     map[string]drivers.Interruption // by receipt
	visibleAt map[string]time.Time
	acked     []string
	delivered map[string]int // by receipt
	completed []drivers.LifecycleAction
	// gate, when set, holds TerminateMachine until closed; terminating is
	// told the providerID of a machine that waits on it.
	gate        chan struct{}
	terminating chan string
}

func newNoticeDriver(name string) *noticeDriver {
	return &noticeDriver{name: name, queue: map[string]drivers.Interruption{}, visibleAt: map[string]time.Time{}, delivered: map[string]int{}}
}

func (d *noticeDriver) Name() string                                  { return d.name }
func (d *noticeDriver) Validate(context.Context, drivers.Class) error { return nil }
func (d *noticeDriver) Capacity(context.Context, drivers.Class) (drivers.Capacity, error) {
	return drivers.Capacity{}, drivers.ErrNotImplemented
}

func (d *noticeDriver) EnsureGroup(context.Context, drivers.Group) (drivers.GroupStatus, error) {
	return drivers.GroupStatus{}, errors.New("no group is made in this test")
}

func (d *noticeDriver) DescribeGroup(context.Context, drivers.Class, string) (drivers.GroupStatus, error) {
	return drivers.GroupStatus{}, drivers.ErrNotFound
}

func (d *noticeDriver) TerminateMachine(ctx context.Context, _ drivers.Class, _, providerID string) error {
	if d.gate != nil {
		select {
		case d.terminating <- providerID:
		default:
		}
		select {
		case <-d.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (d *noticeDriver) DeleteGroup(context.Context, drivers.Class, string) error { return nil }
func (d *noticeDriver) ListGroups(context.Context) ([]drivers.GroupStatus, error) {
	return nil, nil
}

func (d *noticeDriver) InterruptionQueue(class drivers.Class) string { return "queue-" + class.Name }

// ReceiveInterruptions long-polls the queue for up to a second.
func (d *noticeDriver) ReceiveInterruptions(ctx context.Context, _ drivers.Class) ([]drivers.Interruption, error) {
	poll := time.NewTimer(time.Second)
	defer poll.Stop()
	for {
		d.mu.Lock()
		var out []drivers.Interruption
		now := time.Now()
		for receipt, n := range d.queue {
			if !now.Before(d.visibleAt[receipt]) {
				if n.Received.IsZero() {
					n.Received = now // as SQS's ApproximateFirstReceiveTimestamp
					d.queue[receipt] = n
				}
				out = append(out, n)
				d.visibleAt[receipt] = now.Add(noticeVisibility)
				d.delivered[receipt]++
			}
		}
		d.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-poll.C:
			return nil, nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (d *noticeDriver) AckInterruptions(_ context.Context, _ drivers.Class, receipts []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range receipts {
		delete(d.queue, r)
		d.acked = append(d.acked, r)
	}
	return nil
}

func (d *noticeDriver) CompleteLifecycleAction(_ context.Context, _ drivers.Class, action drivers.LifecycleAction) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.completed = append(d.completed, action)
	return nil
}

func (d *noticeDriver) RecordLifecycleHeartbeat(context.Context, drivers.Class, drivers.LifecycleAction) error {
	return nil
}

func (d *noticeDriver) LifecycleDeadline(_ drivers.Class, notice time.Time, _ time.Duration) time.Time {
	return notice.Add(time.Hour)
}

func (d *noticeDriver) LifecycleHeartbeatTimeout(_ drivers.Class, heartbeat time.Duration) time.Duration {
	return heartbeat
}

// put sends a notice.
func (d *noticeDriver) put(n drivers.Interruption) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queue[n.Receipt] = n
	d.visibleAt[n.Receipt] = time.Now()
}

// deliveries is how many times the notice of receipt was delivered.
func (d *noticeDriver) deliveries(receipt string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.delivered[receipt]
}

func (d *noticeDriver) wasAcked(receipt string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.acked, receipt)
}

func (d *noticeDriver) completedTokens() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, a := range d.completed {
		out = append(out, a.Token)
	}
	return out
}

// inProcess is a NodeController run in the test's process for the test's
// drivers, with the listers of its caches.
type inProcess struct {
	*nodecontroller.Controller
	nodes    corelisters.NodeLister
	sets     nodesetlisters.NodeSetLister
	classes  nodesetlisters.NodeClassLister
	recorder *record.FakeRecorder
	// stop stops it, as a leader that goes (once; the test's end stops
	// it too).
	stop func()
}

// startNodeController makes a NodeController for registry against the
// package's API server and starts its informers; with run, its workers and
// interruption consumers too. All stop when the test ends.
func startNodeController(t *testing.T, registry drivers.Registry, run bool) *inProcess {
	t.Helper()
	kube, cs := clients(t)
	kubeFactory := kubeinformers.NewSharedInformerFactory(kube, 0)
	nodesetFactory := externalversions.NewSharedInformerFactory(cs, 0)
	nodes := kubeFactory.Core().V1().Nodes()
	lister := nodes.Lister()
	recorder := record.NewFakeRecorder(1000)
	c, err := nodecontroller.NewController(kube, recorder, nodes,
		nodesetFactory.Nodeset().V1alpha1().NodeClasses(), nodesetFactory.Nodeset().V1alpha1().NodeSets(),
		registry,
		nodecontroller.NewMetrics(prometheus.NewRegistry(), func() corelisters.NodeLister { return lister }),
		nodecontroller.Options{Cluster: "nodeset", NodeSets: cs, DrainRecheck: 200 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	kubeFactory.Start(ctx.Done())
	nodesetFactory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if run {
			_ = c.Run(ctx, 2)
			return
		}
		c.WaitForCacheSync(ctx)
		<-ctx.Done()
	}()
	p := &inProcess{Controller: c, nodes: lister, sets: nodesetFactory.Nodeset().V1alpha1().NodeSets().Lister(),
		classes: nodesetFactory.Nodeset().V1alpha1().NodeClasses().Lister(), recorder: recorder,
		stop: sync.OnceFunc(func() {
			cancel()
			<-done
			kubeFactory.Shutdown()
			nodesetFactory.Shutdown()
		})}
	t.Cleanup(p.stop)
	require.True(t, c.WaitForCacheSync(ctx), "caches synced")
	return p
}

// waitForGroup waits until the controller's caches have the class and the
// NodeSet with its group.
func (p *inProcess) waitForGroup(t *testing.T, ns, set, class string) {
	t.Helper()
	eventually(t, 30*time.Second, "the controller's caches have the class and the group", func(context.Context) (bool, string) {
		s, err := p.sets.NodeSets(ns).Get(set)
		if err != nil || s.Status.Group == nil {
			return false, fmt.Sprintf("NodeSet: %v", err)
		}
		_, err = p.classes.Get(class)
		return err == nil, fmt.Sprintf("NodeClass: %v", err)
	})
}

// createNoticeClass creates a class of the out-of-tree driver named like it.
func createNoticeClass(t *testing.T, name string, mutate func(*nodesetv1alpha1.NodeClass)) {
	t.Helper()
	createClass(t, name, func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Driver = name
		class.Spec.Simulated = nil
		class.Spec.Parameters = &runtime.RawExtension{Raw: []byte(`{}`)}
		class.Spec.RegistrationTimeout = &metav1.Duration{Duration: time.Hour}
		if mutate != nil {
			mutate(class)
		}
	})
	t.Cleanup(func() {
		_, cs := clients(t)
		_ = cs.NodesetV1alpha1().NodeClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// createMachineNode creates a Node as the node controller makes one for a
// group's machine (driver empty: a kubelet's own Node), and removes it,
// finalizers and all, when the test ends.
func createMachineNode(t *testing.T, name, class, namespace, set, driver, instance string, finalizers ...string) {
	t.Helper()
	kube, _ := clients(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers},
		Spec: corev1.NodeSpec{ProviderID: "aws:///zone-a/" + instance}}
	if driver != "" {
		// Sealed, as nodeset makes its Nodes: held and unsealed, a Node
		// made after its class began sealing is none of nodeset's.
		node.Labels = map[string]string{nodesetv1alpha1.LabelNodeClass: class,
			nodesetv1alpha1.LabelNodeSetNamespace: namespace, nodesetv1alpha1.LabelNodeSet: set,
			nodesetv1alpha1.LabelSeal: nodeutil.Seal(namespace, set, class)}
		node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDriver: driver, nodesetv1alpha1.AnnotationGroup: "g-" + set}
	}
	_, err := kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

// createGroupSet creates the NodeSet of a group with the group's name in
// its status, as the node controller records it, and removes it when the
// test ends.
func createGroupSet(t *testing.T, namespace, name, class string) {
	t.Helper()
	_, cs := clients(t)
	createSet(t, namespace, name, class, 0)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		set, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "g-" + name}
		_, err = cs.NodesetV1alpha1().NodeSets(namespace).UpdateStatus(context.Background(), set, metav1.UpdateOptions{})
		return err
	}))
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = cs.NodesetV1alpha1().NodeSets(namespace).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = cs.NodesetV1alpha1().NodeSets(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
}

// testHold is a finalizer of the test's own, which keeps a deleted Node
// readable.
const testHold = "test.nodeset.dev/hold"

// TestAnInterruptionDrainsTheNodeSetsNodeNotAnotherWithItsMachineID: a
// kubelet's own Node and another driver's Node carry the same machine id
// as a NodeSet's Node. A spot warning for the machine drains the NodeSet's
// Node, whichever of them the controller's index gives first, and leaves
// the others alone.
func TestAnInterruptionDrainsTheNodeSetsNodeNotAnotherWithItsMachineID(t *testing.T) {
	const name, machines = "notice-dup", 8
	kube, _ := clients(t)
	ns := createNamespace(t, name)
	createNoticeClass(t, name, nil)
	createGroupSet(t, ns, "web", name)
	driver := newNoticeDriver(name)
	ctrl := startNodeController(t, drivers.Registry{name: driver}, true)
	var ids []string
	for i := range machines {
		id := fmt.Sprintf("i-0dup%02d", i)
		ids = append(ids, id)
		createMachineNode(t, fmt.Sprintf("%s-kubelet-%d", name, i), "", "", "", "", id)
		createMachineNode(t, fmt.Sprintf("%s-other-%d", name, i), name, ns, "web", nodesetv1alpha1.DriverEKSManaged, id)
		createMachineNode(t, fmt.Sprintf("%s-mine-%d", name, i), name, ns, "web", name, id, nodesetv1alpha1.FinalizerTermination, testHold)
	}
	eventually(t, 30*time.Second, "the controller's cache has every Node", func(context.Context) (bool, string) {
		all, err := ctrl.nodes.List(labels.Everything())
		if err != nil {
			return false, err.Error()
		}
		seen := 0
		for _, n := range all {
			if strings.HasPrefix(n.Name, name+"-") {
				seen++
			}
		}
		return seen == 3*machines, fmt.Sprintf("%d of %d", seen, 3*machines)
	})

	driver.put(drivers.Interruption{Receipt: "r-dup", ID: "m-dup", Kind: drivers.InterruptionSpot, MachineIDs: ids,
		Notice: time.Now(), Deadline: time.Now().Add(2 * time.Minute)})
	eventually(t, 30*time.Second, "the notice acted on and acknowledged", func(context.Context) (bool, string) {
		return driver.wasAcked("r-dup"), "not yet"
	})
	ctx := context.Background()
	for i := range machines {
		mine, err := kube.CoreV1().Nodes().Get(ctx, fmt.Sprintf("%s-mine-%d", name, i), metav1.GetOptions{})
		require.NoError(t, err)
		assert.NotEmpty(t, mine.Annotations[nodesetv1alpha1.AnnotationInterruption], "the NodeSet's Node %s has the notice", mine.Name)
		assert.NotNil(t, mine.DeletionTimestamp, "and is being drained")
		for _, other := range []string{fmt.Sprintf("%s-kubelet-%d", name, i), fmt.Sprintf("%s-other-%d", name, i)} {
			n, err := kube.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Empty(t, n.Annotations[nodesetv1alpha1.AnnotationInterruption], "%s is not the driver's", other)
			assert.Nil(t, n.DeletionTimestamp, "%s is left alone", other)
		}
	}
}

// TestALifecycleActionRecordedAsTheNodeIsReleasedIsCompleted: a NodeSet's
// scale-down drains a Node and terminates its machine; the termination
// sets off the group's lifecycle hook, and its notice is recorded on the
// Node after the terminating sync read it and before the sync releases it.
// The lifecycle action is still completed, instead of the cloud waiting
// out the hook's heartbeat timeout.
func TestALifecycleActionRecordedAsTheNodeIsReleasedIsCompleted(t *testing.T) {
	const name = "notice-late"
	kube, _ := clients(t)
	ns := createNamespace(t, name)
	createNoticeClass(t, name, nil)
	createGroupSet(t, ns, "web", name)
	driver := newNoticeDriver(name)
	driver.gate, driver.terminating = make(chan struct{}), make(chan string, 1)
	ctrl := startNodeController(t, drivers.Registry{name: driver}, true)
	node := name + "-1"
	createMachineNode(t, node, name, ns, "web", name, "i-0late1", nodesetv1alpha1.FinalizerTermination)
	eventually(t, 30*time.Second, "the controller's caches have the Node and the group", func(context.Context) (bool, string) {
		set, err := ctrl.sets.NodeSets(ns).Get("web")
		if err != nil || set.Status.Group == nil {
			return false, fmt.Sprintf("NodeSet: %v", err)
		}
		_, err = ctrl.nodes.Get(node)
		return err == nil, fmt.Sprintf("Node: %v", err)
	})

	ctx := context.Background()
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}))
	select {
	case <-driver.terminating:
	case <-time.After(time.Minute):
		t.Fatal("the drained Node's machine was not terminated")
	}
	action := &drivers.LifecycleAction{Group: "g-web", Hook: "nodeset-drain", Token: "t-late", MachineID: "i-0late1", HeartbeatTimeout: time.Hour}
	driver.put(drivers.Interruption{Receipt: "r-late", ID: "m-late", Kind: drivers.InterruptionTermination, MachineIDs: []string{"i-0late1"},
		Notice: time.Now(), Lifecycle: action})
	eventually(t, 30*time.Second, "the lifecycle action recorded on the Node", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		raw := n.Annotations[nodesetv1alpha1.AnnotationInterruption]
		return strings.Contains(raw, "t-late"), "record: " + raw
	})
	close(driver.gate) // the machine is terminated: the sync releases the Node
	eventually(t, 30*time.Second, "the Node gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
	eventually(t, 30*time.Second, "the lifecycle action completed", func(context.Context) (bool, string) {
		return slices.Contains(driver.completedTokens(), "t-late"), fmt.Sprintf("completed %v", driver.completedTokens())
	})
	eventually(t, 30*time.Second, "the notice acknowledged", func(context.Context) (bool, string) {
		return driver.wasAcked("r-late"), "not yet"
	})
}

// failingMachineDriver is a machine driver whose List and Delete fail
// with errors that quote a credential, as a plugin that echoes its options
// does.
type failingMachineDriver struct {
	name      string
	listErr   error
	deleteErr error
	machines  []drivers.MachineStatus
}

func (d *failingMachineDriver) Name() string                                  { return d.name }
func (d *failingMachineDriver) Validate(context.Context, drivers.Class) error { return nil }
func (d *failingMachineDriver) Capacity(context.Context, drivers.Class) (drivers.Capacity, error) {
	return drivers.Capacity{}, drivers.ErrNotImplemented
}
func (d *failingMachineDriver) Create(context.Context, drivers.Machine) (string, error) {
	return "", errors.New("no machine is made in this test")
}
func (d *failingMachineDriver) Delete(context.Context, drivers.Class, string) error {
	return d.deleteErr
}
func (d *failingMachineDriver) Get(context.Context, drivers.Class, string) (drivers.MachineStatus, error) {
	return drivers.MachineStatus{}, drivers.ErrNotFound
}
func (d *failingMachineDriver) List(context.Context) ([]drivers.MachineStatus, error) {
	return d.machines, d.listErr
}

// TestOrphanCollectionRightAfterAStartScrubsTheClassesCredentials: a node
// controller that has just started has provisioned and deleted nothing,
// so it has read no class's credentials. Its first orphan round meets
// driver errors that quote them (a List, a Delete); what it logs, returns
// and tells in Events carries none of them.
func TestOrphanCollectionRightAfterAStartScrubsTheClassesCredentials(t *testing.T) {
	const name = "orphan-creds"
	kube, _ := clients(t)
	ns := createNamespace(t, name)
	ctx := context.Background()
	planted := map[string]string{"list": "planted-list-token-4e9a01", "delete": "planted-delete-token-7c3b52"}
	registry := drivers.Registry{}
	for _, kind := range []string{"list", "delete"} {
		class := name + "-" + kind
		_, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: class},
			Data: map[string][]byte{"token": []byte(planted[kind])}}, metav1.CreateOptions{})
		require.NoError(t, err)
		createNoticeClass(t, class, func(c *nodesetv1alpha1.NodeClass) {
			c.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: ns, Name: class}
		})
		driver := &failingMachineDriver{name: class}
		if kind == "list" {
			driver.listErr = fmt.Errorf("listing machines with token %s: unauthorized", planted[kind])
		} else {
			driver.deleteErr = fmt.Errorf("removing machine with token %s: unauthorized", planted[kind])
			driver.machines = []drivers.MachineStatus{{Name: name + "-orphan", ProviderID: class + ":///" + name + "-orphan",
				State: drivers.MachineRunning, CreatedAt: time.Now().Add(-time.Hour).Unix()}}
		}
		registry[class] = driver
	}
	ctrl := startNodeController(t, registry, false)
	eventually(t, 30*time.Second, "the controller's cache has both classes", func(context.Context) (bool, string) {
		_, listErr := ctrl.classes.Get(name + "-list")
		_, deleteErr := ctrl.classes.Get(name + "-delete")
		return listErr == nil && deleteErr == nil, fmt.Sprintf("%v, %v", listErr, deleteErr)
	})

	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	removed, err := ctrl.CollectOrphans(klog.NewContext(ctx, logger), time.Minute)
	require.Error(t, err, "a driver could not be listed")
	assert.Empty(t, removed)
	logged := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	assert.Contains(t, logged, "Deleting an orphan machine", "the failed delete is logged")
	assert.Contains(t, err.Error(), "listing machines with token", "the failed list is told")
	var events []string
	for len(ctrl.recorder.Events) > 0 {
		events = append(events, <-ctrl.recorder.Events)
	}
	for _, value := range planted {
		assert.NotContains(t, logged, value)
		assert.NotContains(t, err.Error(), value)
		assert.NotContains(t, strings.Join(events, "\n"), value)
	}
}
