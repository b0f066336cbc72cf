package driverclaim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

func claim(resourceVersion string, seconds int32, renewed time.Time) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodesetv1alpha1.DriverClaimLease("simulated"), ResourceVersion: resourceVersion},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-controller"), RenewTime: ptr.To(metav1.NewMicroTime(renewed))}}
	if seconds > 0 {
		lease.Spec.LeaseDurationSeconds = ptr.To(seconds)
	}
	return lease
}

// TestAClaimIsJudgedByTheReadersClock: a claim counts as unrenewed once it
// has not changed for its declared duration since this reader first saw
// it; its renewTime (here a day old, or a day ahead) plays no part.
func TestAClaimIsJudgedByTheReadersClock(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, renewed := range []time.Time{now.Add(-24 * time.Hour), now.Add(24 * time.Hour)} {
		s := NewSightings()
		assert.Equal(t, 60*time.Second, s.Left(claim("1", 60, renewed), now, false), "first seen: renewed now")
		assert.Equal(t, time.Second, s.Left(claim("1", 60, renewed), now.Add(59*time.Second), false))
		assert.LessOrEqual(t, s.Left(claim("1", 60, renewed), now.Add(60*time.Second), false), time.Duration(0), "unchanged for its duration")
		assert.Equal(t, 60*time.Second, s.Left(claim("2", 60, renewed), now.Add(61*time.Second), false), "a renewal starts the duration again")
	}
}

func TestADeclaredDurationOrTheDefault(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	assert.Equal(t, nodesetv1alpha1.DriverClaimDuration, Duration(claim("1", 0, now)))
	assert.Equal(t, 15*time.Second, Duration(claim("1", 15, now)))
	assert.Equal(t, nodesetv1alpha1.DriverClaimDuration, NewSightings().Left(claim("1", 0, now), now, false))
}

// TestAClaimJudgedUnrenewedBeforeStaysSo: a reader told that its
// predecessor judged the claim unrenewed does not give it its duration
// again on first sight, and takes it as renewed once it changes.
func TestAClaimJudgedUnrenewedBeforeStaysSo(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	s := NewSightings()
	assert.LessOrEqual(t, s.Left(claim("1", 60, now), now, true), time.Duration(0))
	assert.LessOrEqual(t, s.Left(claim("1", 60, now), now.Add(time.Minute), true), time.Duration(0))
	assert.Equal(t, 60*time.Second, s.Left(claim("2", 60, now), now.Add(2*time.Minute), true), "changed: renewed")
}
