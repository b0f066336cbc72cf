// Package driverclaim judges the node controllers' claims on their drivers
// (the Leases named by nodesetv1alpha1.DriverClaimLease) by the reader's own
// clock. The node controllers use it to take over a claim nobody renews; the
// NodeSetController uses it to tell a class that waits for validation from a
// driver nobody serves. Both must judge alike, so both use this one rule.
package driverclaim

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// Duration is how long a claim lasts unrenewed: what its Lease declares,
// or nodesetv1alpha1.DriverClaimDuration when it declares nothing.
func Duration(lease *coordinationv1.Lease) time.Duration {
	if s := ptr.Deref(lease.Spec.LeaseDurationSeconds, 0); s > 0 {
		return time.Duration(s) * time.Second
	}
	return nodesetv1alpha1.DriverClaimDuration
}

// Sightings remembers, per claim, the version last read and when this
// process first read it. A claim is unrenewed once it has not changed for
// its Duration by this process's clock. The holder's renewTime is never
// read: a holder whose clock runs behind cannot keep a dead claim alive,
// nor one whose clock runs ahead lose a live one.
type Sightings struct {
	mu   sync.Mutex
	seen map[string]sighting // by Lease name
}

type sighting struct {
	resourceVersion string
	at              time.Time
}

// NewSightings returns Sightings that have seen nothing yet.
func NewSightings() *Sightings {
	return &Sightings{seen: map[string]sighting{}}
}

// Left is how long lease, as read at now, has before it counts as
// unrenewed; zero or less: it is unrenewed. A claim read for the first
// time counts as renewed at now, unless unrenewedBefore says it was judged
// unrenewed already (by this process's predecessor, say): then it stays so
// until it changes.
func (s *Sightings) Left(lease *coordinationv1.Lease, now time.Time, unrenewedBefore bool) time.Duration {
	duration := Duration(lease)
	s.mu.Lock()
	defer s.mu.Unlock()
	seen, ok := s.seen[lease.Name]
	if !ok || seen.resourceVersion != lease.ResourceVersion {
		seen = sighting{resourceVersion: lease.ResourceVersion, at: now}
		if !ok && unrenewedBefore {
			seen.at = now.Add(-duration)
		}
		s.seen[lease.Name] = seen
	}
	return seen.at.Add(duration).Sub(now)
}
