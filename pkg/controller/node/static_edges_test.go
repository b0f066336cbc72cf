package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// loneNode is a Node as an admin creates it: the class label, nothing else
// of nodeset's.
func loneNode(name, class string, extraLabels map[string]string) *corev1.Node {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(testNow.Add(-time.Minute)),
		Labels:            map[string]string{nodesetv1alpha1.LabelNodeClass: class}}}
	for k, v := range extraLabels {
		node.Labels[k] = v
	}
	return node
}

// TestALoneNodeThatNeverRegistersIsReplacedInPlace: a static Node's
// machine that does not register within the class's registrationTimeout
// is replaced, as a NodeSet's is, but in place (no NodeSet makes a new
// Node): the machine goes, the Node stays and gets a new one. Labels that
// look like a NodeSet's, without naming one whole, do not make it one.
func TestALoneNodeThatNeverRegistersIsReplacedInPlace(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
	}{
		{"only the class label", nil},
		{"a NodeSet label without its namespace", map[string]string{nodesetv1alpha1.LabelNodeSet: "web"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, loneNode("static-a", "sim", tt.labels))
			require.NoError(t, f.sync("static-a"))
			node := f.get("static-a")
			require.Equal(t, "test:///static-a", node.Spec.ProviderID)
			assert.True(t, nodeutil.HasStartupTaint(node), "pods wait for the machine to register, as on any Node of a machine")

			f.now = testNow.Add(10*time.Minute + time.Second)
			require.NoError(t, f.sync("static-a"))
			assert.Equal(t, []string{"static-a"}, f.driver.deletes, "the machine that did not register is deleted")
			assert.Equal(t, 2, f.driver.creates, "and a new machine is made for it")
			node = f.get("static-a")
			assert.Nil(t, node.DeletionTimestamp, "the Node stays: nobody would make it again")
			assert.Equal(t, "test:///static-a", node.Spec.ProviderID, "a providerID is never changed or cleared")
			assert.Equal(t, f.now.Format(time.RFC3339), node.Annotations[nodesetv1alpha1.AnnotationMachineCreated], "its registration is timed anew")
			assert.True(t, nodeutil.HasStartupTaint(node))
			assert.Contains(t, strings.Join(f.events(), "\n"), ReasonRegistrationTimeout)

			require.NoError(t, f.sync("static-a"))
			assert.Len(t, f.driver.deletes, 1, "not overdue any more")
			assert.Equal(t, 2, f.driver.creates)
		})
	}
}

// TestAKubeletsNodeLabelledLaterGetsNoMachine: a Node whose kubelet already
// runs (Ready, or with a providerID) and that no nodeset controller holds
// is not a Node to make a machine for: a machine made under its name would
// be a second host for one Node. Only a machine the driver already has
// under the name (made before a crash lost the write that records it) is
// taken as the Node's.
func TestAKubeletsNodeLabelledLaterGetsNoMachine(t *testing.T) {
	tests := []struct {
		name       string
		providerID string
		ready      bool
	}{
		{"ready, no providerID (a kubeadm host)", "", true},
		{"a cloud providerID", "aws:///eu-west-1a/i-0123456789abcdef0", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := loneNode("host-1", "sim", nil)
			node.Spec.ProviderID = tt.providerID
			if tt.ready {
				node = markReady(node)
			}
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
			require.NoError(t, f.sync("host-1"))
			assert.Zero(t, f.driver.creates, "no machine for a Node that has a host")
			got := f.get("host-1")
			assert.Equal(t, tt.providerID, got.Spec.ProviderID)
			assert.Empty(t, got.Finalizers, "the Node is not taken over")
			assert.Zero(t, f.nodeWrites())
			assert.Contains(t, strings.Join(f.events(), "\n"), "Warning "+ReasonForeignNode)
		})
	}

	t.Run("its own machine, made before a crash", func(t *testing.T) {
		f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, markReady(loneNode("static-a", "sim", nil)))
		f.driver.machines["static-a"] = "test:///static-a"
		require.NoError(t, f.sync("static-a"))
		got := f.get("static-a")
		assert.Equal(t, "test:///static-a", got.Spec.ProviderID)
		assert.Contains(t, got.Finalizers, nodesetv1alpha1.FinalizerTermination)
	})
}

