package ha

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/test/framework"
)

// watchGate is a proxy on loopback between one controller replica and the
// API server that can hold back what the replica's watches of Nodes
// deliver: while it is closed, the events the API server sends wait in the
// proxy, as they would behind a busy API server or a watch that reconnects
// after an outage.
type watchGate struct {
	URL string

	mu     sync.Mutex
	opened chan struct{} // nil while open
}

// startWatchGate starts the gate, open; it speaks to the API server as
// user.
func startWatchGate(t *testing.T, cp *framework.ControlPlane, user string) *watchGate {
	t.Helper()
	g := &watchGate{}
	forward := apiServerProxy(t, cp, user)
	forward.ModifyResponse = func(resp *http.Response) error {
		q := resp.Request.URL.Query()
		if resp.Request.URL.Path == "/api/v1/nodes" && (q.Get("watch") == "true" || q.Get("watch") == "1") {
			resp.Body = &gatedBody{ReadCloser: resp.Body, gate: g}
		}
		return nil
	}
	server := httptest.NewServer(forward)
	t.Cleanup(func() { g.open(); server.Close() })
	g.URL = server.URL
	return g
}

// hold closes the gate: Node watch events from now on wait.
func (g *watchGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened == nil {
		g.opened = make(chan struct{})
	}
}

// open lets the events held back through, and those after them.
func (g *watchGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened != nil {
		close(g.opened)
		g.opened = nil
	}
}

func (g *watchGate) wait() {
	g.mu.Lock()
	opened := g.opened
	g.mu.Unlock()
	if opened != nil {
		<-opened
	}
}

// gatedBody is a watch's stream: bytes read from the API server while the
// gate is closed are handed on once it opens.
type gatedBody struct {
	io.ReadCloser
	gate *watchGate
}

func (b *gatedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.gate.wait()
	return n, err
}

// apiServerProxy forwards requests to the API server, as user.
func apiServerProxy(t *testing.T, cp *framework.ControlPlane, user string) *httputil.ReverseProxy {
	t.Helper()
	target, err := url.Parse(cp.Host)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	ca, err := os.ReadFile(cp.CAFile)
	require.NoError(t, err)
	require.True(t, roots.AppendCertsFromPEM(ca))
	token := cp.Config(user).BearerToken
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Set("Authorization", "Bearer "+token)
		},
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true},
		FlushInterval: -1, // a watch's events as they come
	}
}

// kubeconfigThrough writes a kubeconfig that reaches the API server
// through proxy (a gate, which speaks as user).
func kubeconfigThrough(t *testing.T, proxy, user string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["gated"] = &clientcmdapi.Cluster{Server: proxy}
	// The gate adds the user's token.
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{}
	kc.Contexts[user] = &clientcmdapi.Context{Cluster: "gated", AuthInfo: user}
	kc.CurrentContext = user
	path := filepath.Join(t.TempDir(), "kubeconfig-"+user)
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// withKubeconfig is p's arguments with --kubeconfig replaced.
func withKubeconfig(args []string, path string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "--kubeconfig=") {
			out = append(out, a)
		}
	}
	return append(out, "--kubeconfig="+path)
}

