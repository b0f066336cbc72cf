package nodeset

import (
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/driverclaim"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// DefaultDriverClaimGrace is how long a NodeClass generation may wait for
// validation, with no node controller claiming its driver, before its
// NodeSets say DriverNotServed: long enough for the node controllers of a
// fresh install to start and claim their drivers.
const DefaultDriverClaimGrace = 2 * time.Minute

// claimsUnreadRecheck is how often a set whose class waits for validation
// is looked at again while the claims have not been listed.
const claimsUnreadRecheck = 5 * time.Second

// driverClaims reads the node controllers' driver claims: a Lease per
// served driver, renewed while it is served (nodesetv1alpha1.DriverClaimLease).
type driverClaims struct {
	lister coordinationlisters.LeaseLister // nil: no claim is ever seen
	// synced says whether the lister has listed the claims once. It is no
	// part of the controller's readiness: a nodeset-controller whose RBAC
	// does not let it read Leases yet (an image upgraded before its Role)
	// still serves, and its sets wait rather than say DriverNotServed.
	synced    func() bool
	namespace string
	grace     time.Duration

	// seen judges a claim by this replica's clock, as the node
	// controllers judge each other's.
	seen *driverclaim.Sightings

	mu sync.Mutex
	// unclaimed is, per driver, when this replica first saw it unclaimed.
	unclaimed map[string]time.Time
}

func newDriverClaims(namespace string, grace time.Duration) *driverClaims {
	return &driverClaims{namespace: namespace, grace: grace, seen: driverclaim.NewSightings(), unclaimed: map[string]time.Time{}}
}

// claimCheck is what the claims say about a class that waits for
// validation.
type claimCheck struct {
	// notServed is the reason no node controller serves the driver, or "".
	notServed string
	// waiting says what the class waits for while it may still be served.
	waiting string
	// recheck is when the check may change by time alone; 0: only an
	// event changes it.
	recheck time.Duration
}

// check judges the claim on driver at now, for a class that waits for
// validation. notServedBefore keeps a verdict the set's status already has
// (after a restart, the grace is not given again to a driver still
// unclaimed, nor the claim's duration again to a claim still unrenewed).
func (d *driverClaims) check(driver string, now time.Time, notServedBefore bool) claimCheck {
	name := nodesetv1alpha1.DriverClaimLease(driver)
	where := d.namespace + "/" + name
	var lease *coordinationv1.Lease
	if d.lister != nil {
		if !d.synced() && !notServedBefore {
			return claimCheck{recheck: claimsUnreadRecheck,
				waiting: fmt.Sprintf("the node controllers' claims on their drivers (Leases in %s) are not read yet", d.namespace)}
		}
		lease, _ = d.lister.Leases(d.namespace).Get(name)
	}
	if lease == nil || ptr.Deref(lease.Spec.HolderIdentity, "") == "" {
		d.mu.Lock()
		since, ok := d.unclaimed[driver]
		if !ok {
			since = now
			d.unclaimed[driver] = since
		}
		d.mu.Unlock()
		if left := since.Add(d.grace).Sub(now); left > 0 && !notServedBefore {
			return claimCheck{recheck: left,
				waiting: fmt.Sprintf("no node controller has claimed driver %q yet (Lease %s)", driver, where)}
		}
		return claimCheck{notServed: fmt.Sprintf("no node controller has claimed driver %q (Lease %s) for %s", driver, where, d.grace)}
	}
	d.mu.Lock()
	delete(d.unclaimed, driver)
	d.mu.Unlock()
	holder := *lease.Spec.HolderIdentity
	if left := d.seen.Left(lease, now, notServedBefore); left > 0 {
		return claimCheck{recheck: left,
			waiting: fmt.Sprintf("%s serves driver %q (Lease %s)", holder, driver, where)}
	}
	return claimCheck{notServed: fmt.Sprintf("%s claimed driver %q (Lease %s) and has not renewed its claim for %s",
		holder, driver, where, driverclaim.Duration(lease))}
}

// claimChanged is the handler of the claims' Lease events: a claim taken,
// renewed, given up or passed to another holder may change the verdict of
// the NodeSets whose class waits for validation (a renewal ends a lapse),
// and of no other: only the sets of the driver's classes without a
// verdict for their generation are synced.
func (c *Controller) claimChanged(old, cur any) {
	before, _ := nodeutil.EventObject[*coordinationv1.Lease](old)
	after, _ := nodeutil.EventObject[*coordinationv1.Lease](cur)
	l := after
	if l == nil {
		l = before
	}
	if l == nil || !strings.HasPrefix(l.Name, nodesetv1alpha1.DriverClaimLeasePrefix) {
		return
	}
	driver := strings.TrimPrefix(l.Name, nodesetv1alpha1.DriverClaimLeasePrefix)
	classes, err := c.nodeClassIndexer.ByIndex(byDriverIndex, driver)
	if err != nil {
		return
	}
	for _, obj := range classes {
		class, ok := obj.(*nodesetv1alpha1.NodeClass)
		if !ok {
			continue
		}
		if valid := findCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid); valid != nil && valid.ObservedGeneration == class.Generation {
			continue
		}
		sets, err := c.nodeSetIndexer.ByIndex(byClassIndex, class.Name)
		if err != nil {
			continue
		}
		for _, set := range sets {
			c.enqueue(set)
		}
	}
}
