package lifecycle

import (
	"context"
	"encoding/json"
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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/pkg/generated/informers/externalversions"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/test/framework"
)

// registerAsKubelet creates the Node name as a kubelet registers it (no
// label of nodeset's) and reports it NotReady with its node info, as a
// kubelet whose network is not up yet does. The Node is removed, finalizers
// and all, when the test ends.
func registerAsKubelet(t *testing.T, name, providerID string) {
	t.Helper()
	kube, _ := clients(t)
	ctx := context.Background()
	_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"kubernetes.io/hostname": name}}, Spec: corev1.NodeSpec{ProviderID: providerID}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
	now := metav1.Now().UTC().Format(time.RFC3339)
	status := fmt.Sprintf(`{"status":{"nodeInfo":{"kubeletVersion":"v1.34.0","machineID":"m-%s"},`+
		`"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady","message":"container runtime network not ready",`+
		`"lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, name, now, now)
	_, err = kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(status), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
}

// labelNode adds labels to the Node, as a person does with kubectl label.
func labelNode(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	kube, _ := clients(t)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	require.NoError(t, err)
	_, err = kube.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
}

// TestAKubeletsNotReadyNodeLabelledWithAClassIsNotTakenOver: a Node its
// kubelet registered and reports on, NotReady for now, that an admin
// labels with a class is a host already. The node controller makes no
// machine for it (a second host under its name), puts no startup taint on
// it (NoExecute: its pods would be driven off) and no finalizer (it would
// then be drained and its name's machine deprovisioned when deleted).
func TestAKubeletsNotReadyNodeLabelledWithAClassIsNotTakenOver(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	createClass(t, "c5-foreign", nil)
	registerAsKubelet(t, "c5-kubelet", "")
	labelNode(t, "c5-kubelet", map[string]string{nodesetv1alpha1.LabelNodeClass: "c5-foreign"})

	eventually(t, time.Minute, "the node controller's verdict on the Node", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, "c5-kubelet", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(n.Finalizers) > 0 || n.Spec.ProviderID != "" || nodeutil.HasStartupTaint(n) {
			return true, "taken over"
		}
		events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=c5-kubelet"})
		if err != nil {
			return false, err.Error()
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return e.Reason == nodecontroller.ReasonForeignNode }), "no event yet"
	})
	n, err := kube.CoreV1().Nodes().Get(context.Background(), "c5-kubelet", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, n.Finalizers, "not held")
	assert.False(t, nodeutil.HasStartupTaint(n), "no startup taint on a Node whose kubelet runs pods")
	assert.Empty(t, n.Spec.ProviderID, "no machine recorded")
	all, ok := c.machines(context.Background())
	require.True(t, ok)
	assert.False(t, slices.ContainsFunc(all, func(m framework.Machine) bool { return m.Name == "c5-kubelet" }), "no second host")
}

// fixedGroupDriver is a group driver whose cloud group always holds the
// same machines. It counts the syncs of the group.
type fixedGroupDriver struct {
	name     string
	machines []drivers.MachineStatus

	mu         sync.Mutex
	ensures    int
	terminated []string
}

func (d *fixedGroupDriver) Name() string                                  { return d.name }
func (d *fixedGroupDriver) Validate(context.Context, drivers.Class) error { return nil }
func (d *fixedGroupDriver) Capacity(context.Context, drivers.Class) (drivers.Capacity, error) {
	return drivers.Capacity{}, drivers.ErrNotImplemented
}

func (d *fixedGroupDriver) EnsureGroup(_ context.Context, g drivers.Group) (drivers.GroupStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ensures++
	return drivers.GroupStatus{Name: g.Name, DesiredSize: int32(len(d.machines)), State: "ACTIVE", Machines: d.machines}, nil
}

func (d *fixedGroupDriver) DescribeGroup(_ context.Context, _ drivers.Class, name string) (drivers.GroupStatus, error) {
	return drivers.GroupStatus{Name: name, DesiredSize: int32(len(d.machines)), State: "ACTIVE", Machines: d.machines}, nil
}

func (d *fixedGroupDriver) TerminateMachine(_ context.Context, _ drivers.Class, _, providerID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.terminated = append(d.terminated, providerID)
	return nil
}

func (d *fixedGroupDriver) DeleteGroup(context.Context, drivers.Class, string) error { return nil }
func (d *fixedGroupDriver) ListGroups(context.Context) ([]drivers.GroupStatus, error) {
	return nil, nil
}

func (d *fixedGroupDriver) syncs() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ensures
}

// startGroupNodeController runs a NodeController for driver in the test's
// process, polling groups every 200ms and replacing a registered Node at
// once when it is NotReady (no remediation cap below one Node in two).
func startGroupNodeController(t *testing.T, driver drivers.Driver) *record.FakeRecorder {
	t.Helper()
	kube, cs := clients(t)
	kubeFactory := kubeinformers.NewSharedInformerFactory(kube, 0)
	nodesetFactory := externalversions.NewSharedInformerFactory(cs, 0)
	nodes := kubeFactory.Core().V1().Nodes()
	lister := nodes.Lister()
	recorder := record.NewFakeRecorder(10000)
	c, err := nodecontroller.NewController(kube, recorder, nodes,
		nodesetFactory.Nodeset().V1alpha1().NodeClasses(), nodesetFactory.Nodeset().V1alpha1().NodeSets(),
		drivers.Registry{driver.Name(): driver},
		nodecontroller.NewMetrics(prometheus.NewRegistry(), func() corelisters.NodeLister { return lister }),
		nodecontroller.Options{Cluster: "nodeset", NodeSets: cs, DrainRecheck: 200 * time.Millisecond,
			GroupPollInterval: 200 * time.Millisecond,
			Remediation:       nodecontroller.RemediationOptions{UnhealthyTimeout: time.Nanosecond, MaxUnhealthyPercent: 50}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	kubeFactory.Start(ctx.Done())
	nodesetFactory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx, 2)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		kubeFactory.Shutdown()
		nodesetFactory.Shutdown()
	})
	require.True(t, c.WaitForCacheSync(ctx), "caches synced")
	return recorder
}

// publishGroupClass says, as the node controller serving the class's
// driver does, that the class is valid and of a group driver.
func publishGroupClass(t *testing.T, name string) {
	t.Helper()
	_, cs := clients(t)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		class.Status.DriverKind = nodesetv1alpha1.DriverKindGroup
		meta.SetStatusCondition(&class.Status.Conditions, metav1.Condition{Type: nodesetv1alpha1.NodeClassValid,
			Status: metav1.ConditionTrue, Reason: "Valid", Message: "test", ObservedGeneration: class.Generation})
		_, err = cs.NodesetV1alpha1().NodeClasses().UpdateStatus(context.Background(), class, metav1.UpdateOptions{})
		return err
	}))
}

// TestAKubeletsNodeLabelledWithAGroupSetIsNeverDeleted: a kubelet's own
// Node (another machine, NotReady) that a person labels with every
// nodeset.dev label of a group NodeSet's Node is not the set's: its
// machine is not in the set's cloud group and nodeset did not make it.
// The node controller deletes it neither as a Node whose machine left the
// group nor as an unhealthy Node to replace (either would take it away
// undrained: it has no finalizer of nodeset's), and terminates nothing.
// The set's own Node, whose finalizer someone took off, is held again.
func TestAKubeletsNodeLabelledWithAGroupSetIsNeverDeleted(t *testing.T) {
	startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	const driverName = "c5-group"
	driver := &fixedGroupDriver{name: driverName, machines: []drivers.MachineStatus{
		{Name: "c5g-m1", ProviderID: "c5-group:///m1", State: drivers.MachineRunning}}}
	createNoticeClass(t, driverName, nil)
	publishGroupClass(t, driverName)
	recorder := startGroupNodeController(t, driver)
	ns := createNamespace(t, "c5-group")
	// Two replicas: the group's machine and the labelled Node make two, so
	// the nodeset controller has nothing to remove.
	createSet(t, ns, "web", driverName, 2)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = cs.NodesetV1alpha1().NodeSets(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "web", metav1.DeleteOptions{})
		_, _ = kube.CoreV1().Nodes().Patch(ctx, "c5g-m1", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = kube.CoreV1().Nodes().Delete(ctx, "c5g-m1", metav1.DeleteOptions{})
	})
	var own *corev1.Node
	eventually(t, time.Minute, "the Node of the group's machine", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, "c5g-m1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		own = n
		return true, ""
	})

	registerAsKubelet(t, "c5g-kubelet", "other-cloud:///k1")
	copied := map[string]string{}
	for k, v := range own.Labels {
		if strings.HasPrefix(k, "nodeset.dev/") {
			copied[k] = v
		}
	}
	labelNode(t, "c5g-kubelet", copied)
	before := driver.syncs()

	var seen []string
	eventually(t, time.Minute, "the node controller's verdict on the labelled Node over three syncs of the group", func(ctx context.Context) (bool, string) {
		for len(recorder.Events) > 0 {
			seen = append(seen, <-recorder.Events)
		}
		n, err := kube.CoreV1().Nodes().Get(ctx, "c5g-kubelet", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && n.DeletionTimestamp != nil) {
			return true, "deleted"
		}
		if err != nil {
			return false, err.Error()
		}
		told := slices.ContainsFunc(seen, func(e string) bool { return strings.Contains(e, nodecontroller.ReasonForeignNode) })
		return told && driver.syncs() >= before+3, fmt.Sprintf("told=%v syncs=%d since the labels", told, driver.syncs()-before)
	})
	n, err := kube.CoreV1().Nodes().Get(ctx, "c5g-kubelet", metav1.GetOptions{})
	require.NoError(t, err, "the kubelet's Node is still there")
	assert.Nil(t, n.DeletionTimestamp, "never deleted")
	assert.Empty(t, n.Finalizers, "not held")
	driver.mu.Lock()
	assert.Empty(t, driver.terminated, "no machine terminated")
	driver.mu.Unlock()

	// The Node of the group's machine, its finalizer taken off by hand, is
	// held again: deleted later, it is drained before its machine goes.
	_, err = kube.CoreV1().Nodes().Patch(ctx, "c5g-m1", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "the group's Node held again", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, "c5g-m1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(n.Finalizers, nodesetv1alpha1.FinalizerTermination), fmt.Sprintf("finalizers %v", n.Finalizers)
	})
}
