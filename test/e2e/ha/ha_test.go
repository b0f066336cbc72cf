// Package ha tests the controllers run as two replicas each, against a real
// kube-apiserver with an audit log: the standby takes over a paused leader's
// lease, the paused leader writes nothing once it wakes, and the audit log
// shows that no two replicas of a controller ever wrote in the same period.
package ha

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/component"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
	"nodeset.dev/nodeset/test/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{AuditLog: true}))
}

// leaseDuration is the harness's --leader-elect-lease-duration.
const leaseDuration = 4 * time.Second

// replicas are the two replicas of one controller.
type replicas struct {
	name string // the Lease and the API user
	all  [2]*framework.Process
}

var identityRE = regexp.MustCompile(`identity="([^"]+)"`)

// identity is the leader-election identity of p's current run, from its log.
func identity(p *framework.Process) string {
	found := identityRE.FindAllStringSubmatch(p.Logs(), -1)
	if len(found) == 0 {
		return ""
	}
	return found[len(found)-1][1]
}

func holder(ctx context.Context, kube kubernetes.Interface, lease string) string {
	l, err := kube.CoordinationV1().Leases("nodeset-system").Get(ctx, lease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// leader waits until one of the replicas holds the lease and returns it.
func (r *replicas) leader(t *testing.T, kube kubernetes.Interface) (leader, standby *framework.Process) {
	t.Helper()
	eventually(t, time.Minute, r.name+" has a leader", func(ctx context.Context) (bool, string) {
		h := holder(ctx, kube, r.name)
		for i, p := range r.all {
			if p.Running() && h != "" && identity(p) == h {
				leader, standby = p, r.all[1-i]
				return true, ""
			}
		}
		return false, "lease held by " + h
	})
	return leader, standby
}

// pauseUntilTakeover SIGSTOPs the leader until the standby holds the
// lease, then wakes it: it must exit, having lost its lease, and come back
// as the standby. It returns how long the takeover took.
func (r *replicas) pauseUntilTakeover(t *testing.T, kube kubernetes.Interface, leader, standby *framework.Process) time.Duration {
	t.Helper()
	was := identity(leader)
	require.NoError(t, leader.Signal(syscall.SIGSTOP))
	paused := time.Now()
	eventually(t, time.Minute, r.name+" standby takes over", func(ctx context.Context) (bool, string) {
		if !standby.Running() {
			logs := standby.Logs()
			return false, "the standby is not running; the end of its log:\n" + logs[max(0, len(logs)-3000):]
		}
		h := holder(ctx, kube, r.name)
		return h != was && h == identity(standby), "lease held by " + h
	})
	took := time.Since(paused)
	restarts := leader.Restarts()
	require.NoError(t, leader.Signal(syscall.SIGCONT))
	require.True(t, leader.RestartedSince(restarts, 30*time.Second), "%s exits once it wakes without its lease, and comes back as the standby", leader.Name)
	return took
}

// unbrokenRuns groups changes, in the order given, into runs by who made
// them (describe says what each one was), and returns the runs and whoever
// made changes again after someone else had (see cameBack).
func unbrokenRuns[C any, K comparable](changes []C, who func(C) K, describe func(C) string) (runs []string, again []K) {
	var actors []K
	for i, c := range changes {
		if i > 0 && who(changes[i-1]) == who(c) {
			runs[len(runs)-1] += " " + describe(c)
			continue
		}
		actors = append(actors, who(c))
		runs = append(runs, fmt.Sprintf("%v: %s", who(c), describe(c)))
	}
	return runs, cameBack(actors)
}

// cameBack is whoever, in actors (who made each run of changes, in order),
// acted again after someone else had: none when each actor's changes form
// one unbroken run.
func cameBack[K comparable](actors []K) []K {
	seen := map[K]bool{}
	var again []K
	for _, a := range actors {
		if seen[a] {
			again = append(again, a)
		}
		seen[a] = true
	}
	return again
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		if ctx.Err() == nil {
			last = why
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not true after %s; last: %s", what, timeout, last)
	}
}

// TestNeverTwoLeadersAct pauses each controller's leader (SIGSTOP) in the
// middle of scaling, long enough for the standby to take over, then wakes
// it. The woken replica must exit without writing, the set must converge,
// and the audit log must show each controller's writes in one unbroken run
// per replica.
func TestNeverTwoLeadersAct(t *testing.T) {
	ctx := context.Background()
	// The control plane is shared: only this test's writes are its own.
	start := time.Now()
	cp := framework.Shared(t)
	c, err := framework.NewControllers(ctx, cp, framework.ControllerOptions{})
	require.NoError(t, err)
	nodesetStandby, _, err := c.Replica(c.NodeSet)
	require.NoError(t, err)
	nodeStandby, _, err := c.Replica(c.Node)
	require.NoError(t, err)
	sets := &replicas{name: "nodeset-controller", all: [2]*framework.Process{c.NodeSet, nodesetStandby}}
	nodes := &replicas{name: "node-controller", all: [2]*framework.Process{c.Node, nodeStandby}}
	startAll(t, cp, c.NodeSet, nodesetStandby, c.Node, nodeStandby)
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	cs := versioned.NewForConfigOrDie(cp.AdminConfig())

	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ha"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "ha-sim"},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{
				InstanceType: "sim.small", BootDelay: &metav1.Duration{Duration: 2 * time.Second}}},
			// A drain behind a budget that allows no eviction gives up at
			// this timeout: what keeps a scale-down in flight for the pause.
			Drain: &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 3 * time.Second}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.NodesetV1alpha1().NodeSets("ha").Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ha"},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "ha-sim", Replicas: ptr.To[int32](0)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	type step struct {
		size  int32
		pause *replicas
	}
	var takeovers []time.Duration
	current := 0
	for i, s := range []step{{8, nodes}, {2, sets}, {6, sets}, {0, nodes}} {
		leader, standby := s.pause.leader(t, kube)
		if int(s.size) < current {
			// Each drain waits for a budget that allows no eviction until the
			// class's drain timeout, so the scale-down is still in flight
			// when the leader is paused.
			guard(t, kube, "ha", fmt.Sprintf("guard-%d", i), nodeNamesOf(ctx, kube, "ha", "web"))
		}
		scale(t, cs, "ha", "web", s.size)
		inFlight(t, kube, "ha", "web", current, int(s.size))
		current = int(s.size)
		takeovers = append(takeovers, s.pause.pauseUntilTakeover(t, kube, leader, standby))
		assert.Contains(t, leader.Logs(), "Lost the leader lease")
		eventually(t, 2*time.Minute, fmt.Sprintf("%d Ready nodes", s.size), func(ctx context.Context) (bool, string) {
			return readyNodes(ctx, kube, "ha", "web", int(s.size))
		})
	}
	t.Logf("standby took over a paused leader after %v (lease duration %v)", takeovers, leaseDuration)

	// Once the audit log has every write, each replica's writes must form
	// one run that no other replica's write interrupts.
	require.NoError(t, cp.AuditComplete(ctx), "the audit log holds every event")
	for _, r := range []*replicas{sets, nodes} {
		writers := writeRuns(t, r.name, start)
		t.Logf("%s: writes by %d replica runs, in order: %v", r.name, len(writers), writers)
		identities := make([]string, len(writers))
		for i, w := range writers {
			identities[i] = w.identity
		}
		assert.Empty(t, cameBack(identities), "%s: replicas that wrote again after another replica had written", r.name)
		assert.GreaterOrEqual(t, len(writers), 2, "%s: the standby acted after the takeover", r.name)
	}
}

