package node

import (
	"context"
	"encoding/json"
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
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	nodesetfake "nodeset.dev/nodeset/pkg/generated/clientset/versioned/fake"
	"nodeset.dev/nodeset/pkg/generated/informers/externalversions"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

var testNow = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// recordingDriver is a MachineDriver that records its calls; the real
// drivers are tested against their real backends elsewhere.
type recordingDriver struct {
	mu        sync.Mutex
	name      string
	machines  map[string]string // name -> providerID
	creates   int
	deletes   []string
	createErr error
	deleteErr error
	listErr   error
	createdAt map[string]int64  // name -> Unix seconds, for List
	classes   map[string]string // name -> NodeClass made with, for List
	// deletedWith is the class each Delete was given, by machine name.
	deletedWith map[string]drivers.Class
}

func newRecordingDriver(name string) *recordingDriver {
	return &recordingDriver{name: name, machines: map[string]string{}}
}

func (d *recordingDriver) Name() string                                  { return d.name }
func (d *recordingDriver) Validate(context.Context, drivers.Class) error { return nil }
func (d *recordingDriver) Capacity(context.Context, drivers.Class) (drivers.Capacity, error) {
	return drivers.Capacity{}, drivers.ErrNotImplemented
}

func (d *recordingDriver) Create(_ context.Context, m drivers.Machine) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.creates++
	if d.createErr != nil {
		return "", d.createErr
	}
	if id, ok := d.machines[m.Name]; ok {
		return id, nil
	}
	d.machines[m.Name] = "test:///" + m.Name
	return d.machines[m.Name], nil
}

func (d *recordingDriver) Delete(_ context.Context, class drivers.Class, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deletes = append(d.deletes, name)
	if d.deletedWith == nil {
		d.deletedWith = map[string]drivers.Class{}
	}
	d.deletedWith[name] = class
	if d.deleteErr != nil {
		return d.deleteErr
	}
	delete(d.machines, name)
	return nil
}

func (d *recordingDriver) Get(_ context.Context, _ drivers.Class, name string) (drivers.MachineStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id, ok := d.machines[name]
	if !ok {
		return drivers.MachineStatus{}, drivers.ErrNotFound
	}
	return drivers.MachineStatus{Name: name, ProviderID: id, State: drivers.MachineRunning}, nil
}

func (d *recordingDriver) List(context.Context) ([]drivers.MachineStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.listErr != nil {
		return nil, d.listErr
	}
	var out []drivers.MachineStatus
	for name, id := range d.machines {
		out = append(out, drivers.MachineStatus{Name: name, ProviderID: id, State: drivers.MachineRunning,
			CreatedAt: d.createdAt[name], Owner: drivers.Owner{Namespace: "team-a", Name: "web"}, Class: d.classes[name]})
	}
	return out, nil
}

type fixture struct {
	t            *testing.T
	kube         *kubefake.Clientset
	driver       *recordingDriver
	controller   *Controller
	recorder     *record.FakeRecorder
	nodes        corelisters.NodeLister
	nodeIndexer  cache.Indexer
	nodesets     *nodesetfake.Clientset
	setIndexer   cache.Indexer
	classIndexer cache.Indexer
	now          time.Time
	// drainCalls are the requests sent on the controller's Drain client
	// (which serves them from kube's objects), as "verb resource".
	drainCalls []string
}

func testClass(name string) *nodesetv1alpha1.NodeClass {
	return &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver:              nodesetv1alpha1.DriverSimulated,
			DriverSections:      nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}},
			RegistrationTimeout: &metav1.Duration{Duration: 10 * time.Minute},
			Drain:               &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 5 * time.Minute}},
		},
	}
}

// setNode is a Node as the NodeSetController creates it.
func setNode(name, class string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(testNow.Add(-time.Minute)),
			Labels: map[string]string{
				nodesetv1alpha1.LabelNodeClass:        class,
				nodesetv1alpha1.LabelNodeSet:          "web",
				nodesetv1alpha1.LabelNodeSetNamespace: "team-a",
			},
			Finalizers: []string{nodesetv1alpha1.FinalizerTermination},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: nodesetv1alpha1.TaintUnregistered, Effect: corev1.TaintEffectNoSchedule},
			{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule},
		}},
	}
}

