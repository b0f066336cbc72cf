package nodecontrollerapp

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/driverclaim"
)

// A driver is served by one node controller at a time. Each node
// controller's leader-election Lease is named after its binary, so two
// binaries that both serve a driver (the built-in node controller and an
// out-of-tree one started with --drivers naming a built-in driver, say)
// would both lead and both make machines for the same Nodes. Before it
// serves anything, a leader therefore claims each of its drivers with a
// Lease of its own, nodeset-driver-<driver>, held in the binary's name,
// and renews the claims while it leads. A claim another binary renews is
// waited for; one left unrenewed for its duration, as this replica
// measures it (driverclaim.Sightings), is taken over.
const claimRetry = 5 * time.Second

// driverClaims takes and renews the claims of one binary.
type driverClaims struct {
	kube      kubernetes.Interface
	namespace string
	// holder is the binary's name: its replicas share the claims.
	holder string
	now    func() time.Time
	// seen judges another holder's claim by this replica's own clock.
	seen *driverclaim.Sightings
}

func newDriverClaims(kube kubernetes.Interface, namespace, holder string, now func() time.Time) *driverClaims {
	return &driverClaims{kube: kube, namespace: namespace, holder: holder, now: now, seen: driverclaim.NewSightings()}
}

// claim takes or renews the claim on driver. It returns the other
// binary's name when that binary holds a claim it still renews.
func (c *driverClaims) claim(ctx context.Context, driver string) (heldBy string, err error) {
	leases := c.kube.CoordinationV1().Leases(c.namespace)
	now := metav1.NewMicroTime(c.now())
	lease, err := leases.Get(ctx, nodesetv1alpha1.DriverClaimLease(driver), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: nodesetv1alpha1.DriverClaimLease(driver), Namespace: c.namespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(c.holder), LeaseDurationSeconds: ptr.To(int32(nodesetv1alpha1.DriverClaimDuration / time.Second)),
				AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			// Without leader election nothing made the namespace yet.
			_, err = c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace}}, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				return c.claim(ctx, driver)
			}
		}
		return "", err
	}
	if err != nil {
		return "", err
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder != c.holder && holder != "" && c.seen.Left(lease, c.now(), false) > 0 {
		return holder, nil
	}
	if holder != c.holder {
		lease.Spec.AcquireTime = &now
	}
	lease.Spec.HolderIdentity = ptr.To(c.holder)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(nodesetv1alpha1.DriverClaimDuration / time.Second))
	lease.Spec.RenewTime = &now
	// The resourceVersion read is the precondition: of two binaries taking
	// over a stale claim at once, one gets a conflict.
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return "", err
}

// claimAll claims every driver, retrying until each is this binary's or
// ctx is done; a driver another binary serves is waited for, and said so.
func (c *driverClaims) claimAll(ctx context.Context, driverNames []string) error {
	logger := klog.FromContext(ctx)
	for _, driver := range driverNames {
		for {
			heldBy, err := c.claim(ctx, driver)
			if err == nil && heldBy == "" {
				break
			}
			switch {
			case err != nil:
				logger.Error(err, "Cannot claim the driver; retrying", "driver", driver, "lease", c.namespace+"/"+nodesetv1alpha1.DriverClaimLease(driver))
			default:
				logger.Error(nil, "Another node controller serves this driver: waiting until it stops renewing its claim (remove the driver from one of them with --drivers)",
					"driver", driver, "servedBy", heldBy, "lease", c.namespace+"/"+nodesetv1alpha1.DriverClaimLease(driver), "takenOverAfter", nodesetv1alpha1.DriverClaimDuration)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(claimRetry):
			}
		}
		logger.Info("Claimed the driver", "driver", driver, "lease", c.namespace+"/"+nodesetv1alpha1.DriverClaimLease(driver))
	}
	return nil
}

// renew renews the claims every DriverClaimRenewal until ctx is done. It returns
// an error when another binary has taken one over (this replica's renewals
// failed for nodesetv1alpha1.DriverClaimDuration): the driver is no longer this binary's to serve.
func (c *driverClaims) renew(ctx context.Context, driverNames []string) error {
	ticker := time.NewTicker(nodesetv1alpha1.DriverClaimRenewal)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		for _, driver := range driverNames {
			heldBy, err := c.claim(ctx, driver)
			if err != nil {
				klog.FromContext(ctx).Error(err, "Cannot renew the claim on the driver; retrying", "driver", driver)
				continue
			}
			if heldBy != "" {
				return fmt.Errorf("driver %s is claimed by %s now (Lease %s/%s): this node controller stops serving it", driver, heldBy, c.namespace, nodesetv1alpha1.DriverClaimLease(driver))
			}
		}
	}
}