// TestANewLeaderActsOnlyOnACaughtUpCache: two nodeset-controller replicas,
// each reaching the API server through a gate that can hold back its Node
// watch. With the standby's watch held, the leader scales a set up (then,
// in a second round, down) and is SIGKILLed once its Nodes are made (or
// deleted); the standby takes over with a cache that does not show them.
// The watch is let through only once the new leader said it waits for its
// cache, or once it acted without waiting. By the audit log, the
// nodeset-controller then made exactly the Nodes the scale-up asked for,
// and deleted exactly the Nodes the scale-down asked for, each once.
func TestANewLeaderActsOnlyOnACaughtUpCache(t *testing.T) {
	ctx := context.Background()
	cp := framework.Shared(t)
	c, err := framework.NewControllers(ctx, cp, framework.ControllerOptions{})
	require.NoError(t, err)
	other, _, err := c.Replica(c.NodeSet)
	require.NoError(t, err)
	gates := map[*framework.Process]*watchGate{}
	for _, p := range []*framework.Process{c.NodeSet, other} {
		gates[p] = startWatchGate(t, cp, "nodeset-controller")
		p.Args = withKubeconfig(p.Args, kubeconfigThrough(t, gates[p].URL, "nodeset-controller"))
	}
	sets := &replicas{name: "nodeset-controller", all: [2]*framework.Process{c.NodeSet, other}}
	startAll(t, cp, c.NodeSet, other, c.Node)
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	cs := versioned.NewForConfigOrDie(cp.AdminConfig())

	const namespace = "catchup"
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "catchup-sim"},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver:         nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.NodesetV1alpha1().NodeSets(namespace).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "catchup-sim", Replicas: ptr.To[int32](3)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "3 Ready nodes", func(ctx context.Context) (bool, string) {
		return readyNodes(ctx, kube, namespace, "web", 3)
	})

	for _, s := range []struct {
		size int32
		// made says whether the leader has done its part of the scale.
		made func(ctx context.Context) (bool, string)
	}{
		{size: 6, made: func(ctx context.Context) (bool, string) {
			n := len(nodeNamesOf(ctx, kube, namespace, "web"))
			return n == 6, fmt.Sprintf("%d Nodes", n)
		}},
		{size: 2, made: func(ctx context.Context) (bool, string) {
			list, err := kube.CoreV1().Nodes().List(ctx, ofSet(namespace, "web"))
			if err != nil {
				return false, err.Error()
			}
			live := 0
			for _, n := range list.Items {
				if n.DeletionTimestamp == nil {
					live++
				}
			}
			return live == 2, fmt.Sprintf("%d Nodes not deleted", live)
		}},
	} {
		leader, standby := sets.leader(t, kube)
		before := nodeNamesOf(ctx, kube, namespace, "web")
		start := time.Now()
		gates[standby].hold()
		scale(t, cs, namespace, "web", s.size)
		eventually(t, time.Minute, fmt.Sprintf("the leader scaled to %d", s.size), s.made)
		leader.Kill(syscall.SIGKILL)
		logsBefore := len(standby.Logs())
		eventually(t, time.Minute, "the standby takes over", func(ctx context.Context) (bool, string) {
			h := holder(ctx, kube, sets.name)
			return h == identity(standby), "lease held by " + h
		})
		// Let the held events through once the new leader waits for its
		// cache; or, if it does not wait, once it acted on what it has.
		acted := false
		eventually(t, time.Minute, "the new leader waits for its cache, or acts", func(ctx context.Context) (bool, string) {
			logs := standby.Logs()[logsBefore:]
			if strings.Contains(logs, "Waiting for the Node cache") {
				return true, ""
			}
			if strings.Contains(logs, "Started workers") {
				acted = true
				return writesOf(t, start, identity(standby)) > 0, "workers started, no write yet"
			}
			return false, "neither waiting nor started"
		})
		gates[standby].open()
		synced := strings.Count(leader.Logs(), "Caches are synced")
		require.NoError(t, leader.Start())
		// The next round's standby has every Node in its cache.
		eventually(t, time.Minute, "the old leader is back as the standby", func(ctx context.Context) (bool, string) {
			return strings.Count(leader.Logs(), "Caches are synced") > synced, "its caches not synced yet"
		})
		eventually(t, 2*time.Minute, fmt.Sprintf("%d Ready nodes", s.size), func(ctx context.Context) (bool, string) {
			return readyNodes(ctx, kube, namespace, "web", int(s.size))
		})
		require.NoError(t, cp.AuditComplete(ctx), "the audit log holds every event")
		changes := map[string]int{}
		for _, e := range writes(t, "nodeset-controller", start) {
			if e.ObjectRef.Resource == "nodes" && (e.Verb == "create" || e.Verb == "delete") {
				changes[e.Verb+" "+e.ObjectRef.Name]++
			}
		}
		t.Logf("scale %d -> %d: Node changes by the nodeset-controller: %v (the new leader acted before waiting: %v)", len(before), s.size, changes, acted)
		var made, deleted int
		for change, n := range changes {
			require.Equal(t, 1, n, "%s: each Node made or deleted once", change)
			if strings.HasPrefix(change, "create ") {
				made++
			} else {
				deleted++
			}
		}
		if int(s.size) > len(before) {
			require.Equal(t, int(s.size)-len(before), made, "Nodes made for the scale-up")
			require.Zero(t, deleted, "Nodes deleted in the scale-up")
		} else {
			require.Zero(t, made, "Nodes made in the scale-down")
			require.Equal(t, len(before)-int(s.size), deleted, "Nodes deleted for the scale-down")
		}
		require.False(t, acted, "the new leader started its workers before its cache showed what the API server had")
	}

	// The machines go with the NodeSet: the node controllers adopt the
	// simulated machines of the Nodes left, in the tests that run after
	// this one.
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(namespace).Delete(ctx, "web", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "every Node gone with the NodeSet", func(ctx context.Context) (bool, string) {
		names := nodeNamesOf(ctx, kube, namespace, "web")
		return len(names) == 0, fmt.Sprintf("Nodes %v", names)
	})
}

// writesOf counts the writes of the replica named identity since start,
// as the audit log has them now.
func writesOf(t *testing.T, start time.Time, identity string) int {
	n := 0
	for _, e := range writes(t, "", start) {
		if strings.Contains(e.UserAgent, "replica/"+identity) {
			n++
		}
	}
	return n
}
