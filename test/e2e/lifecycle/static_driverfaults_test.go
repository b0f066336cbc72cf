package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/pkg/generated/informers/externalversions"
)

// faultyDriver is a machine driver that does what a buggy driver does:
// its Create may hang until let go, and may answer any providerID. It
// serves a driver name of its own, so that the package's node-controller
// process leaves its Nodes to the controller the test runs.
type faultyDriver struct {
	name string
	// providerID is what Create answers for a machine name.
	providerID func(name string) string
	// gate, when set, holds every Create until it is closed; entered is
	// signalled when a Create waits on it.
	gate    chan struct{}
	entered chan string
	// deleting, when set, is asked before each Delete of a machine; an
	// error it returns is Delete's, and the machine stays.
	deleting func(name string) error

	mu       sync.Mutex
	machines map[string]time.Time
}

func newFaultyDriver(name string) *faultyDriver {
	return &faultyDriver{name: name, machines: map[string]time.Time{},
		providerID: func(machine string) string { return name + ":///" + machine }}
}

func (d *faultyDriver) Name() string                                  { return d.name }
func (d *faultyDriver) Validate(context.Context, drivers.Class) error { return nil }
func (d *faultyDriver) Capacity(context.Context, drivers.Class) (drivers.Capacity, error) {
	return drivers.Capacity{}, drivers.ErrNotImplemented
}

func (d *faultyDriver) Create(ctx context.Context, m drivers.Machine) (string, error) {
	d.mu.Lock()
	if _, ok := d.machines[m.Name]; !ok {
		d.machines[m.Name] = time.Now()
	}
	d.mu.Unlock()
	if d.gate != nil {
		select {
		case d.entered <- m.Name:
		default:
		}
		select {
		case <-d.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return d.providerID(m.Name), nil
}

func (d *faultyDriver) Delete(_ context.Context, _ drivers.Class, name string) error {
	if d.deleting != nil {
		if err := d.deleting(name); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.machines, name)
	return nil
}

func (d *faultyDriver) Get(_ context.Context, _ drivers.Class, name string) (drivers.MachineStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	created, ok := d.machines[name]
	if !ok {
		return drivers.MachineStatus{}, fmt.Errorf("machine %s: %w", name, drivers.ErrNotFound)
	}
	return drivers.MachineStatus{Name: name, ProviderID: d.providerID(name), State: drivers.MachineRunning, CreatedAt: created.Unix()}, nil
}

func (d *faultyDriver) List(context.Context) ([]drivers.MachineStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []drivers.MachineStatus
	for name, created := range d.machines {
		out = append(out, drivers.MachineStatus{Name: name, ProviderID: d.providerID(name), State: drivers.MachineRunning, CreatedAt: created.Unix()})
	}
	return out, nil
}

// names are the machines the driver has, sorted.
func (d *faultyDriver) names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for name := range d.machines {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// runNodeController runs a NodeController for driver alone, in the test's
// process, against the package's API server, until the test ends.
func runNodeController(t *testing.T, driver drivers.MachineDriver) {
	t.Helper()
	kube, cs := clients(t)
	kubeFactory := kubeinformers.NewSharedInformerFactory(kube, 0)
	nodesetFactory := externalversions.NewSharedInformerFactory(cs, 0)
	nodes := kubeFactory.Core().V1().Nodes()
	lister := nodes.Lister()
	c, err := nodecontroller.NewController(kube, &record.FakeRecorder{}, nodes,
		nodesetFactory.Nodeset().V1alpha1().NodeClasses(), nodesetFactory.Nodeset().V1alpha1().NodeSets(),
		drivers.Registry{driver.Name(): driver},
		nodecontroller.NewMetrics(prometheus.NewRegistry(), func() corelisters.NodeLister { return lister }),
		nodecontroller.Options{Cluster: "nodeset", NodeSets: cs, DrainRecheck: 200 * time.Millisecond})
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
}

// createFaultyClass creates a class of the driver named driver.
func createFaultyClass(t *testing.T, name, driver string) {
	t.Helper()
	createClass(t, name, func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Driver = driver
		class.Spec.Simulated = nil
		class.Spec.Parameters = &runtime.RawExtension{Raw: []byte(`{}`)}
	})
	t.Cleanup(func() {
		_, cs := clients(t)
		_ = cs.NodesetV1alpha1().NodeClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// createLoneNode creates a Node as an admin does: only the class label.
func createLoneNode(t *testing.T, name, class string) {
	t.Helper()
	kube, _ := clients(t)
	_, err := kube.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: class}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// TestALoneNodeDeletedWhileItsMachineIsMadeLeaksNoMachine: an admin
// deletes a lone Node while its driver is still making its machine. The
// Node is held until that machine is gone, as every Node with a machine
// is: a Node that went at once would leave the machine behind with no
// Node to account for it.
func TestALoneNodeDeletedWhileItsMachineIsMadeLeaksNoMachine(t *testing.T) {
	kube, _ := clients(t)
	ctx := context.Background()
	driver := newFaultyDriver("faulty-gate")
	driver.gate, driver.entered = make(chan struct{}), make(chan string, 1)
	runNodeController(t, driver)
	createFaultyClass(t, "static-faulty-gate", driver.name)
	createLoneNode(t, "static-faulty-gate-1", "static-faulty-gate")

	select {
	case <-driver.entered:
	case <-time.After(time.Minute):
		t.Fatal("the driver was not asked for the machine")
	}
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, "static-faulty-gate-1", metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, "the deletion seen by the API server", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, "static-faulty-gate-1", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "gone"
		}
		if err != nil {
			return false, err.Error()
		}
		return n.DeletionTimestamp != nil, fmt.Sprintf("deletionTimestamp %v", n.DeletionTimestamp)
	})
	close(driver.gate) // the machine is made

	eventually(t, 30*time.Second, "the Node and its machine gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, "static-faulty-gate-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(driver.names()) == 0, fmt.Sprintf("Node: %v; machines: %v", err, driver.names())
	})
}

// TestAMachineWithoutAProviderIDIsAFailedProvisioning: a driver whose
// Create answers no error and an empty providerID has not made a machine
// the Node can record. That is told on the Node (the provisioning-error
// annotation cluster-autoscaler reads), not retried in silence with the
// Node stuck unregistered and never timed out.
func TestAMachineWithoutAProviderIDIsAFailedProvisioning(t *testing.T) {
	kube, _ := clients(t)
	driver := newFaultyDriver("faulty-empty")
	driver.providerID = func(string) string { return "" }
	runNodeController(t, driver)
	createFaultyClass(t, "static-faulty-empty", driver.name)
	createLoneNode(t, "static-faulty-empty-1", "static-faulty-empty")

	eventually(t, 30*time.Second, "the failure told on the Node", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, "static-faulty-empty-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		msg := n.Annotations[nodesetv1alpha1.AnnotationProvisioningError]
		return strings.Contains(msg, "providerID"), fmt.Sprintf("providerID %q, provisioning error %q", n.Spec.ProviderID, msg)
	})
}

