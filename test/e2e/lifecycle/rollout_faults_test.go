package lifecycle

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/pkg/kubeletsim"
	"nodeset.dev/nodeset/test/framework"
)

// rolloutUnderWay waits until some, not all, of the set's Nodes carry the
// template hash its status records.
func rolloutUnderWay(t *testing.T, namespace, name string, replicas int32) func(ctx context.Context) (bool, string) {
	_, cs := clients(t)
	return func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := set.Status
		return s.ObservedGeneration == set.Generation && s.UpdatedReplicas >= 1 && s.UpdatedReplicas < replicas,
			fmt.Sprintf("observed %d of %d, %d updated", s.ObservedGeneration, set.Generation, s.UpdatedReplicas)
	}
}

// crashSeed is the seed of the kill moments, NODESET_CRASH_SEED to replay.
func crashSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(20261126)
	if s := os.Getenv("NODESET_CRASH_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("NODESET_CRASH_SEED=%d", seed)
	return seed
}

// TestRolloutBoundsHoldThroughKillsEditsAndScaling rolls a NodeSet while
// its nodeset controller is SIGKILLed at random moments, with a second
// template change before the first finished, then a scale-up and a
// scale-down in the middle of rollouts. A watcher checks the bounds after
// every Node event.
func TestRolloutBoundsHoldThroughKillsEditsAndScaling(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "roll-faults")
	createClass(t, "roll-faults-sim", nil)
	createRollingSet(t, ns, "web", "roll-faults-sim", 4, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "4 nodes", rolledOut(c, t, ns, "web", 4))
	rng := rand.New(rand.NewPCG(crashSeed(t), 1))
	kills := 0
	killAtRandom := func(n int) {
		for range n {
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond) // a random moment, not a wait for a state
			c.restart(t, c.nodeset, syscall.SIGKILL)
			kills++
		}
	}

	// A second template change before the first finished: the Nodes of
	// the first are outdated as well.
	w := watchFleet(t, ns, "web", 5, 4)
	updateSet(t, ns, "web", setVersion("2"))
	eventually(t, 2*time.Minute, "rollout to 2 under way", rolloutUnderWay(t, ns, "web", 4))
	killAtRandom(2)
	updateSet(t, ns, "web", setVersion("3"))
	killAtRandom(2)
	eventually(t, 5*time.Minute, "rolled out to 3", rolledOut(c, t, ns, "web", 4))
	w.assertHeld(t)

	// Scaled up mid-rollout: at most the new replicas + maxSurge, never
	// fewer Ready than before.
	scaledMidRollout := func(maxNodes, minReady int, version string, from, to int32) {
		t.Helper()
		w := watchFleet(t, ns, "web", maxNodes, minReady)
		updateSet(t, ns, "web", setVersion(version))
		eventually(t, 2*time.Minute, "rollout to "+version+" under way", rolloutUnderWay(t, ns, "web", from))
		killAtRandom(1)
		scale(t, ns, "web", to)
		killAtRandom(2)
		eventually(t, 5*time.Minute, fmt.Sprintf("rolled out to %s with %d nodes", version, to), rolledOut(c, t, ns, "web", int(to)))
		w.assertHeld(t)
	}
	scaledMidRollout(7, 4, "4", 4, 6)
	// Scaled down mid-rollout: no more Nodes than before, never fewer
	// Ready than the new replicas.
	scaledMidRollout(7, 3, "5", 6, 3)
	t.Logf("%d SIGKILLs of the nodeset controller", kills)
}