// TestAHeldNodeWithoutItsClassLabelIsStillDeprovisioned: the class label
// removed by hand from a Node this controller holds does not strand it in
// deletion: the driver recorded on the Node still deprovisions its
// machine and releases it.
func TestAHeldNodeWithoutItsClassLabelIsStillDeprovisioned(t *testing.T) {
	node := setNode("web-a", "sim")
	node.Labels = map[string]string{}
	node.Spec.ProviderID = "test:///web-a"
	node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDriver: nodesetv1alpha1.DriverSimulated}
	node.DeletionTimestamp = &metav1.Time{Time: testNow}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
	f.driver.machines["web-a"] = "test:///web-a"
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, []string{"web-a"}, f.driver.deletes)
	got, err := f.kube.CoreV1().Nodes().Get(context.Background(), "web-a", metav1.GetOptions{})
	if err == nil {
		assert.NotContains(t, got.Finalizers, nodesetv1alpha1.FinalizerTermination, "released")
	} else {
		assert.True(t, apierrors.IsNotFound(err))
	}

	t.Run("a Node held by nobody's driver is left alone", func(t *testing.T) {
		node := node.DeepCopy()
		node.Annotations = nil
		f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
		require.NoError(t, f.sync("web-a"))
		assert.Empty(t, f.driver.deletes)
		assert.Contains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination)
	})
}

// TestDriverErrorsAreScrubbedBeforeTheyAreLogged: the error a sync
// returns is logged by the worker; a driver's error that quotes a
// credential of the class must not carry it there, and must still say
// what kind of error it is.
func TestDriverErrorsAreScrubbedBeforeTheyAreLogged(t *testing.T) {
	const planted = "planted-secret-5b1c9e"
	class := testClass("sim")
	class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "creds"}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "nodeset-system", Name: "creds"},
		Data: map[string][]byte{"token": []byte(planted)}}
	t.Run("create", func(t *testing.T) {
		f := newFixture(t, []*nodesetv1alpha1.NodeClass{class}, setNode("web-a", "sim"), secret)
		f.driver.createErr = fmt.Errorf("login with token %s refused: %w", planted, drivers.ErrOutOfCapacity)
		err := f.sync("web-a")
		require.Error(t, err)
		assert.NotContains(t, err.Error(), planted)
		assert.ErrorIs(t, err, drivers.ErrOutOfCapacity, "the kind of error stays")
	})
	t.Run("delete", func(t *testing.T) {
		node := setNode("web-a", "sim")
		node.Spec.ProviderID = "test:///web-a"
		node.DeletionTimestamp = &metav1.Time{Time: testNow}
		f := newFixture(t, []*nodesetv1alpha1.NodeClass{class}, node, secret)
		f.driver.deleteErr = errors.New("token " + planted + " expired")
		// The deletion path reads no credentials before the driver call
		// when the class has them cached already: read them.
		_, err := f.controller.credentials(context.Background(), class)
		require.NoError(t, err)
		err = f.sync("web-a")
		require.Error(t, err)
		assert.NotContains(t, err.Error(), planted)
		assert.True(t, slices.Contains(f.driver.deletes, "web-a"))
	})
}

// classRecordingDriver records the class each Delete is given.
type classRecordingDriver struct {
	*recordingDriver
	deleteClasses []drivers.Class
}

func (d *classRecordingDriver) Delete(ctx context.Context, class drivers.Class, name string) error {
	d.deleteClasses = append(d.deleteClasses, class)
	return d.recordingDriver.Delete(ctx, class, name)
}

// TestADeletedNodesMachineIsDeletedWithTheClassCredentials: a driver
// (an out-of-tree one calling its cloud) gets the class's credentials in
// Class.Credentials on every call, the Delete of a deleted Node's machine
// included.
func TestADeletedNodesMachineIsDeletedWithTheClassCredentials(t *testing.T) {
	class := testClass("sim")
	class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "creds"}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "nodeset-system", Name: "creds"},
		Data: map[string][]byte{"token": []byte("t0ken")}}
	node := setNode("web-a", "sim")
	node.Spec.ProviderID = "test:///web-a"
	node.DeletionTimestamp = &metav1.Time{Time: testNow}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{class}, node, secret)
	f.driver.machines["web-a"] = "test:///web-a"
	driver := &classRecordingDriver{recordingDriver: f.driver}
	f.controller.registry = drivers.Registry{driver.Name(): driver}
	require.NoError(t, f.sync("web-a"))
	require.Len(t, driver.deleteClasses, 1)
	assert.Equal(t, "sim", driver.deleteClasses[0].Name)
	assert.Equal(t, "sim.small", driver.deleteClasses[0].Spec.Simulated.InstanceType)
	assert.Equal(t, []byte("t0ken"), driver.deleteClasses[0].Credentials["token"])
}