// startAll starts the controller processes; with the test they are woken
// (if paused) and stopped, and when it failed their logs are kept in the
// control plane's logs folder.
func startAll(t *testing.T, cp *framework.ControlPlane, all ...*framework.Process) {
	t.Helper()
	for _, p := range all {
		require.NoError(t, p.Start())
	}
	framework.FailOnCrash(t, all...)
	t.Cleanup(func() {
		for _, p := range all {
			_ = p.Signal(syscall.SIGCONT)
			p.Kill(syscall.SIGTERM)
			if t.Failed() {
				// Named by the test too: the next test's replicas bear the
				// same names.
				file := filepath.Join(cp.Dir, "logs", t.Name()+"-"+p.Name+".log")
				if err := os.WriteFile(file, []byte(p.Logs()), 0o644); err == nil {
					t.Logf("%s's log: %s", p.Name, file)
				}
			}
		}
	})
}

func scale(t *testing.T, cs versioned.Interface, namespace, name string, replicas int32) {
	t.Helper()
	require.NoError(t, framework.Scale(context.Background(), cs, namespace, name, replicas))
}

// inFlight waits until the set's scale from Nodes from to to has begun and
// not finished: a scale-up has made a Node and not all are Ready, a
// scale-down has deleted a Node and not all are gone. It fails the test
// when the scale finished before it was seen in flight: what would have
// been interrupted then is nothing.
func inFlight(t *testing.T, kube kubernetes.Interface, namespace, name string, from, to int) {
	t.Helper()
	finished := false
	eventually(t, time.Minute, fmt.Sprintf("the scale from %d to %d Nodes under way", from, to), func(ctx context.Context) (bool, string) {
		list, err := kube.CoreV1().Nodes().List(ctx, ofSet(namespace, name))
		if err != nil {
			return false, err.Error()
		}
		live, ready := 0, 0
		for i := range list.Items {
			node := &list.Items[i]
			if node.DeletionTimestamp != nil {
				continue
			}
			live++
			if nodeutil.IsReady(node) && !nodeutil.HasStartupTaint(node) {
				ready++
			}
		}
		total := len(list.Items)
		begun := (to > from && total > from) || (to < from && live < from)
		finished = total == to && ready == to
		why := fmt.Sprintf("%d Nodes, %d of them terminating, %d Ready", total, total-live, ready)
		return begun || finished, why
	})
	require.False(t, finished, "the scale from %d to %d Nodes finished before it was seen in flight", from, to)
}