// TestPausedRolloutStaysPausedAcrossRestarts: a paused NodeSet with a new
// template replaces nothing, also after both controllers were killed, and
// a scale-up meanwhile makes Nodes of the new template only.
func TestPausedRolloutStaysPausedAcrossRestarts(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ns := createNamespace(t, "pause-crash")
	createClass(t, "pause-crash-sim", nil)
	createRollingSet(t, ns, "api", "pause-crash-sim", 3, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "3 nodes", rolledOut(c, t, ns, "api", 3))
	before := nodeNames(t, ns, "api")
	updateSet(t, ns, "api", func(s *nodesetv1alpha1.NodeSet) {
		s.Spec.Paused = true
		setVersion("2")(s)
	})
	paused := func(ctx context.Context) (bool, string) {
		ok, why := observed(t, ns, "api")(ctx)
		if !ok {
			return false, why
		}
		p := progressing(t, ns, "api")
		return p.Reason == "Paused", p.Reason + ": " + p.Message
	}
	eventually(t, time.Minute, "paused", paused)

	w := watchFleet(t, ns, "api", 4, 3)
	c.restart(t, c.nodeset, syscall.SIGKILL)
	c.restart(t, c.node, syscall.SIGKILL)
	// A scale-up makes the restarted controller act: a new Node, and no
	// replacement.
	scale(t, ns, "api", 4)
	eventually(t, 2*time.Minute, "4 nodes", converged(c, t, ns, "api", 4))
	eventually(t, time.Minute, "still paused", paused)
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(context.Background(), "api", metav1.GetOptions{})
	require.NoError(t, err)
	nodes, err := setNodes(context.Background(), t, ns, "api")
	require.NoError(t, err)
	var kept []string
	for _, n := range nodes {
		assert.Nil(t, n.DeletionTimestamp, "a paused NodeSet deletes nothing: %s", n.Name)
		if n.Labels[nodesetv1alpha1.LabelTemplateHash] == set.Status.TemplateHash {
			assert.NotContains(t, before, n.Name, "the new Node has the new template")
		} else {
			kept = append(kept, n.Name)
		}
	}
	assert.ElementsMatch(t, before, kept, "the outdated Nodes stay while paused")
	w.assertHeld(t)
}

// TestOnDeleteAfterTwoClassChanges: with OnDelete, two edits of the class
// replace nothing; a deleted Node is replaced with the latest template and
// the others stay.
func TestOnDeleteAfterTwoClassChanges(t *testing.T) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ondelete-twice")
	before := onDeleteSet(t, c, ns, "ondelete-twice-sim")
	hashes := map[string]bool{}
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "batch", metav1.GetOptions{})
	require.NoError(t, err)
	hashes[set.Status.TemplateHash] = true

	for _, image := range []string{"v2", "v3"} {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "ondelete-twice-sim", metav1.GetOptions{})
			if err != nil {
				return err
			}
			class.Spec.NodeTemplate.Labels = map[string]string{"example.com/image": image}
			_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
			return err
		}))
		waitClassValidGeneration(t, "ondelete-twice-sim")
		eventually(t, time.Minute, "class change "+image+" seen", func(ctx context.Context) (bool, string) {
			set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "batch", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			p := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetProgressing)
			return !hashes[set.Status.TemplateHash] && p != nil && strings.Contains(p.Message, "3 outdated, replaced when deleted"),
				fmt.Sprintf("hash %s, Progressing %+v", set.Status.TemplateHash, p)
		})
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "batch", metav1.GetOptions{})
		require.NoError(t, err)
		hashes[set.Status.TemplateHash] = true
		untouched(t, ns, "batch", before, "OnDelete replaces nothing after class change "+image)
	}

	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, before[1], metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "replacement", converged(c, t, ns, "batch", 3))
	set, err = cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "batch", metav1.GetOptions{})
	require.NoError(t, err)
	nodes, err := setNodes(ctx, t, ns, "batch")
	require.NoError(t, err)
	var kept []string
	for _, n := range nodes {
		if n.Labels[nodesetv1alpha1.LabelTemplateHash] == set.Status.TemplateHash {
			assert.NotContains(t, before, n.Name)
			assert.Equal(t, "v3", n.Labels["example.com/image"], "the replacement has the latest class template")
		} else {
			kept = append(kept, n.Name)
		}
	}
	assert.ElementsMatch(t, []string{before[0], before[2]}, kept, "only the deleted Node was replaced")
}

