package ha

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/test/framework"
)

// writeGate is a proxy on loopback between one controller replica and the
// API server that holds back the replica's requests that match, as long
// as it is closed; a held request whose replica died meanwhile is dropped,
// never sent.
type writeGate struct {
	URL string

	mu      sync.Mutex
	matches func(r *http.Request, body []byte) bool
	opened  chan struct{}
	held    int
	dropped int
}

func startWriteGate(t *testing.T, cp *framework.ControlPlane, user string, matches func(r *http.Request, body []byte) bool) *writeGate {
	t.Helper()
	g := &writeGate{matches: matches, opened: make(chan struct{})}
	close(g.opened)
	forward := apiServerProxy(t, cp, user)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		g.mu.Lock()
		opened, held := g.opened, g.matches(r, body)
		if held {
			g.held++
		}
		g.mu.Unlock()
		if held {
			select {
			case <-opened:
			case <-r.Context().Done():
				// The replica is gone: its write is never sent.
				g.mu.Lock()
				g.dropped++
				g.mu.Unlock()
				return
			}
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { g.open(); server.Close() })
	g.URL = server.URL
	return g
}

func (g *writeGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.opened:
		g.opened = make(chan struct{})
	default:
	}
}

func (g *writeGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.opened:
	default:
		close(g.opened)
	}
}

// counts are the requests held so far, and those of them dropped.
func (g *writeGate) counts() (held, dropped int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, g.dropped
}

// TestANodeControllerKilledBeforeItRecordsTheMachine: the node-controller
// leader has the docker-machine plugin make a Node's machine, and is
// SIGKILLed before the Node's providerID is written (a proxy of the test
// holds that write back until the leader is dead, then drops it). The
// standby takes over and must find the machine made, not make a second
// one: by the plugin's log, one Create per Node, and the Node records the
// id of the machine made first (the plugin's machines are found by the id
// their Create gave them, as a cloud's are).
func TestANodeControllerKilledBeforeItRecordsTheMachine(t *testing.T) {
	ctx := context.Background()
	cp := framework.Shared(t)
	sshd, err := framework.StartSSHD(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(sshd.Stop)
	c, err := framework.NewControllers(ctx, cp, framework.ControllerOptions{})
	require.NoError(t, err)
	// The first leader records the providerIDs of its machines through the
	// gate; its standby talks to the API server directly.
	gate := startWriteGate(t, cp, "node-controller", func(r *http.Request, body []byte) bool {
		return r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, "/api/v1/nodes/") && bytes.Contains(body, []byte("/spec/providerID"))
	})
	standby, _, err := c.Replica(c.Node)
	require.NoError(t, err)
	c.Node.Args = withKubeconfig(c.Node.Args, kubeconfigThrough(t, gate.URL, "node-controller"))
	c.Node.Supervised = false
	require.NoError(t, c.Node.Start())
	nodes := &replicas{name: "node-controller", all: [2]*framework.Process{c.Node, standby}}
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	cs := versioned.NewForConfigOrDie(cp.AdminConfig())
	eventually(t, time.Minute, "the gated replica leads", func(ctx context.Context) (bool, string) {
		h := holder(ctx, kube, nodes.name)
		return h != "" && h == identity(c.Node), "lease held by " + h
	})
	startAll(t, cp, c.NodeSet, standby)
	framework.FailOnCrash(t, c.Node)
	t.Cleanup(func() { c.Node.Kill(syscall.SIGTERM) })

	const ns = "made-before-kill"
	machineDir := testPluginClass(ctx, t, cp, sshd, ns, "mbk-dm", map[string]string{"fake-cloud-ids": "true"}, nil)

	gate.hold()
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "mbk-dm", Replicas: ptr.To[int32](2)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "the leader made the machines and sent their providerIDs", func(ctx context.Context) (bool, string) {
		held, _ := gate.counts()
		return held >= 2, fmt.Sprintf("%d providerID writes held", held)
	})
	made := map[string]string{} // Node name -> the providerID the leader sent
	for _, line := range strings.Split(c.Node.Logs(), "\n") {
		if strings.Contains(line, `"Provisioned machine"`) {
			name := fieldOf(line, "node")
			made[name] = fieldOf(line, "providerID")
		}
	}
	c.Node.Kill(syscall.SIGKILL)
	eventually(t, time.Minute, "the dead leader's providerID writes dropped", func(ctx context.Context) (bool, string) {
		held, dropped := gate.counts()
		return dropped == held, fmt.Sprintf("%d held, %d dropped", held, dropped)
	})
	t.Logf("machines made by the killed leader, by Node: %v", made)
	require.Len(t, made, 2, "the leader logged the machines it made")

	eventually(t, 3*time.Minute, "2 Ready nodes", func(ctx context.Context) (bool, string) {
		return readyNodes(ctx, kube, ns, "web", 2)
	})
	list, err := kube.CoreV1().Nodes().List(ctx, ofSet(ns, "web"))
	require.NoError(t, err)
	for _, n := range list.Items {
		require.Equal(t, made[n.Name], n.Spec.ProviderID, "Node %s records the machine the killed leader made", n.Name)
	}
	names := nodeNamesOf(ctx, kube, ns, "web")
	sort.Strings(names)
	require.Equal(t, names, fakeMachines(t, machineDir), "a machine per Node, no more")
	calls, err := fakeplugin.Calls(machineDir)
	require.NoError(t, err)
	creates := map[string]int{}
	for _, call := range calls {
		if call.Op == "create" {
			creates[call.Name]++
		}
	}
	for _, name := range names {
		require.Equal(t, 1, creates[name], "plugin Creates of machine %s", name)
	}

	// The machines go with the NodeSet: the node controllers' machine
	// records are shared with the tests that run after this one.
	deleteSetWithItsMachines(ctx, t, kube, cs, ns, machineDir)
}

// fieldOf is the value of key="..." in a structured log line.
func fieldOf(line, key string) string {
	i := strings.Index(line, " "+key+"=\"")
	if i < 0 {
		return ""
	}
	rest := line[i+len(key)+3:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}