func newFixture(t *testing.T, classes []*nodesetv1alpha1.NodeClass, objects ...runtime.Object) *fixture {
	f := &fixture{t: t, recorder: record.NewFakeRecorder(100), driver: newRecordingDriver(nodesetv1alpha1.DriverSimulated), now: testNow}
	f.kube = kubefake.NewClientset(objects...)
	var nodesetObjects []runtime.Object
	for _, c := range classes {
		nodesetObjects = append(nodesetObjects, c)
	}
	nodesets := nodesetfake.NewSimpleClientset(nodesetObjects...) // the typed tracker has no schema for the CRDs
	f.nodesets = nodesets
	kubeFactory := kubeinformers.NewSharedInformerFactory(f.kube, 0)
	nodesetFactory := externalversions.NewSharedInformerFactory(nodesets, 0)
	nodeInformer := kubeFactory.Core().V1().Nodes()
	f.nodes = nodeInformer.Lister()
	f.nodeIndexer = nodeInformer.Informer().GetIndexer()
	drain := kubefake.NewClientset()
	drain.PrependReactor("*", "*", func(action core.Action) (bool, runtime.Object, error) {
		f.drainCalls = append(f.drainCalls, action.GetVerb()+" "+action.GetResource().Resource)
		obj, err := f.kube.Invokes(action, nil)
		return true, obj, err
	})
	c, err := NewController(f.kube, f.recorder, nodeInformer,
		nodesetFactory.Nodeset().V1alpha1().NodeClasses(), nodesetFactory.Nodeset().V1alpha1().NodeSets(),
		drivers.Registry{f.driver.Name(): f.driver},
		NewMetrics(prometheus.NewRegistry(), func() corelisters.NodeLister { return f.nodes }),
		Options{Cluster: "test", Now: func() time.Time { return f.now }, Drain: drain,
			// The fake clientset has no REST client: evict through the typed client.
			Evict: func(ctx context.Context, pod *corev1.Pod, options *metav1.DeleteOptions) error {
				return f.kube.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
					ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}, DeleteOptions: options})
			}})
	require.NoError(t, err)
	for _, o := range objects {
		if n, ok := o.(*corev1.Node); ok {
			require.NoError(t, nodeInformer.Informer().GetIndexer().Add(n))
		}
	}
	for _, cl := range classes {
		require.NoError(t, nodesetFactory.Nodeset().V1alpha1().NodeClasses().Informer().GetIndexer().Add(cl))
	}
	f.setIndexer = nodesetFactory.Nodeset().V1alpha1().NodeSets().Informer().GetIndexer()
	f.classIndexer = nodesetFactory.Nodeset().V1alpha1().NodeClasses().Informer().GetIndexer()
	f.controller = c
	t.Cleanup(c.queue.ShutDown)
	t.Cleanup(c.groups.ShutDown)
	return f
}

// sync runs one reconcile of the named Node, then copies the API's version
// of it into the informer cache, as the watch would.
func (f *fixture) sync(name string) error {
	err := f.controller.syncNode(context.Background(), name)
	node, getErr := f.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if getErr == nil {
		f.updateCache(node)
	} else if apierrors.IsNotFound(getErr) {
		f.deleteCache(name)
	}
	return err
}

func (f *fixture) updateCache(node *corev1.Node) {
	require.NoError(f.t, f.nodeIndexer.Update(node))
}

func (f *fixture) deleteCache(name string) {
	if obj, ok, _ := f.nodeIndexer.GetByKey(name); ok {
		require.NoError(f.t, f.nodeIndexer.Delete(obj))
	}
}

func (f *fixture) get(name string) *corev1.Node {
	node, err := f.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(f.t, err)
	return node
}

func (f *fixture) events() []string {
	f.controller.routine.flush()
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// onEviction answers the fixture's evictions with answer's error (nil: the
// eviction is accepted).
func (f *fixture) onEviction(answer func() error) {
	f.kube.PrependReactor("create", "pods", func(action core.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return true, nil, answer()
	})
}

func markReady(node *corev1.Node) *corev1.Node {
	node = node.DeepCopy()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return node
}

func TestProvisionRecordsProviderIDAndIsIdempotent(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
	require.NoError(t, f.sync("web-a"))
	node := f.get("web-a")
	assert.Equal(t, "test:///web-a", node.Spec.ProviderID)
	assert.Equal(t, nodesetv1alpha1.DriverSimulated, node.Annotations[nodesetv1alpha1.AnnotationDriver])
	assert.Equal(t, testNow.Format(time.RFC3339), node.Annotations[nodesetv1alpha1.AnnotationMachineCreated])
	assert.True(t, nodeutil.HasStartupTaint(node), "the startup taint stays until the kubelet is Ready")

	// A crash after Create but before the Node update: the next process
	// (which remembers nothing) finds the same machine by name and makes
	// no second one.
	f.updateCache(setNode("web-a", "sim"))
	require.NoError(t, f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), setNode("web-a", "sim"), ""))
	f.controller.recorded.forget("web-a")
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, 2, f.driver.creates)
	assert.Len(t, f.driver.machines, 1, "one machine per Node name")
	assert.Equal(t, "test:///web-a", f.get("web-a").Spec.ProviderID)

	// With the providerID recorded, nothing is created again.
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, 2, f.driver.creates)
}

// TestACopyFromBeforeItsOwnWriteIsNotWrittenAgain: a Node synced again
// from the cache's copy made before the controller's own write of its
// machine and registration (another writer's change came first) is left
// for the write's own event; the same write again would be refused for
// the taints it tests. Once the cache shows the write, or after
// recordedSettle, the Node is synced as usual.
func TestACopyFromBeforeItsOwnWriteIsNotWrittenAgain(t *testing.T) {
	before := markReady(setNode("web-a", "sim"))
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, before)
	require.NoError(t, f.sync("web-a"))
	require.False(t, nodeutil.HasStartupTaint(f.get("web-a")), "recorded and registered in one write")
	writes := f.nodeWrites()

	f.updateCache(before) // the older copy
	require.NoError(t, f.controller.syncNode(context.Background(), "web-a"))
	assert.Equal(t, writes, f.nodeWrites(), "no write from the older copy")
	assert.Equal(t, 1, f.driver.creates, "and no machine asked for again")

	f.now = testNow.Add(recordedSettle)
	assert.Error(t, f.controller.syncNode(context.Background(), "web-a"), "the older copy's taints are refused")
	assert.Equal(t, writes+1, f.nodeWrites(), "a copy that stays behind is acted on after recordedSettle")
	assert.False(t, nodeutil.HasStartupTaint(f.get("web-a")), "and undoes nothing")
}