// TestFlappedNodeIsNotAvailableEarly: with minReadySeconds, a new Node
// that went NotReady and Ready again counts as available only
// minReadySeconds after it came back, so the old Node stays until then.
func TestFlappedNodeIsNotAvailableEarly(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "roll-flap")
	createClass(t, "roll-flap-sim", nil)
	createRollingSet(t, ns, "db", "roll-flap-sim", 1, intstr.FromInt32(1), intstr.FromInt32(0))
	const minReady = 15 * time.Second
	updateSet(t, ns, "db", func(s *nodesetv1alpha1.NodeSet) { s.Spec.MinReadySeconds = int32(minReady / time.Second) })
	eventually(t, 2*time.Minute, "1 node", rolledOut(c, t, ns, "db", 1))
	eventually(t, minReady+time.Minute, "the node available", available(t, ns, "db", 1))
	old := nodeNames(t, ns, "db")[0]

	w := watchFleet(t, ns, "db", 2, 1)
	updateSet(t, ns, "db", setVersion("2"))
	var fresh string
	eventually(t, time.Minute, "the new node Ready", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "db")
		if err != nil {
			return false, err.Error()
		}
		for _, n := range nodes {
			if n.Name != old && readyNow(&n) {
				fresh = n.Name
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d nodes", len(nodes))
	})
	annotate := func(value *string) {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, kubeletsim.AnnotationNotReady)
		if value != nil {
			patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, kubeletsim.AnnotationNotReady, *value)
		}
		_, err := kube.CoreV1().Nodes().Patch(ctx, fresh, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	down := "flapping"
	annotate(&down)
	eventually(t, time.Minute, "the new node NotReady", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, fresh, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !readyNow(n), "still Ready"
	})
	annotate(nil)
	var back time.Time
	eventually(t, time.Minute, "the new node Ready again", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, fresh, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				back = cond.LastTransitionTime.Time
				return true, ""
			}
		}
		return false, "not Ready"
	})
	var deleted time.Time
	eventually(t, minReady+time.Minute, "the old node deleted", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, old, metav1.GetOptions{})
		if err != nil || n.DeletionTimestamp != nil {
			deleted = time.Now()
			if err == nil {
				deleted = n.DeletionTimestamp.Time
			}
			return true, ""
		}
		return false, "old node still there"
	})
	// Timestamps have whole seconds: allow one.
	assert.GreaterOrEqual(t, deleted.Sub(back), minReady-time.Second,
		"the old node went %s after the new one came back Ready, minReadySeconds is %s", deleted.Sub(back), minReady)
	eventually(t, time.Minute, "rolled out", rolledOut(c, t, ns, "db", 1))
	w.assertHeld(t)
}

// available waits until the set has n available Nodes.
func available(t *testing.T, namespace, name string, n int32) func(ctx context.Context) (bool, string) {
	_, cs := clients(t)
	return func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return set.Status.AvailableReplicas == n, fmt.Sprintf("%d available", set.Status.AvailableReplicas)
	}
}

// TestReadyNodesNotYetAvailableAreKept: Nodes Ready for less than
// minReadySeconds are not available yet, but they run pods. A rollout
// that starts then, with maxUnavailable 0, must not delete them before
// their replacements are Ready: they cost availability as soon as they
// are Ready, unlike Nodes that are not Ready.
func TestReadyNodesNotYetAvailableAreKept(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "roll-young")
	createClass(t, "roll-young-sim", nil)
	createRollingSet(t, ns, "web", "roll-young-sim", 3, intstr.FromInt32(1), intstr.FromInt32(0))
	updateSet(t, ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.MinReadySeconds = 20 })
	eventually(t, 2*time.Minute, "3 nodes", rolledOut(c, t, ns, "web", 3))

	// The Nodes are Ready, not yet available: the rollout starts now.
	w := watchFleet(t, ns, "web", 4, 3)
	updateSet(t, ns, "web", setVersion("2"))
	eventually(t, 5*time.Minute, "rolled out", rolledOut(c, t, ns, "web", 3))
	w.assertHeld(t)
}

