package component

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"nodeset.dev/nodeset/test/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{}))
}

// freezableLock stands for a replica's process stopped (SIGSTOP, a frozen
// VM): while frozen its lock calls wait, and once thawed a call whose
// context ran out meanwhile fails, as its request would have.
type freezableLock struct {
	resourcelock.Interface
	mu     sync.Mutex
	frozen chan struct{}
}

func (l *freezableLock) freeze() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frozen = make(chan struct{})
}

func (l *freezableLock) thaw() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.frozen)
	l.frozen = nil
}

func (l *freezableLock) wait(ctx context.Context) error {
	l.mu.Lock()
	frozen := l.frozen
	l.mu.Unlock()
	if frozen != nil {
		<-frozen
	}
	return ctx.Err()
}

func (l *freezableLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if err := l.wait(ctx); err != nil {
		return nil, nil, err
	}
	return l.Interface.Get(ctx)
}

func (l *freezableLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := l.wait(ctx); err != nil {
		return err
	}
	return l.Interface.Create(ctx, ler)
}

func (l *freezableLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := l.wait(ctx); err != nil {
		return err
	}
	return l.Interface.Update(ctx, ler)
}

// elector is one replica's leader election, run as component.Run runs it,
// on a real API server.
type elector struct {
	fence *fence
	lock  *freezableLock
	done  chan struct{}
}

func startElector(ctx context.Context, t *testing.T, kube kubernetes.Interface, lease, identity string) *elector {
	t.Helper()
	const leaseDuration, renewDeadline, retryPeriod = 2 * time.Second, time.Second, 200 * time.Millisecond
	inner, err := resourcelock.New(resourcelock.LeasesResourceLock, "default", lease, kube.CoreV1(), kube.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: identity})
	require.NoError(t, err)
	e := &elector{fence: newFence(identity, renewDeadline), lock: &freezableLock{Interface: inner}, done: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: e.fence.lock(e.lock), LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		ReleaseOnCancel: true, Name: lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {},
			OnStoppedLeading: e.fence.close,
		},
	})
	require.NoError(t, err)
	go func() {
		defer close(e.done)
		le.Run(ctx)
	}()
	return e
}

func (e *elector) leads() bool { return e.fence.mayAct() == nil }

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true,
		func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(t, err, what)
}

// TestAPausedLeaderDoesNotReleaseItsSuccessorsLease: a leader frozen past
// its lease wakes to find its renewal failed and releases the lease on the
// way out. client-go's release reads the lease and writes an empty holder
// over what it read, deciding that it leads from its own memory; unguarded,
// that empties the successor's lease, and the lease is free for a third
// replica while the successor's fence is still open. Every holder the lease
// ever had is watched: the successor's lease must never be emptied, and the
// successor keeps leading.
func TestAPausedLeaderDoesNotReleaseItsSuccessorsLease(t *testing.T) {
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(framework.Shared(t).AdminConfig())
	const lease = "release-guard"
	watch, err := kube.CoordinationV1().Leases("default").Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", lease).String()})
	require.NoError(t, err)
	defer watch.Stop()
	var mu sync.Mutex
	var holders []string
	go func() {
		for ev := range watch.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok {
				h := ptr.Deref(l.Spec.HolderIdentity, "")
				mu.Lock()
				if len(holders) == 0 || holders[len(holders)-1] != h {
					holders = append(holders, h)
				}
				mu.Unlock()
			}
		}
	}()
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), holders...)
	}

	ctxA, stopA := context.WithCancel(ctx)
	defer stopA()
	a := startElector(ctxA, t, kube, lease, "a")
	until(t, "a leads", a.leads)

	a.lock.freeze()
	ctxB, stopB := context.WithCancel(ctx)
	defer stopB()
	b := startElector(ctxB, t, kube, lease, "b")
	until(t, "b takes over the frozen a's lease", b.leads)
	a.lock.thaw()
	<-a.done
	assert.Error(t, a.fence.mayAct(), "a, woken without its lease, writes nothing")

	// b renews over its own record twice more: had a emptied the lease, b's
	// first renewal would have conflicted and its fence closed.
	renewedAt := func() time.Time {
		l, err := kube.CoordinationV1().Leases("default").Get(ctx, lease, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "b", ptr.Deref(l.Spec.HolderIdentity, ""), "b holds the lease")
		return l.Spec.RenewTime.Time
	}
	for range 2 {
		last := renewedAt()
		until(t, "b renews", func() bool { return renewedAt().After(last) })
	}
	assert.True(t, b.leads(), "b leads throughout")
	assert.Equal(t, []string{"a", "b"}, seen(), "the lease's holders, in order")

	// A leader that still holds its lease releases it on the way out.
	stopB()
	<-b.done
	until(t, "b releases its lease", func() bool {
		h := seen()
		return h[len(h)-1] == ""
	})
	assert.Equal(t, []string{"a", "b", ""}, seen(), "the lease's holders, in order")
}