func TestStartupTaintLiftedOnlyWhenReady(t *testing.T) {
	node := setNode("web-a", "sim")
	// As the TaintNodesByCondition admission plugin gives every new Node.
	notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	node.Spec.Taints = append(node.Spec.Taints, notReady)
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
	require.NoError(t, f.sync("web-a"))
	require.NoError(t, f.sync("web-a"))
	assert.True(t, nodeutil.HasStartupTaint(f.get("web-a")), "not Ready: taint stays")
	assert.Contains(t, f.get("web-a").Spec.Taints, notReady, "not Ready: so does kube's")

	ready, err := f.kube.CoreV1().Nodes().UpdateStatus(context.Background(), markReady(f.get("web-a")), metav1.UpdateOptions{})
	require.NoError(t, err)
	f.updateCache(ready)
	require.NoError(t, f.sync("web-a"))
	node = f.get("web-a")
	assert.False(t, nodeutil.HasStartupTaint(node))
	require.Len(t, node.Spec.Taints, 1, "the template's taints stay; kube's not-ready goes with the startup taints, in one write")
	assert.Equal(t, "dedicated", node.Spec.Taints[0].Key)
	assert.Contains(t, f.events(), "Normal Registered 1 node(s) registered (the kubelet reports Ready; startup taint removed): web-a")
}

// nodeWrites counts the writes of Nodes the controller made.
func (f *fixture) nodeWrites() int {
	writes := 0
	for _, a := range f.kube.Actions() {
		if a.GetResource().Resource == "nodes" && (a.GetVerb() == "update" || a.GetVerb() == "patch") {
			writes++
		}
	}
	return writes
}

func TestProviderIDAndRegistrationAreOneWriteWhenTheKubeletIsQuick(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
	f.controller.opts.ProviderIDWait = 10 * time.Second
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, 1, f.driver.creates)
	assert.Empty(t, f.get("web-a").Spec.ProviderID, "the providerID waits for the kubelet")
	assert.Zero(t, f.nodeWrites())

	// The kubelet reports Ready 3s later: one write records the machine and
	// lifts the taint, and the machine is not made again.
	f.now = testNow.Add(3 * time.Second)
	ready, err := f.kube.CoreV1().Nodes().UpdateStatus(context.Background(), markReady(f.get("web-a")), metav1.UpdateOptions{})
	require.NoError(t, err)
	f.updateCache(ready)
	f.kube.ClearActions()
	require.NoError(t, f.sync("web-a"))
	node := f.get("web-a")
	assert.Equal(t, "test:///web-a", node.Spec.ProviderID)
	assert.Equal(t, testNow.Format(time.RFC3339), node.Annotations[nodesetv1alpha1.AnnotationMachineCreated], "the machine's creation, not the write's")
	assert.False(t, nodeutil.HasStartupTaint(node))
	assert.Equal(t, 1, f.nodeWrites())
	assert.Equal(t, 1, f.driver.creates)
	assert.Equal(t, []string{
		"Normal Provisioned Driver simulated created the machines of 1 node(s): web-a",
		"Normal Registered 1 node(s) registered (the kubelet reports Ready; startup taint removed): web-a",
	}, sortedEvents(f.events()))
}

func TestProviderIDIsRecordedAloneWhenTheKubeletIsSlow(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
	f.controller.opts.ProviderIDWait = 10 * time.Second
	require.NoError(t, f.sync("web-a"))
	f.now = testNow.Add(9 * time.Second)
	require.NoError(t, f.sync("web-a"))
	assert.Empty(t, f.get("web-a").Spec.ProviderID, "still waiting")
	f.now = testNow.Add(10 * time.Second)
	require.NoError(t, f.sync("web-a"))
	node := f.get("web-a")
	assert.Equal(t, "test:///web-a", node.Spec.ProviderID)
	assert.True(t, nodeutil.HasStartupTaint(node), "not Ready: the taint stays")
	assert.Equal(t, 1, f.driver.creates, "the machine made first is the one recorded")
}

func TestALoneNodeIsRecordedAtOnce(t *testing.T) {
	// A static Node has no finalizer until it is written: recording
	// cannot wait, or a deletion meanwhile would lose its machine.
	node := setNode("static-a", "sim")
	node.Finalizers = nil
	delete(node.Labels, nodesetv1alpha1.LabelNodeSet)
	delete(node.Labels, nodesetv1alpha1.LabelNodeSetNamespace)
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
	f.controller.opts.ProviderIDWait = 10 * time.Second
	require.NoError(t, f.sync("static-a"))
	got := f.get("static-a")
	assert.Equal(t, "test:///static-a", got.Spec.ProviderID)
	assert.Contains(t, got.Finalizers, nodesetv1alpha1.FinalizerTermination)
	assert.Equal(t, []string{"Normal Provisioned Driver simulated created machine test:///static-a"}, f.events(),
		"a lone Node's steps are told on it")
}