// TestTwoNodesNeverShareAProviderID: a driver that answers, for a second
// Node's machine, the providerID a first Node already has would make two
// Nodes of one machine: deleting either would take the other's machine,
// and cluster-autoscaler, which tells Nodes apart by providerID, would
// mistake one for the other. The second Node is not given it: its
// provisioning failed, and the first keeps its own.
func TestTwoNodesNeverShareAProviderID(t *testing.T) {
	kube, _ := clients(t)
	driver := newFaultyDriver("faulty-dup")
	driver.providerID = func(string) string { return "faulty-dup:///one-machine" }
	runNodeController(t, driver)
	createFaultyClass(t, "static-faulty-dup", driver.name)
	providerID := func(ctx context.Context, name string) (string, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err.Error()
		}
		return n.Spec.ProviderID, n.Annotations[nodesetv1alpha1.AnnotationProvisioningError]
	}
	createLoneNode(t, "static-faulty-dup-1", "static-faulty-dup")
	eventually(t, 30*time.Second, "the first Node has its providerID", func(ctx context.Context) (bool, string) {
		id, msg := providerID(ctx, "static-faulty-dup-1")
		return id != "", msg
	})
	createLoneNode(t, "static-faulty-dup-2", "static-faulty-dup")
	eventually(t, 30*time.Second, "the second Node's provisioning failed", func(ctx context.Context) (bool, string) {
		id, msg := providerID(ctx, "static-faulty-dup-2")
		return id == "" && strings.Contains(msg, "which another Node has already"), fmt.Sprintf("providerID %q, provisioning error %q", id, msg)
	})
	id, _ := providerID(context.Background(), "static-faulty-dup-2")
	require.Empty(t, id, "two Nodes never share a providerID")
	id, _ = providerID(context.Background(), "static-faulty-dup-1")
	require.Equal(t, "faulty-dup:///one-machine", id)
}