func readyNow(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestRolloutHeldByABudgetForeverIsStalled: an outdated Node's pod is held
// by a budget that never allows its eviction, and the class leaves a
// timed-out drain for a human (drain.onTimeout: Cordon). The rollout cannot
// move: the set says Stalled, and the bounds hold meanwhile.
func TestRolloutHeldByABudgetForeverIsStalled(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	kube, _ := clients(t)
	ns := createNamespace(t, "roll-held")
	createClass(t, "roll-held-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Drain = &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 3 * time.Second},
			OnTimeout: nodesetv1alpha1.DrainTimeoutCordon}
	})
	createRollingSet(t, ns, "db", "roll-held-sim", 3, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "3 nodes", rolledOut(c, t, ns, "db", 3))
	for i, node := range nodeNames(t, ns, "db") {
		guardedPod(t, ns, fmt.Sprintf("db-%d", i), node, fmt.Sprintf("guard-%d", i))
	}

	w := watchFleet(t, ns, "db", 4, 3)
	updateSet(t, ns, "db", setVersion("2"))
	var held string
	eventually(t, 2*time.Minute, "a drain timed out and left for a human", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "db")
		if err != nil {
			return false, err.Error()
		}
		for _, n := range nodes {
			for _, cond := range n.Status.Conditions {
				if cond.Type == nodecontroller.DrainCondition && cond.Reason == nodecontroller.ReasonDrainTimedOut {
					held = n.Name
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%d nodes", len(nodes))
	})
	eventually(t, time.Minute, "Progressing Stalled", func(context.Context) (bool, string) {
		p := progressing(t, ns, "db")
		return p.Status == metav1.ConditionFalse && p.Reason == "Stalled" && strings.Contains(p.Message, held),
			fmt.Sprintf("%s %s: %s", p.Status, p.Reason, p.Message)
	})
	w.assertHeld(t)
	_, err := kube.CoreV1().Nodes().Get(ctx, held, metav1.GetOptions{})
	require.NoError(t, err, "the held node waits for a human")
}

// apiFaults stands between a controller and kube-apiserver. Node DELETEs
// it is told to lose are forwarded, and answered 500 as if the API server
// had given up waiting for storage; for a moment after each, Node watch
// events are held back, as from a lagging informer.
type apiFaults struct {
	URL    string
	caData []byte

	mu          sync.Mutex
	loseDeletes int
	lost        []string
	holdUntil   time.Time
	rng         *rand.Rand
	errorRate   float64
	errorsUntil time.Time
	errors      map[int]int
}

// failFor answers rate of the requests (watches aside) with 429 (with
// Retry-After) or 503, for d from now.
func (f *apiFaults) failFor(rate float64, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errorRate, f.errorsUntil = rate, time.Now().Add(d)
}

// failure is the status code to answer a request with instead of
// forwarding it, 0 to forward it.
func (f *apiFaults) failure() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !time.Now().Before(f.errorsUntil) || f.rng.Float64() >= f.errorRate {
		return 0
	}
	code := http.StatusServiceUnavailable
	if f.rng.IntN(2) == 0 {
		code = http.StatusTooManyRequests
	}
	f.errors[code]++
	return code
}

func (f *apiFaults) injected() map[int]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int]int{}
	for k, v := range f.errors {
		out[k] = v
	}
	return out
}

func startAPIFaults(t *testing.T, upstream string) *apiFaults {
	t.Helper()
	target, err := url.Parse(upstream)
	require.NoError(t, err)
	f := &apiFaults{rng: rand.New(rand.NewPCG(7, 11)), errors: map[int]int{}}
	forward := httputil.NewSingleHostReverseProxy(target)
	forward.FlushInterval = -1
	forward.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a loopback test proxy
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		isNode := strings.HasPrefix(r.URL.Path, "/api/v1/nodes")
		if isNode && r.Method == http.MethodDelete && f.lose(r.URL.Path) {
			forward.ServeHTTP(&discard{header: http.Header{}}, r)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcdserver: request timed out","reason":"InternalError","code":500}`)
			return
		}
		watching := r.URL.Query().Get("watch") == "true"
		if code := f.failure(); code != 0 && !watching {
			if code == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected","code":%d}`, code)
			return
		}
		if isNode && watching {
			forward.ServeHTTP(&heldWriter{ResponseWriter: w, faults: f}, r)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	server.StartTLS()
	t.Cleanup(server.Close)
	f.URL = server.URL
	f.caData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})
	return f
}

// loseNextDeletes makes the proxy lose the answers of the next n Node deletes.
func (f *apiFaults) loseNextDeletes(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loseDeletes = n
}

func (f *apiFaults) lose(path string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loseDeletes <= 0 {
		return false
	}
	f.loseDeletes--
	f.lost = append(f.lost, path[strings.LastIndex(path, "/")+1:])
	f.holdUntil = time.Now().Add(3 * time.Second)
	return true
}

func (f *apiFaults) lostDeletes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lost...)
}