func TestRoutineStepsAreOneEventPerNodeSet(t *testing.T) {
	var nodes []runtime.Object
	for i := range 12 {
		nodes = append(nodes, setNode(fmt.Sprintf("web-%02d", i), "sim"))
	}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, nodes...)
	for i := range 12 {
		require.NoError(t, f.sync(fmt.Sprintf("web-%02d", i)))
	}
	assert.Equal(t, []string{"Normal Provisioned Driver simulated created the machines of 12 node(s): " +
		"web-00, web-01, web-02, web-03, web-04, web-05, web-06, web-07, web-08, web-09 and 2 more"}, f.events())
	assert.Empty(t, f.events(), "told once")
}

func sortedEvents(events []string) []string {
	slices.Sort(events)
	return events
}

func TestRegistrationTimeoutDeletesTheSetNode(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
	require.NoError(t, f.sync("web-a"))
	f.now = testNow.Add(9 * time.Minute)
	require.NoError(t, f.sync("web-a"))
	_, err := f.kube.CoreV1().Nodes().Get(context.Background(), "web-a", metav1.GetOptions{})
	require.NoError(t, err, "still within the registration timeout")

	f.now = testNow.Add(10*time.Minute + time.Second)
	require.NoError(t, f.sync("web-a"))
	var deleted bool
	for _, a := range f.kube.Actions() {
		if a.Matches("delete", "nodes") {
			deleted = true
			assert.NotNil(t, a.(core.DeleteAction).GetDeleteOptions().Preconditions, "deleted with a UID precondition")
		}
	}
	assert.True(t, deleted, "a Node that did not register in time is deleted for its NodeSet to replace")
	assert.Empty(t, f.driver.deletes, "its machine goes through the deletion path (drain, then deprovision)")
}

// deletedNodeFixture is a fixture with Node web-a of class sim deleted, its
// machine made, and objects (its pods) besides.
func deletedNodeFixture(t *testing.T, objects ...runtime.Object) *fixture {
	node := setNode("web-a", "sim")
	node.Spec.ProviderID = "test:///web-a"
	node.DeletionTimestamp = &metav1.Time{Time: testNow}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, append([]runtime.Object{node}, objects...)...)
	f.driver.machines["web-a"] = "test:///web-a"
	return f
}

func TestTerminationCordonsDrainsThenDeprovisionsThenReleases(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: "web-a"}}
	mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "static", Namespace: "kube-system",
		Annotations: map[string]string{mirrorPodAnnotation: "x"}}, Spec: corev1.PodSpec{NodeName: "web-a"}}
	skipped := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "team-a",
		Annotations: map[string]string{nodesetv1alpha1.AnnotationSkipDrain: "true"}}, Spec: corev1.PodSpec{NodeName: "web-a"}}
	f := deletedNodeFixture(t, pod, mirror, skipped)
	evictions := 0
	f.onEviction(func() error {
		evictions++
		// The eviction deletes the pod, as the API server would.
		return f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "team-a", "app")
	})

	// 1. cordon and record the start, then (the same sync) evict; the
	// mirror pod is left alone; the drain waits for the pod
	require.NoError(t, f.sync("web-a"))
	got := f.get("web-a")
	assert.True(t, got.Spec.Unschedulable)
	assert.Equal(t, testNow.Format(time.RFC3339), got.Annotations[nodesetv1alpha1.AnnotationDrainStarted])
	assert.Equal(t, 1, evictions)
	assert.True(t, cordonedBeforeEvicting(f.kube.Actions()), "the cordon is written before any eviction")
	assert.Empty(t, f.get("web-a").Annotations[drainedAnnotation], "the pod was still there when listed")
	assert.Empty(t, f.driver.deletes)
	condition := drainCondition(f.get("web-a"))
	require.NotNil(t, condition, "the drain's progress is in the Node's conditions")
	assert.Equal(t, ReasonDraining, condition.Reason)
	assert.Contains(t, condition.Message, "1 pod(s) left to evict", "the mirror pod and the skip-drain pod are not waited for")

	// 2. the pod is gone: drained, deprovisioned, released
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, 1, evictions)
	assert.Contains(t, f.events(), "Normal Drained All evictable pods are gone")
	assert.Equal(t, ReasonDrained, drainCondition(f.get("web-a")).Reason)
	assert.Equal(t, []string{"web-a"}, f.driver.deletes)
	assert.NotContains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination)
}

// cordonedBeforeEvicting reports whether a Node was cordoned before the
// first eviction in actions.
func cordonedBeforeEvicting(actions []core.Action) bool {
	cordoned := false
	for _, a := range actions {
		if isCordon(a) {
			cordoned = true
		}
		if a.GetVerb() == "create" && a.GetSubresource() == "eviction" {
			return cordoned
		}
	}
	return false
}

// nodePatchOps are the operations of a JSON patch of a Node, nil for any
// other action.
func nodePatchOps(a core.Action) []map[string]any {
	p, ok := a.(core.PatchAction)
	if !ok || a.GetResource().Resource != "nodes" || p.GetPatchType() != types.JSONPatchType {
		return nil
	}
	var ops []map[string]any
	if err := json.Unmarshal(p.GetPatch(), &ops); err != nil {
		return nil
	}
	return ops
}

// isCordon: a's patch marks the Node unschedulable.
func isCordon(a core.Action) bool {
	return slices.ContainsFunc(nodePatchOps(a), func(op map[string]any) bool {
		return op["op"] == "add" && op["path"] == "/spec/unschedulable" && op["value"] == true
	})
}

