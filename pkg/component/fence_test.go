package component

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// stubLock is a leader-election lock whose writes fail on demand.
type stubLock struct {
	resourcelock.Interface
	fail bool
}

func (l *stubLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return l.err() }
func (l *stubLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return l.err() }
func (l *stubLock) err() error {
	if l.fail {
		return errors.New("conflict")
	}
	return nil
}

func TestFenceLetsWritesThroughOnlyOnACurrentLease(t *testing.T) {
	var writes atomic.Int32
	var agents sync.Map // method -> user agent
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents.Store(r.Method, r.UserAgent())
		if r.Method != http.MethodGet {
			writes.Add(1)
		}
	}))
	defer server.Close()
	f := newFence("me", time.Hour)
	client := &http.Client{Transport: f.roundTripper(http.DefaultTransport)}
	do := func(method string) error {
		req, err := http.NewRequest(method, server.URL, strings.NewReader("{}"))
		require.NoError(t, err)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	var notLeading *NotLeadingError

	require.NoError(t, do(http.MethodGet), "reads always go out")
	require.ErrorAs(t, do(http.MethodPost), &notLeading, "a standby does not write")
	assert.Contains(t, notLeading.Error(), "does not lead")

	inner := &stubLock{fail: true}
	lock := f.lock(inner)
	ctx := context.Background()
	require.Error(t, lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	require.ErrorAs(t, do(http.MethodPut), &notLeading, "a failed acquisition opens nothing")

	inner.fail = false
	require.NoError(t, lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		require.NoError(t, do(method), "the leader writes (%s)", method)
	}
	assert.EqualValues(t, 4, writes.Load())
	agent, _ := agents.Load(http.MethodPut)
	assert.Regexp(t, `(^| )fenced-at/[0-9]{13}$`, agent, "a write says when the fence let it through")
	agent, _ = agents.Load(http.MethodGet)
	assert.NotContains(t, agent, FencedAtPrefix, "a read is not fenced")

	// The process was paused past the renew deadline: nothing goes out
	// until a renewal succeeds again.
	f.mu.Lock()
	f.renewed = time.Now().Add(-2 * time.Hour)
	f.mu.Unlock()
	require.ErrorAs(t, do(http.MethodPatch), &notLeading)
	assert.Contains(t, notLeading.Error(), "renew deadline")
	inner.fail = true
	require.Error(t, lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	require.ErrorAs(t, do(http.MethodPatch), &notLeading, "a failed renewal does not reopen")
	inner.fail = false
	require.NoError(t, lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	require.NoError(t, do(http.MethodPatch))

	// Releasing the lease (an empty holder) closes it.
	require.NoError(t, lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: ""}))
	require.ErrorAs(t, do(http.MethodDelete), &notLeading)
	assert.EqualValues(t, 5, writes.Load(), "no refused request reached the server")
}

func TestStripManagedFields(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}}
	out, err := StripManagedFields(node)
	require.NoError(t, err)
	assert.Nil(t, out.(*corev1.Node).ManagedFields)
	assert.Equal(t, "a", out.(*corev1.Node).Name)
	tombstone := "not an object"
	out, err = StripManagedFields(tombstone)
	require.NoError(t, err)
	assert.Equal(t, tombstone, out, "what is not an object passes through")
}

// heldLock is a lock whose record names holder, and whose updates fail
// with a conflict when conflict is set.
type heldLock struct {
	resourcelock.Interface
	holder   string
	conflict bool
}

func (l *heldLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: l.holder}, nil, nil
}

func (l *heldLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	if l.conflict {
		return apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "lease", errors.New("modified"))
	}
	return nil
}

// TestFenceClosesOnceAnotherReplicaHolds: a replica that sees the lease
// held by another, or whose renewal conflicts with another's write, stops
// writing at once instead of at its renew deadline.
func TestFenceClosesOnceAnotherReplicaHolds(t *testing.T) {
	ctx := context.Background()
	for name, lose := range map[string]func(*heldLock, resourcelock.Interface){
		"another holder read": func(inner *heldLock, lock resourcelock.Interface) {
			inner.holder = "other"
			_, _, _ = lock.Get(ctx)
		},
		"a renewal that conflicts": func(inner *heldLock, lock resourcelock.Interface) {
			inner.conflict = true
			_ = lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFence("me", time.Hour)
			inner := &heldLock{holder: "me"}
			lock := f.lock(inner)
			require.NoError(t, lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
			_, _, err := lock.Get(ctx)
			require.NoError(t, err)
			require.NoError(t, f.mayAct(), "leading, renewed")
			lose(inner, lock)
			require.Error(t, f.mayAct(), "closed at once, an hour before the renew deadline")
		})
	}
}

// releaseWatcher is a lock that notes whether the fence let writes through
// while a release (a record with no holder) was on its way to the server.
type releaseWatcher struct {
	resourcelock.Interface
	fence          *fence
	openDuringSend []bool
}

func (l *releaseWatcher) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: "me"}, nil, nil
}

func (l *releaseWatcher) Update(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity == "" {
		l.openDuringSend = append(l.openDuringSend, l.fence.mayAct() == nil)
	}
	return nil
}

// TestFenceClosesBeforeTheReleaseIsSent: once the server has applied a
// release, a standby may take the lease before the answer is back; the
// replica that lets go stops writing before it sends the release, not
// when the answer arrives.
func TestFenceClosesBeforeTheReleaseIsSent(t *testing.T) {
	ctx := context.Background()
	f := newFence("me", time.Hour)
	inner := &releaseWatcher{fence: f}
	lock := f.lock(inner)
	_, _, err := lock.Get(ctx)
	require.NoError(t, err)
	require.NoError(t, lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	require.NoError(t, f.mayAct(), "leading, renewed")
	require.NoError(t, lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: ""}))
	assert.Equal(t, []bool{false}, inner.openDuringSend, "no write let through while the release is in flight")
	require.Error(t, f.mayAct(), "released")
}

// TestFenceCountsTimeTheMachineWasSuspended: Go's monotonic clock (Linux
// CLOCK_MONOTONIC) stops while the machine is suspended, and the wall
// clock is stepped forward on resume. A leader whose machine slept past
// its lease wakes with a fence that must be closed, though its monotonic
// clock says only a moment passed since its last renewal.
func TestFenceCountsTimeTheMachineWasSuspended(t *testing.T) {
	ctx := context.Background()
	f := newFence("me", time.Minute)
	lock := f.lock(&stubLock{})
	require.NoError(t, lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	require.NoError(t, f.mayAct(), "leading, renewed")
	f.wallNow = func() time.Time { return time.Now().Round(0).Add(2 * time.Hour) } // slept two hours
	var notLeading *NotLeadingError
	require.ErrorAs(t, f.mayAct(), &notLeading, "the lease expired while the machine slept")
	assert.Contains(t, notLeading.Error(), "renew deadline")

	f.wallNow = func() time.Time { return time.Now().Round(0).Add(-2 * time.Hour) } // clock stepped back
	require.NoError(t, f.mayAct(), "a wall clock set back does not stretch the fence: the monotonic age still counts")
	f.mu.Lock()
	f.renewed = time.Now().Add(-2 * time.Hour)
	f.mu.Unlock()
	require.Error(t, f.mayAct(), "the monotonic age past the deadline closes it, whatever the wall clock says")
}