// heldFor is how long the proxy still holds watch events back.
func (f *apiFaults) heldFor() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Until(f.holdUntil)
}

// heldWriter holds a watch's events back while its proxy says so.
type heldWriter struct {
	http.ResponseWriter
	faults *apiFaults
}

func (h *heldWriter) Write(b []byte) (int, error) {
	// The delay is the fault injected (an informer behind by a fixed
	// window), not a wait for a state; a lost delete may extend it.
	for wait := h.faults.heldFor(); wait > 0; wait = h.faults.heldFor() {
		time.Sleep(wait)
	}
	return h.ResponseWriter.Write(b)
}

func (h *heldWriter) Flush() {
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// discard is a ResponseWriter that drops the answer.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// nodesetControllerThrough replaces the shared nodeset controller, until
// the test ends, with one that reaches the API server through proxy.
func nodesetControllerThrough(t *testing.T, c *controllers, f *apiFaults) *framework.Process {
	t.Helper()
	cp := framework.Shared(t)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: f.URL, CertificateAuthorityData: f.caData}
	kc.AuthInfos["nodeset-controller"] = &clientcmdapi.AuthInfo{Token: cp.Config("nodeset-controller").BearerToken}
	kc.Contexts["nodeset-controller"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "nodeset-controller"}
	kc.CurrentContext = "nodeset-controller"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	p := &framework.Process{Name: "nodeset-controller-proxied", Path: c.nodeset.Path, Supervised: true,
		Args: append(append([]string(nil), c.nodeset.Args...), "--kubeconfig="+path)}
	c.nodeset.Kill(syscall.SIGKILL)
	require.NoError(t, p.Start())
	framework.FailOnCrash(t, p)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s logs:\n%s", p.Name, tail(p.Logs(), 80))
		}
		p.Kill(syscall.SIGKILL)
		_ = c.nodeset.Start()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, c.WaitReady(ctx))
	return p
}

// TestLostDeleteAnswersKeepTheRolloutsBounds: the API server stores a
// rollout's Node deletion but answers 500 (etcd timed out), and the
// controller's informer shows the deletion only a moment later. A delete
// of unknown outcome may have happened: the rollout must not delete a
// second available Node in its place and go below replicas -
// maxUnavailable.
func TestLostDeleteAnswersKeepTheRolloutsBounds(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "roll-lost")
	createClass(t, "roll-lost-sim", nil)
	createRollingSet(t, ns, "web", "roll-lost-sim", 4, intstr.FromInt32(1), intstr.FromInt32(0))
	updateSet(t, ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.DeletePolicy = nodesetv1alpha1.DeletePolicyRandom })
	eventually(t, 2*time.Minute, "4 nodes", rolledOut(c, t, ns, "web", 4))
	faults := startAPIFaults(t, framework.Shared(t).Host)
	nodesetControllerThrough(t, c, faults)

	w := watchFleet(t, ns, "web", 5, 4)
	faults.loseNextDeletes(3)
	updateSet(t, ns, "web", setVersion("2"))
	eventually(t, 5*time.Minute, "rolled out", rolledOut(c, t, ns, "web", 4))
	t.Logf("deletes answered 500 after they were stored: %v", faults.lostDeletes())
	require.NotEmpty(t, faults.lostDeletes(), "the faults were injected")
	w.assertHeld(t)
}