// isRelease: a's patch removes the termination finalizer.
func isRelease(a core.Action) bool {
	ops := nodePatchOps(a)
	return slices.ContainsFunc(ops, func(op map[string]any) bool {
		return op["op"] == "test" && strings.HasPrefix(op["path"].(string), "/metadata/finalizers/") && op["value"] == nodesetv1alpha1.FinalizerTermination
	}) && slices.ContainsFunc(ops, func(op map[string]any) bool { return op["op"] == "remove" })
}

// TestADrainThatEvictedIsToldFromAnOlderCopy: the sync that finds the
// evicted pods gone may read the cache's copy from before the Draining
// condition was written (another writer's change came first). The drain
// still ends as one that evicted pods: Drained, told once, no second
// DrainStarted.
func TestADrainThatEvictedIsToldFromAnOlderCopy(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: "web-a"}}
	f := deletedNodeFixture(t, pod)
	f.onEviction(func() error {
		return f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "team-a", "app")
	})
	require.NoError(t, f.sync("web-a"))
	require.NotNil(t, drainCondition(f.get("web-a")), "pods were evicted")
	older := f.get("web-a")
	older.Status.Conditions = slices.DeleteFunc(older.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == DrainCondition })
	f.updateCache(older)

	require.NoError(t, f.controller.syncNode(context.Background(), "web-a"))
	assert.Equal(t, []string{"web-a"}, f.driver.deletes)
	events := f.events()
	assert.Equal(t, 1, countPrefix(events, "Normal "+ReasonDrainStarted+" "), "%v", events)
	assert.Equal(t, 1, countPrefix(events, "Normal "+ReasonDrained+" "), "%v", events)
}

func countPrefix(list []string, prefix string) int {
	n := 0
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

func TestNothingToDrainCostsTwoWrites(t *testing.T) {
	f := deletedNodeFixture(t)
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, []string{"web-a"}, f.driver.deletes, "cordoned, found empty and deprovisioned in one sync")
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == "update" || a.GetVerb() == "patch" {
			assert.True(t, isCordon(a), "the first write is the cordon")
			break
		}
	}
	assert.NotContains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination)
	assert.Equal(t, 2, f.nodeWrites(), "the cordon and the release, nothing else")
	assert.Nil(t, drainCondition(f.get("web-a")), "no Draining condition for a drain with nothing in it")
	assert.Equal(t, []string{"Normal Deprovisioned Driver simulated deleted the machines of 1 node(s): web-a"}, f.events())
}

// TestDrainHasItsOwnClient: the cordon and the drain's pod list go on the
// Drain client, the release on the main one, so that at a scale-down of
// many Nodes neither client makes both writes of each Node.
func TestDrainHasItsOwnClient(t *testing.T) {
	f := deletedNodeFixture(t)
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, []string{"patch nodes", "list pods"}, f.drainCalls)
	var releases int
	for _, a := range f.kube.Actions() {
		if isRelease(a) {
			releases++
		}
	}
	assert.Equal(t, 1, releases, "the release")
	assert.Equal(t, 2, f.nodeWrites(), "the cordon and the release, on two clients")
}

// TestAnotherWriterDoesNotMakeTheReleaseConflict: kube-controller-manager
// taints a Node whose kubelet stops reporting while its drain runs
// (node.kubernetes.io/unreachable). The release that follows in the same
// sync does not conflict with that write, keeps the taint, and the
// termination takes two writes.
func TestAnotherWriterDoesNotMakeTheReleaseConflict(t *testing.T) {
	f := deletedNodeFixture(t)
	unreachable := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}
	f.kube.PrependReactor("list", "pods", func(core.Action) (bool, runtime.Object, error) {
		// Between the cordon and the release, as kube-controller-manager would.
		obj, err := f.kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", "web-a")
		require.NoError(t, err)
		node := obj.(*corev1.Node).DeepCopy()
		node.Spec.Taints = append(node.Spec.Taints, unreachable)
		require.NoError(t, f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), node, ""))
		return false, nil, nil
	})
	require.NoError(t, f.sync("web-a"), "no conflict")
	got := f.get("web-a")
	assert.NotContains(t, got.Finalizers, nodesetv1alpha1.FinalizerTermination, "released")
	assert.True(t, got.Spec.Unschedulable)
	assert.Contains(t, got.Spec.Taints, unreachable, "the other writer's taint stays")
	assert.Equal(t, 2, f.nodeWrites(), "the cordon and the release")
}

// TestTheCordonCarriesTheUnschedulableTaint: the cordon gives the Node the
// taint kube-controller-manager gives a cordoned Node, in the same write,
// so that kube-controller-manager has nothing to write; a Node that has the
// taint already does not get it twice.
func TestTheCordonCarriesTheUnschedulableTaint(t *testing.T) {
	startup := corev1.Taint{Key: "example.com/startup", Effect: corev1.TaintEffectNoSchedule}
	for name, taints := range map[string][]corev1.Taint{
		"none":      nil,
		"another":   {startup},
		"its own":   {unschedulableTaint},
		"both":      {startup, unschedulableTaint},
		"old value": {{Key: corev1.TaintNodeUnschedulable, Value: "x", Effect: corev1.TaintEffectNoSchedule}},
	} {
		t.Run(name, func(t *testing.T) {
			f := deletedNodeFixture(t)
			node := f.get("web-a")
			node.Spec.Taints = taints
			f.updateCache(node)
			require.NoError(t, f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), node, ""))
			var cordoned *corev1.Node
			f.kube.PrependReactor("list", "pods", func(core.Action) (bool, runtime.Object, error) {
				obj, err := f.kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", "web-a")
				require.NoError(t, err)
				cordoned = obj.(*corev1.Node).DeepCopy()
				return false, nil, nil
			})
			require.NoError(t, f.sync("web-a"))
			require.NotNil(t, cordoned, "the drain listed the Node's pods")
			assert.True(t, cordoned.Spec.Unschedulable)
			assert.Equal(t, 1, countTaints(cordoned.Spec.Taints, isUnschedulableTaint), "%v", cordoned.Spec.Taints)
			assert.Equal(t, len(taints)+1-countTaints(taints, isUnschedulableTaint), len(cordoned.Spec.Taints),
				"the Node's other taints stay: %v", cordoned.Spec.Taints)
			assert.Equal(t, 2, f.nodeWrites(), "the cordon and the release")
		})
	}
}

