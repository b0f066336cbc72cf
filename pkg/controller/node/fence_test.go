package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

var errNotLeading = errors.New("this replica does not lead")

// TestNoDriverCallWhileNotSureToLead: a replica whose fence is closed makes
// no driver call with a side effect — no machine made, none deleted, no
// group raised — and tries again later; once it leads again it acts.
func TestNoDriverCallWhileNotSureToLead(t *testing.T) {
	leading := false
	mayAct := func() error {
		if !leading {
			return errNotLeading
		}
		return nil
	}

	t.Run("create", func(t *testing.T) {
		f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
		f.controller.opts.MayAct = mayAct
		leading = false
		err := f.sync("web-a")
		require.ErrorIs(t, err, errNotLeading)
		assert.Zero(t, f.driver.creates, "no machine made")
		assert.Empty(t, f.get("web-a").Spec.ProviderID)
		leading = true
		require.NoError(t, f.sync("web-a"))
		assert.Equal(t, 1, f.driver.creates)
	})

	t.Run("deprovision", func(t *testing.T) {
		f := deletedNodeFixture(t)
		f.controller.opts.MayAct = mayAct
		leading = false
		require.ErrorIs(t, f.sync("web-a"), errNotLeading)
		assert.Empty(t, f.driver.deletes, "no machine deleted")
		assert.Contains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination)
		leading = true
		require.NoError(t, f.sync("web-a"))
		assert.Equal(t, []string{"web-a"}, f.driver.deletes)
	})

	t.Run("a lone Node's registration timeout", func(t *testing.T) {
		node := setNode("static-a", "sim")
		delete(node.Labels, nodesetv1alpha1.LabelNodeSet)
		delete(node.Labels, nodesetv1alpha1.LabelNodeSetNamespace)
		f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
		f.controller.opts.MayAct = mayAct
		leading = true
		require.NoError(t, f.sync("static-a"))
		require.Equal(t, 1, f.driver.creates)
		f.events()
		f.now = testNow.Add(10*time.Minute + time.Second) // never Ready: overdue
		leading = false
		require.ErrorIs(t, f.sync("static-a"), errNotLeading)
		assert.Empty(t, f.driver.deletes, "the machine of a Node overdue is not replaced by a replica that may not lead")
		assert.Empty(t, f.events(), "nor told about")
		leading = true
		require.NoError(t, f.sync("static-a"))
		assert.Equal(t, []string{"static-a"}, f.driver.deletes)
	})

	t.Run("registered", func(t *testing.T) {
		f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
		observer := &observingDriver{recordingDriver: f.driver}
		f.controller.registry[f.driver.Name()] = observer
		f.controller.opts.MayAct = mayAct
		leading = true
		require.NoError(t, f.sync("web-a"))
		require.NotEmpty(t, f.get("web-a").Spec.ProviderID)
		ready, err := f.kube.CoreV1().Nodes().UpdateStatus(context.Background(), markReady(f.get("web-a")), metav1.UpdateOptions{})
		require.NoError(t, err)
		f.updateCache(ready)
		f.controller.recorded.forget("web-a")
		leading = false
		require.ErrorIs(t, f.sync("web-a"), errNotLeading)
		assert.Empty(t, observer.registered, "a replica that may not lead tells the driver nothing")
		leading = true
		require.NoError(t, f.sync("web-a"))
		assert.Equal(t, []string{"web-a"}, observer.registered)
	})

	t.Run("orphans", func(t *testing.T) {
		f := newFixture(t, nil)
		synced(f)
		f.controller.opts.MayAct = mayAct
		f.driver.machines = map[string]string{"web-orphan": "test:///web-orphan"}
		f.driver.createdAt = map[string]int64{"web-orphan": f.now.Add(-time.Hour).Unix()}
		leading = false
		removed, err := f.controller.CollectOrphans(context.Background(), time.Minute)
		require.ErrorIs(t, err, errNotLeading)
		assert.Empty(t, removed)
		assert.Empty(t, f.driver.deletes, "an orphan is not deleted by a replica that may not lead")
		leading = true
		removed, err = f.controller.CollectOrphans(context.Background(), time.Minute)
		require.NoError(t, err)
		assert.Equal(t, []string{"web-orphan"}, removed)
	})

	t.Run("group", func(t *testing.T) {
		g := newGroupFixture(t, 2)
		g.controller.opts.MayAct = mayAct
		leading = false
		require.ErrorIs(t, g.syncGroup(), errNotLeading)
		assert.Empty(t, g.group.ensured, "the group is not raised")
		leading = true
		require.NoError(t, g.syncGroup())
		assert.NotEmpty(t, g.group.ensured)
	})
}

// TestCredentialsOutsideTheirNamespaceSayTheRule: a Secret the node
// controller may not read is the class's mistake, said as the rule, not as
// an RBAC error to chase.
func TestCredentialsOutsideTheirNamespaceSayTheRule(t *testing.T) {
	kube := kubefake.NewClientset()
	kube.PrependReactor("get", "secrets", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), "creds", errors.New("no RBAC"))
	})
	class := testClass("sim")
	class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "team-a", Name: "creds"}
	_, err := ReadCredentials(context.Background(), kube, class)
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.Contains(t, err.Error(), "credentials Secrets must be in the namespace its Role grants")
	assert.NotContains(t, err.Error(), "no RBAC")
}

// observingDriver is a machine driver that keeps something until its
// machine registers (as docker-machine keeps a bootstrap token).
type observingDriver struct {
	*recordingDriver
	registered []string
}

func (d *observingDriver) Registered(_ context.Context, _ drivers.Class, name string) error {
	d.registered = append(d.registered, name)
	return nil
}