// TestGroupDriverRollingUpdateAndManaged: on the example group driver, a
// RollingUpdate NodeSet rolls within its bounds (the cloud group names the
// machines, the nodeset controller picks the Nodes to go), and a Managed
// NodeSet of the same class is left to the driver, which rolls nothing by
// itself: its Nodes stay, reported outdated.
func TestGroupDriverRollingUpdateAndManaged(t *testing.T) {
	startControllers(t)
	_, cs := clients(t)
	groupDir := t.TempDir()
	runExampleNodeController(t, []string{"--drivers=" + "example-group", "--group-poll-interval=2s"},
		[]string{"EXAMPLE_GROUP_DIR=" + groupDir})
	createClass(t, "roll-group", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Driver = "example-group"
		class.Spec.Simulated = nil
		class.Spec.Parameters = &runtime.RawExtension{Raw: []byte(`{"size":"small"}`)}
	})
	ns := createNamespace(t, "roll-group")
	createRollingSet(t, ns, "rolling", "roll-group", 2, intstr.FromInt32(1), intstr.FromInt32(0))
	createRollingSet(t, ns, "managed", "roll-group", 2, intstr.FromInt32(1), intstr.FromInt32(0))
	updateSet(t, ns, "managed", func(s *nodesetv1alpha1.NodeSet) {
		s.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.ManagedStrategy}
	})

	// No kubelet joins a directory: the test reports each new Node Ready.
	ctx, stop := context.WithCancel(context.Background())
	kubelets := make(chan struct{})
	go func() {
		defer close(kubelets)
		kube, _ := clients(t)
		for ctx.Err() == nil {
			list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nodeset.dev/nodeclass=roll-group"})
			if err == nil {
				for i := range list.Items {
					if n := &list.Items[i]; !readyNow(n) && n.DeletionTimestamp == nil {
						now := metav1.Now().UTC().Format(time.RFC3339)
						patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, now, now)
						_, _ = kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() { stop(); <-kubelets }()

	groupRolledOut := func(name string, updated bool) func(ctx context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			nodes, err := setNodes(ctx, t, ns, name)
			if err != nil {
				return false, err.Error()
			}
			ready := 0
			for _, n := range nodes {
				if readyNow(&n) && n.DeletionTimestamp == nil && (!updated || n.Labels[nodesetv1alpha1.LabelTemplateHash] == set.Status.TemplateHash) {
					ready++
				}
			}
			return set.Status.ObservedGeneration == set.Generation && len(nodes) == 2 && ready == 2,
				fmt.Sprintf("%d nodes, %d Ready and as wanted", len(nodes), ready)
		}
	}
	eventually(t, 2*time.Minute, "rolling: 2 nodes", groupRolledOut("rolling", true))
	eventually(t, 2*time.Minute, "managed: 2 nodes", groupRolledOut("managed", true))
	managedBefore := nodeNames(t, ns, "managed")
	rollingBefore := nodeNames(t, ns, "rolling")

	w := watchFleet(t, ns, "rolling", 3, 2)
	for _, name := range []string{"rolling", "managed"} {
		updateSet(t, ns, name, setVersion("2"))
	}
	eventually(t, 3*time.Minute, "rolling: rolled out", groupRolledOut("rolling", true))
	w.assertHeld(t)
	for _, name := range nodeNames(t, ns, "rolling") {
		assert.NotContains(t, rollingBefore, name, "every node of the RollingUpdate set was replaced")
	}
	eventually(t, time.Minute, "managed: change observed", func(ctx context.Context) (bool, string) {
		ok, why := observed(t, ns, "managed")(ctx)
		if !ok {
			return false, why
		}
		p := progressing(t, ns, "managed")
		return strings.Contains(p.Message, "2 outdated, replaced when deleted (strategy Managed)"), p.Reason + ": " + p.Message
	})
	untouched(t, ns, "managed", managedBefore, "a Managed set of a driver that rolls nothing keeps its Nodes")
}

// TestAPIServerErrorsKeepTheRolloutsBounds: for a while the API server
// answers many of the nodeset controller's requests with 429 or 503 (its
// leader election included) in the middle of a rollout; the rollout keeps
// its bounds and finishes.
func TestAPIServerErrorsKeepTheRolloutsBounds(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "roll-errors")
	createClass(t, "roll-errors-sim", nil)
	createRollingSet(t, ns, "web", "roll-errors-sim", 4, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "4 nodes", rolledOut(c, t, ns, "web", 4))
	faults := startAPIFaults(t, framework.Shared(t).Host)
	p := nodesetControllerThrough(t, c, faults)
	restarts := p.Restarts()

	w := watchFleet(t, ns, "web", 5, 4)
	updateSet(t, ns, "web", setVersion("2"))
	faults.failFor(0.4, 15*time.Second)
	eventually(t, 5*time.Minute, "rolled out", rolledOut(c, t, ns, "web", 4))
	t.Logf("answers injected by status code: %v; the controller restarted %d times", faults.injected(), p.Restarts()-restarts)
	require.NotEmpty(t, faults.injected(), "the faults were injected")
	w.assertHeld(t)
}