func countTaints(taints []corev1.Taint, match func(corev1.Taint) bool) int {
	n := 0
	for _, t := range taints {
		if match(t) {
			n++
		}
	}
	return n
}

// TestReleaseOfANodeReplacedUnderItsNameFails: a Node deleted and made again
// under the same name while the old one's machine went away is not
// released by the old one's sync.
func TestReleaseOfANodeReplacedUnderItsNameFails(t *testing.T) {
	f := deletedNodeFixture(t)
	old := f.get("web-a")
	old.UID = "old"
	require.NoError(t, f.nodeIndexer.Update(old))
	replaced := old.DeepCopy()
	replaced.UID = "new"
	require.NoError(t, f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), replaced, ""))
	require.Error(t, f.sync("web-a"))
	assert.Contains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination, "the new Node keeps its hold")
}

// TestReleasedNodeIsNotTerminatedTwice: a sync on the cache's older copy of a
// Node, made before the cache sees it gone, neither deletes the machine again
// nor writes the Node.
func TestReleasedNodeIsNotTerminatedTwice(t *testing.T) {
	f := deletedNodeFixture(t)
	// The cache is not told of the writes: it still has the Node as it was.
	ctx := context.Background()
	require.NoError(t, f.controller.syncNode(ctx, "web-a"))
	require.Equal(t, 2, f.nodeWrites(), "cordoned and released")
	require.NoError(t, f.controller.syncNode(ctx, "web-a"))
	assert.Equal(t, 2, f.nodeWrites(), "no write on the older copy")
	assert.Equal(t, []string{"web-a"}, f.driver.deletes, "the machine is deleted once")
}

func TestDeprovisionInProgressKeepsTheFinalizer(t *testing.T) {
	node := setNode("web-a", "sim")
	node.DeletionTimestamp = &metav1.Time{Time: testNow}
	node.Spec.Unschedulable = true
	node.Annotations = map[string]string{
		nodesetv1alpha1.AnnotationDrainStarted: testNow.Format(time.RFC3339),
		drainedAnnotation:                      testNow.Format(time.RFC3339),
	}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
	f.driver.deleteErr = drivers.ErrInProgress
	require.NoError(t, f.sync("web-a"))
	assert.Contains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination, "the machine is not gone yet")

	// A drain that just ended while the machine takes its time is recorded,
	// so the Node shows "deleting" and a restart does not drain again.
	fresh := setNode("web-b", "sim")
	fresh.DeletionTimestamp = &metav1.Time{Time: testNow}
	fresh.Spec.Unschedulable = true
	fresh.Annotations = map[string]string{nodesetv1alpha1.AnnotationDrainStarted: testNow.Format(time.RFC3339)}
	f2 := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, fresh)
	f2.driver.deleteErr = drivers.ErrInProgress
	require.NoError(t, f2.sync("web-b"))
	assert.NotEmpty(t, f2.get("web-b").Annotations[drainedAnnotation])
	assert.Contains(t, f2.get("web-b").Finalizers, nodesetv1alpha1.FinalizerTermination)

	f.driver.deleteErr = errors.New("cloud says no")
	require.Error(t, f.sync("web-a"), "a failed delete is retried with backoff")
	assert.Contains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination, "a Node is never released while its machine may exist")

	f.driver.deleteErr = nil
	require.NoError(t, f.sync("web-a"))
	assert.NotContains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination)
}

func TestDrainTimeoutWithCordonLeavesTheNode(t *testing.T) {
	class := testClass("sim")
	class.Spec.Drain.OnTimeout = nodesetv1alpha1.DrainTimeoutCordon
	node := setNode("web-a", "sim")
	node.DeletionTimestamp = &metav1.Time{Time: testNow}
	node.Spec.Unschedulable = true
	node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDrainStarted: testNow.Add(-6 * time.Minute).Format(time.RFC3339)}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: "web-a"}}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{class}, node, pod)
	f.onEviction(func() error {
		return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
	})
	require.NoError(t, f.sync("web-a"))
	require.NoError(t, f.sync("web-a"))
	assert.Empty(t, f.driver.deletes, "onTimeout: Cordon never deprovisions")
	assert.Contains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination)
	var timedOut bool
	for _, e := range f.events() {
		timedOut = timedOut || strings.Contains(e, ReasonDrainTimedOut)
	}
	assert.True(t, timedOut, "a DrainTimedOut event tells the admin why the Node stays")
}

