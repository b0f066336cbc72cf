package nodecontrollerapp

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestADriverIsServedByOneBinary: the first binary to claim a driver keeps
// it while it renews; another waits, and takes it over only once the claim
// has gone unrenewed for nodesetv1alpha1.DriverClaimDuration by its own clock.
func TestADriverIsServedByOneBinary(t *testing.T) {
	ctx := context.Background()
	kube := kubefake.NewClientset()
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	builtIn := newDriverClaims(kube, "nodeset-system", "node-controller", clock)
	other := newDriverClaims(kube, "nodeset-system", "acme-node-controller", clock)

	heldBy, err := builtIn.claim(ctx, "simulated")
	require.NoError(t, err)
	assert.Empty(t, heldBy, "the first claim is taken")
	lease, err := kube.CoordinationV1().Leases("nodeset-system").Get(ctx, "nodeset-driver-simulated", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "node-controller", *lease.Spec.HolderIdentity)

	heldBy, err = other.claim(ctx, "simulated")
	require.NoError(t, err)
	assert.Equal(t, "node-controller", heldBy, "a claim another binary holds is waited for")
	_, err = other.claim(ctx, "acme")
	require.NoError(t, err)

	// The holder renews (the fake clientset keeps the resourceVersion, so
	// the renewal is seen by its new renewTime only through a new object
	// version: bump it as the API server would).
	for range 5 {
		now = now.Add(nodesetv1alpha1.DriverClaimRenewal)
		heldBy, err = builtIn.claim(ctx, "simulated")
		require.NoError(t, err)
		require.Empty(t, heldBy)
		bumpResourceVersion(t, kube, "nodeset-driver-simulated")
		heldBy, err = other.claim(ctx, "simulated")
		require.NoError(t, err)
		assert.Equal(t, "node-controller", heldBy, "a renewed claim is never taken over")
	}

	// The holder stops renewing: the claim goes after nodesetv1alpha1.DriverClaimDuration.
	now = now.Add(nodesetv1alpha1.DriverClaimDuration - time.Second)
	heldBy, _ = other.claim(ctx, "simulated")
	assert.Equal(t, "node-controller", heldBy, "not yet")
	now = now.Add(time.Second)
	heldBy, err = other.claim(ctx, "simulated")
	require.NoError(t, err)
	assert.Empty(t, heldBy, "taken over")
	lease, err = kube.CoordinationV1().Leases("nodeset-system").Get(ctx, "nodeset-driver-simulated", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "acme-node-controller", *lease.Spec.HolderIdentity)

	// The old holder, back, finds it taken: it must stop serving.
	renewCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	heldBy, err = builtIn.claim(renewCtx, "simulated")
	require.NoError(t, err)
	assert.Equal(t, "acme-node-controller", heldBy)
}

func bumpResourceVersion(t *testing.T, kube *kubefake.Clientset, name string) {
	t.Helper()
	leases := kube.CoordinationV1().Leases("nodeset-system")
	lease, err := leases.Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	lease.ResourceVersion = lease.ResourceVersion + "1"
	require.NoError(t, kube.Tracker().Update(lease.GroupVersionKind().GroupVersion().WithResource("leases"), lease, "nodeset-system"))
}
