package component

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fence keeps a replica that may no longer lead from writing. Leader
// election alone does not: a leader that was paused (a stopped process, a
// long garbage-collection pause, a frozen VM) resumes with its workers
// mid-sync and writes before its renew loop notices that a standby took the
// lease. The fence lets a write through only while the replica leads and its
// last successful renewal started less than the renew deadline ago; a
// standby takes over no earlier than the lease duration after it saw that
// renewal, so the difference is the margin for writes already on the wire.
//
// The age of the last renewal is the longer of what the monotonic clock and
// the wall clock say: the monotonic clock keeps running while the process
// is stopped but not while the machine is suspended (Linux CLOCK_MONOTONIC),
// and the wall clock is stepped forward on resume, but may be set back.
type fence struct {
	deadline time.Duration
	identity string
	// wallNow reads the wall clock.
	wallNow func() time.Time

	mu          sync.Mutex
	leading     bool
	renewed     time.Time // with its monotonic reading
	renewedWall time.Time // the same moment on the wall clock alone
}

func newFence(identity string, deadline time.Duration) *fence {
	return &fence{identity: identity, deadline: deadline, wallNow: time.Now}
}

// open reports whether writes may go out now, and if not why.
func (f *fence) open() (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.leading {
		return false, "this replica does not lead"
	}
	age := max(time.Since(f.renewed), f.wallNow().Round(0).Sub(f.renewedWall))
	if age >= f.deadline {
		return false, fmt.Sprintf("its leader lease was last renewed %s ago, more than the renew deadline %s", age.Round(time.Millisecond), f.deadline)
	}
	return true, ""
}

// mayAct is open as an error: nil, or why this replica may not act.
func (f *fence) mayAct() error {
	if ok, reason := f.open(); !ok {
		return &NotLeadingError{Reason: reason}
	}
	return nil
}

func (f *fence) renewedAt(start time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leading = true
	if start.After(f.renewed) {
		f.renewed, f.renewedWall = start, start.Round(0)
	}
}

func (f *fence) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leading = false
}

// lock wraps the leader-election lock: each successful write of a record
// that names this replica as the holder is a renewal, dated from before the
// request left; and a release goes out only over a record that names this
// replica.
func (f *fence) lock(inner resourcelock.Interface) resourcelock.Interface {
	return &fencedLock{Interface: inner, fence: f}
}

type fencedLock struct {
	resourcelock.Interface
	fence *fence

	mu sync.Mutex
	// ours: the version of the record the inner lock writes over next (its
	// last read or write) names this replica as the holder.
	ours bool
}

func (l *fencedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	start := time.Now()
	err := l.Interface.Create(ctx, ler)
	l.observe(ler, start, err)
	return err
}

// Update refuses a release (a record with no holder) unless the record it
// replaces names this replica. client-go's release reads the lease and
// writes over what it read, but decides whether it leads from its own
// memory: a leader paused past its lease wakes, reads its successor's
// record, and would empty it, leaving two replicas with open fences (the
// successor's until its next renewal fails) and the lease free for a third.
// A release it sends closes the fence first: once the server has applied
// it a standby may lead, before the answer is back.
func (l *fencedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity == "" {
		l.mu.Lock()
		ours := l.ours
		l.mu.Unlock()
		l.fence.close()
		if !ours {
			return errReleaseNotOurs
		}
	}
	start := time.Now()
	err := l.Interface.Update(ctx, ler)
	l.observe(ler, start, err)
	return err
}

var errReleaseNotOurs = errors.New("not releasing the leader lease: the record last read names another holder")

// Get closes the fence as soon as the record names another holder: the
// lease is someone else's, whatever this replica's last renewal says.
func (l *fencedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	record, raw, err := l.Interface.Get(ctx)
	if err != nil {
		return record, raw, err
	}
	ours := record != nil && record.HolderIdentity == l.fence.identity
	l.mu.Lock()
	l.ours = ours
	l.mu.Unlock()
	if !ours {
		l.fence.close()
	}
	return record, raw, err
}

func (l *fencedLock) observe(ler resourcelock.LeaderElectionRecord, start time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case apierrors.IsConflict(err):
		// The record changed since this replica read it: another replica
		// wrote it, and may lead now. Closed until a renewal succeeds.
		l.ours = false
		l.fence.close()
	case err != nil:
		// Unknown whether the write took: what the inner lock writes over
		// next is as before.
	case ler.HolderIdentity == l.fence.identity:
		l.ours = true
		l.fence.renewedAt(start)
	default:
		l.ours = false
		l.fence.close() // released
	}
}

// NotLeadingError is what a fenced client returns instead of writing.
type NotLeadingError struct{ Reason string }

func (e *NotLeadingError) Error() string {
	return "write refused: " + e.Reason
}

// roundTripper refuses every request but reads while the fence is closed.
func (f *fence) roundTripper(next http.RoundTripper) http.RoundTripper {
	return fencedTransport{next: next, fence: f}
}

type fencedTransport struct {
	next  http.RoundTripper
	fence *fence
}

func (t fencedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return t.next.RoundTrip(req)
	}
	// Read before the fence is asked: a process frozen after this moment
	// and before the question is refused once it wakes, and one frozen
	// after the question carries a time from before the freeze.
	checked := time.Now()
	if ok, reason := t.fence.open(); !ok {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, &NotLeadingError{Reason: reason}
	}
	// The user agent says when the fence let the write through: a process
	// frozen between that moment and the send delivers the write late, and
	// the audit log then shows both times.
	admitted := req.Clone(req.Context())
	admitted.Header.Set("User-Agent", strings.TrimSpace(req.Header.Get("User-Agent")+" "+FencedAtPrefix+strconv.FormatInt(checked.UnixMilli(), 10)))
	return t.next.RoundTrip(admitted)
}

// FencedAtPrefix starts the user-agent word that gives, in Unix
// milliseconds, when a fenced write was let through.
const FencedAtPrefix = "fenced-at/"