func TestNodesOfUnservedDriversAreLeftAlone(t *testing.T) {
	eks := testClass("eks")
	eks.Spec.Driver = nodesetv1alpha1.DriverEKSASG
	eks.Spec.Simulated = nil
	unserved := setNode("eks-a", "eks")
	unserved.DeletionTimestamp = &metav1.Time{Time: testNow}
	foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kubelet-made"}}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{eks}, unserved, foreign)
	require.NoError(t, f.sync("eks-a"))
	require.NoError(t, f.sync("kubelet-made"))
	for _, a := range f.kube.Actions() {
		assert.False(t, a.GetVerb() == "update" || a.GetVerb() == "delete" || a.GetVerb() == "patch",
			"unexpected %s %s", a.GetVerb(), a.GetResource().Resource)
	}
	assert.Zero(t, f.driver.creates)
	assert.Empty(t, f.driver.deletes)
}

func TestDeletedNodeOfAGoneClassIsStillDeprovisioned(t *testing.T) {
	// The class was deleted: the driver annotation still names who owns the machine.
	node := setNode("web-a", "gone")
	node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDriver: nodesetv1alpha1.DriverSimulated,
		nodesetv1alpha1.AnnotationDrainStarted: testNow.Format(time.RFC3339), drainedAnnotation: testNow.Format(time.RFC3339)}
	node.Spec.Unschedulable = true
	node.DeletionTimestamp = &metav1.Time{Time: testNow}
	f := newFixture(t, nil, node)
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, []string{"web-a"}, f.driver.deletes)
}

func TestDrainWaitsForVolumeDetach(t *testing.T) {
	class := testClass("sim")
	class.Spec.Drain.WaitForVolumeDetach = true
	node := setNode("web-a", "sim")
	node.DeletionTimestamp = &metav1.Time{Time: testNow}
	node.Spec.Unschedulable = true
	node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDrainStarted: testNow.Format(time.RFC3339)}
	node.Status.VolumesAttached = []corev1.AttachedVolume{{Name: "kubernetes.io/csi/ebs^vol-1", DevicePath: "/dev/xvdb"}}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{class}, node)
	require.NoError(t, f.sync("web-a"))
	got := f.get("web-a")
	assert.Empty(t, got.Annotations[drainedAnnotation], "no pods, but a volume is still attached")
	assert.Contains(t, drainCondition(got).Message, "waiting for 1 volume(s) to detach")

	got.Status.VolumesAttached = nil
	_, err := f.kube.CoreV1().Nodes().UpdateStatus(context.Background(), got, metav1.UpdateOptions{})
	require.NoError(t, err)
	f.updateCache(f.get("web-a"))
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, []string{"web-a"}, f.driver.deletes, "detached: the drain is done and the machine goes")

	// Past the timeout a volume that never detaches does not hold the machine.
	node2 := node.DeepCopy()
	node2.Name = "web-b"
	node2.Annotations[nodesetv1alpha1.AnnotationDrainStarted] = testNow.Add(-time.Hour).Format(time.RFC3339)
	f2 := newFixture(t, []*nodesetv1alpha1.NodeClass{class}, node2)
	require.NoError(t, f2.sync("web-b"))
	assert.Equal(t, []string{"web-b"}, f2.driver.deletes)
}

func TestProvisioningErrorsAreRecordedOnTheNode(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
	f.driver.createErr = fmt.Errorf("no sim.small left in zone a: %w", drivers.ErrOutOfCapacity)
	require.Error(t, f.sync("web-a"))
	got := f.get("web-a")
	assert.Equal(t, "OutOfCapacity: no sim.small left in zone a: out of capacity", got.Annotations[nodesetv1alpha1.AnnotationProvisioningError])
	assert.Empty(t, got.Spec.ProviderID)

	f.driver.createErr = nil
	require.NoError(t, f.sync("web-a"))
	got = f.get("web-a")
	assert.NotEmpty(t, got.Spec.ProviderID)
	assert.NotContains(t, got.Annotations, nodesetv1alpha1.AnnotationProvisioningError, "cleared once the machine exists")
}

// TestPassingCreateErrorsAreNotProvisioningErrors: a throttled create, or
// one the cloud is still carrying out, is retried; recorded on the Node it
// would be a failed instance for cluster-autoscaler, which deletes the node
// and backs its group off.
func TestPassingCreateErrorsAreNotProvisioningErrors(t *testing.T) {
	for _, passing := range []error{drivers.ErrThrottled, drivers.ErrInProgress} {
		t.Run(passing.Error(), func(t *testing.T) {
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
			f.driver.createErr = fmt.Errorf("creating web-a: %w", passing)
			require.Error(t, f.sync("web-a"), "retried")
			assert.NotContains(t, f.get("web-a").Annotations, nodesetv1alpha1.AnnotationProvisioningError)
		})
	}
}

// TestConflictingProviderIDWriteDoesNotCreateAgain: when the write that
// records a new machine's providerID fails (another writer replaced the
// Node's taints meanwhile), the retry records the same machine without asking the driver
// to create it again.
func TestConflictingProviderIDWriteDoesNotCreateAgain(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, markReady(setNode("web-a", "sim")))
	conflicts := 1
	f.kube.PrependReactor("patch", "nodes", func(core.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), "web-a", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	require.Error(t, f.sync("web-a"))
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, 1, f.driver.creates, "one Create for one machine")
	assert.Equal(t, "test:///web-a", f.get("web-a").Spec.ProviderID)
}