// nodeNamesOf is the names of the set's Nodes.
// ofSet selects the Nodes of the NodeSet namespace/name.
func ofSet(namespace, name string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: resolve.Selector(&nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}).String()}
}

func nodeNamesOf(ctx context.Context, kube kubernetes.Interface, namespace, name string) []string {
	list, err := kube.CoreV1().Nodes().List(ctx, ofSet(namespace, name))
	if err != nil {
		return nil
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	return names
}

func readyNodes(ctx context.Context, kube kubernetes.Interface, namespace, name string, n int) (bool, string) {
	list, err := kube.CoreV1().Nodes().List(ctx, ofSet(namespace, name))
	if err != nil {
		return false, err.Error()
	}
	if len(list.Items) != n {
		return false, fmt.Sprintf("%d nodes", len(list.Items))
	}
	for i := range list.Items {
		node := &list.Items[i]
		if node.DeletionTimestamp != nil || !nodeutil.IsReady(node) || nodeutil.HasStartupTaint(node) {
			return false, node.Name + " not Ready yet"
		}
	}
	return true, ""
}

// run is an unbroken sequence of writes by one replica.
type run struct {
	identity string
	writes   int
	from, to time.Time
}

func (r run) String() string {
	return fmt.Sprintf("%s: %d writes %s..%s", r.identity, r.writes, r.from.Format("15:04:05.000"), r.to.Format("15:04:05.000"))
}

var replicaRE = regexp.MustCompile(`replica/(\S+)`)

// writes are the user's writes (every user's when user is empty) received
// at or after since, in order, without the controllers' leader-election
// Leases: those are every replica's business.
func writes(t *testing.T, user string, since time.Time) []framework.AuditEvent {
	t.Helper()
	events, err := framework.Shared(t).AuditEvents(since, time.Time{})
	require.NoError(t, err)
	var out []framework.AuditEvent
	for _, e := range events {
		if e.ObjectRef == nil || !e.IsWrite() || e.IsLeaderElection() || (user != "" && e.User.Username != user) {
			continue
		}
		out = append(out, e)
	}
	return out
}

var fencedAtRE = regexp.MustCompile(component.FencedAtPrefix + `([0-9]+)`)

// admittedAt is when the replica's write fence let a write through, from
// its user agent; when it says nothing, when the API server received it.
// A replica frozen between the two delivers a write decided while it led
// after its successor's first writes: what must never interleave is the
// replicas' decisions to write.
func admittedAt(e framework.AuditEvent) time.Time {
	if m := fencedAtRE.FindStringSubmatch(e.UserAgent); m != nil {
		if ms, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			return time.UnixMilli(ms)
		}
	}
	return e.RequestReceived
}

// writeRuns groups the user's writes received at or after since into runs
// by replica, in the order they were let through the replicas' fences.
func writeRuns(t *testing.T, user string, since time.Time) []run {
	t.Helper()
	var runs []run
	events := writes(t, user, since)
	sort.SliceStable(events, func(i, j int) bool { return admittedAt(events[i]).Before(admittedAt(events[j])) })
	for _, e := range events {
		m := replicaRE.FindStringSubmatch(e.UserAgent)
		require.NotNil(t, m, "every controller request names its replica: %q", e.UserAgent)
		identity := strings.TrimSuffix(m[1], ")")
		if len(runs) == 0 || runs[len(runs)-1].identity != identity {
			runs = append(runs, run{identity: identity, from: admittedAt(e)})
		}
		runs[len(runs)-1].writes++
		runs[len(runs)-1].to = admittedAt(e)
	}
	return runs
}