// TestOrphanCollectionLogsNoCredential: what orphan collection logs and
// returns of a driver's errors (a failed delete, a failed list) carries
// no credential the controller has read.
func TestOrphanCollectionLogsNoCredential(t *testing.T) {
	const planted = "planted-secret-77a0d3"
	f := newFixture(t, nil)
	synced(f)
	f.controller.credentialsCache["nodeset-system/creds"] = credentialsRead{data: map[string][]byte{"token": []byte(planted)}, read: testNow}
	f.driver.machines = map[string]string{"web-orphan": "test:///web-orphan"}
	f.driver.createdAt = map[string]int64{"web-orphan": f.now.Add(-time.Hour).Unix()}
	f.driver.deleteErr = errors.New("delete refused for token " + planted)
	other := newRecordingDriver(nodesetv1alpha1.DriverDockerMachine)
	other.listErr = errors.New("list refused for token " + planted)
	f.controller.registry[other.name] = other

	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	_, err := f.controller.CollectOrphans(klog.NewContext(context.Background(), logger), 10*time.Minute)
	require.Error(t, err)
	assert.Equal(t, []string{"web-orphan"}, f.driver.deletes)
	logged := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	assert.Contains(t, logged, "Deleting an orphan machine")
	assert.NotContains(t, logged, planted)
	assert.NotContains(t, err.Error(), planted)
	assert.Contains(t, err.Error(), "list refused")
}

// panickingDriver panics in Create, as a driver with a bug may on a class
// or NodeSet it did not expect.
type panickingDriver struct{ *recordingDriver }

func (d panickingDriver) Create(_ context.Context, m drivers.Machine) (string, error) {
	panic("driver bug: no machine type for class " + m.Class.Name)
}

// TestADriverThatPanicsIsContainedAndTold: a driver's panic fails the sync
// of that Node only (retried with backoff), is told on the Node, and
// leaves the controller serving every other Node.
func TestADriverThatPanicsIsContainedAndTold(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
	f.controller.registry = drivers.Registry{f.driver.Name(): panickingDriver{f.driver}}
	var err error
	require.NotPanics(t, func() { err = f.sync("web-a") })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "panic")
	assert.Contains(t, strings.Join(f.events(), "\n"), "Warning "+ReasonSyncPanicked)
}

// TestALoneNodeHeldBeforeItsMachineRecordsItsDriver: a static Node is held
// before its driver's Create, which may leave a machine when it fails. The
// hold records the driver, so that the Node's deletion after its class is
// gone (its in-use finalizer removed by hand) still goes through that
// driver, which removes whatever Create left, and releases the Node.
func TestALoneNodeHeldBeforeItsMachineRecordsItsDriver(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, loneNode("static-a", "sim", nil))
	f.driver.createErr = errors.New("the machine was made, and its configuration could not be read")
	require.Error(t, f.sync("static-a"))
	held := f.get("static-a")
	require.Contains(t, held.Finalizers, nodesetv1alpha1.FinalizerTermination)
	assert.Empty(t, held.Spec.ProviderID)
	assert.Equal(t, f.driver.Name(), held.Annotations[nodesetv1alpha1.AnnotationDriver])

	obj, ok, err := f.classIndexer.GetByKey("sim")
	require.True(t, ok)
	require.NoError(t, err)
	require.NoError(t, f.classIndexer.Delete(obj))
	held.DeletionTimestamp = &metav1.Time{Time: testNow}
	updated, err := f.kube.CoreV1().Nodes().Update(context.Background(), held, metav1.UpdateOptions{})
	require.NoError(t, err)
	f.updateCache(updated)
	require.NoError(t, f.sync("static-a"))
	assert.Equal(t, []string{"static-a"}, f.driver.deletes, "its driver removes what Create may have left")
	got, err := f.kube.CoreV1().Nodes().Get(context.Background(), "static-a", metav1.GetOptions{})
	if err == nil {
		assert.NotContains(t, got.Finalizers, nodesetv1alpha1.FinalizerTermination, "released")
	} else {
		assert.True(t, apierrors.IsNotFound(err))
	}
}