// TestAnEditNotYetJudgedNeverReachesAMachine: the machine of a Node is
// made from its NodeSet's current spec, which may be a tenant's edit the
// nodeset controller has not judged yet; one that breaks a rule (a label
// of nodeset's own through the simulated kubelet, a label the class stamps
// with another value) makes no machine, whatever the set's last Accepted.
func TestAnEditNotYetJudgedNeverReachesAMachine(t *testing.T) {
	class := testClass("sim")
	class.Spec.TenantOverrides = []string{"labels"}
	class.Spec.NodeTemplate.Labels = map[string]string{"example.com/lifecycle": "spot"}
	accepted := []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue, Reason: "Accepted"}}
	tests := []struct {
		name string
		edit func(*nodesetv1alpha1.NodeSet)
		want string
	}{
		{"a reserved label through the kubelet", func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{"nodeset.dev/tenant": "victim"}}
		}, "spec.simulated.labels"},
		{"a label the class stamps", func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Template.Labels = map[string]string{"example.com/lifecycle": "on-demand"}
		}, `spec.template.labels["example.com/lifecycle"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{class}, setNode("web-a", "sim"))
			set := &nodesetv1alpha1.NodeSet{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", Generation: 2},
				Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "sim", Replicas: ptr.To[int32](1)},
				Status:     nodesetv1alpha1.NodeSetStatus{Conditions: accepted},
			}
			tt.edit(set)
			require.NoError(t, f.setIndexer.Add(set))
			err := f.sync("web-a")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Zero(t, f.driver.creates, "no machine")
			assert.Empty(t, f.get("web-a").Spec.ProviderID)
		})
	}
}

// TestAStaleCacheDoesNotDeprovisionANodeMadeAgain: a new leader's cache
// still shows a Node its predecessor released as drained and deleting,
// while the API server has a Node of the same name made since, whose
// machine goes by that name. The stale copy must not take the new Node's
// machine, nor its finalizer.
func TestAStaleCacheDoesNotDeprovisionANodeMadeAgain(t *testing.T) {
	f, again := madeAgainFixture(t, func(stale *corev1.Node) {
		stale.Spec.Unschedulable = true
		stale.Annotations = map[string]string{
			nodesetv1alpha1.AnnotationDrainStarted: testNow.Format(time.RFC3339),
			drainedAnnotation:                      testNow.Format(time.RFC3339),
		}
	})

	err := f.controller.syncNode(context.Background(), "web-a")
	assert.Empty(t, f.driver.deletes, "the machine of the Node made again is not deleted")
	require.NoError(t, err)
	live := f.get("web-a")
	assert.Equal(t, again.UID, live.UID)
	assert.Contains(t, live.Finalizers, nodesetv1alpha1.FinalizerTermination, "the Node made again keeps its finalizer")
}

// madeAgainFixture is a fixture whose API server has Node web-a made
// again (another UID, its machine recorded), while the cache still has a
// deleting copy of the web-a released before it, as edit leaves it.
func madeAgainFixture(t *testing.T, edit func(stale *corev1.Node)) (*fixture, *corev1.Node) {
	again := setNode("web-a", "sim")
	again.UID = "uid-web-a-again"
	again.Spec.ProviderID = "sim://web-a"
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, again)
	stale := setNode("web-a", "sim")
	stale.DeletionTimestamp = &metav1.Time{Time: testNow}
	if edit != nil {
		edit(stale)
	}
	f.updateCache(stale)
	return f, again
}

// TestANodeItCordonsIsDeprovisionedWithoutAnotherRead: a Node deleted with
// nothing to drain goes from cordon to deprovision in one sync. The
// cordon's write tested the Node's UID, so the Node need not be read again
// before its machine goes: that read was a third of the node controller's
// requests in a scale-down, on the client whose limit paces it.
func TestANodeItCordonsIsDeprovisionedWithoutAnotherRead(t *testing.T) {
	f := deletedNodeFixture(t)
	f.kube.ClearActions()
	require.NoError(t, f.controller.syncNode(context.Background(), "web-a"))
	assert.Equal(t, []string{"web-a"}, f.driver.deletes)
	for _, a := range f.kube.Actions() {
		assert.False(t, a.GetResource().Resource == "nodes" && a.GetVerb() == "get", "no read of the Node: %v", a)
	}
	assert.NotContains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination, "released")
}

// TestAStaleUncordonedCopyDoesNotDeprovisionANodeMadeAgain: the cache is
// further behind than in TestAStaleCacheDoesNotDeprovisionANodeMadeAgain:
// its copy of the released Node is not even cordoned. The cordon's write
// tests that copy's UID and is refused, so nothing is deprovisioned and
// the Node made again keeps its finalizer and stays schedulable.
func TestAStaleUncordonedCopyDoesNotDeprovisionANodeMadeAgain(t *testing.T) {
	f, again := madeAgainFixture(t, nil)

	_ = f.controller.syncNode(context.Background(), "web-a")
	assert.Empty(t, f.driver.deletes, "the machine of the Node made again is not deleted")
	live := f.get("web-a")
	assert.Equal(t, again.UID, live.UID)
	assert.False(t, live.Spec.Unschedulable, "the Node made again is not cordoned")
	assert.Contains(t, live.Finalizers, nodesetv1alpha1.FinalizerTermination, "the Node made again keeps its finalizer")
}
