package lifecycle

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"nodeset.dev/nodeset/test/framework"
)

func get(ctx context.Context, port int, path string) (int, string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestMetricsAndProbes scrapes both controllers after some work was done:
// the workqueue metrics, nodes by phase, provisioning and drain durations and
// driver call latencies are exported, and the probes answer.
func TestMetricsAndProbes(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "metrics")
	createClass(t, "metrics-sim", nil)
	createSet(t, ns, "measured", "metrics-sim", 2)
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "measured", 2))
	nodes, err := setNodes(ctx, t, ns, "measured")
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, nodes[0].Name, metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "replaced", converged(c, t, ns, "measured", 2))

	for _, port := range []int{c.NodeSetHealthPort, c.NodeHealthPort} {
		for _, path := range []string{"/healthz", "/readyz"} {
			eventually(t, 30*time.Second, fmt.Sprintf("%s on :%d", path, port), func(ctx context.Context) (bool, string) {
				code, body, err := get(ctx, port, path)
				return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
			})
		}
	}
	want := map[int][]string{
		c.NodeSetMetricsPort: {
			`workqueue_depth{name="nodeset"}`,
			`workqueue_adds_total{name="nodeset"}`,
			`workqueue_work_duration_seconds_count{name="nodeset"}`,
		},
		c.NodeMetricsPort: {
			`workqueue_depth{name="node"}`,
			`workqueue_retries_total{name="node"}`,
			`nodeset_nodes{namespace="` + ns + `",nodeclass="metrics-sim",nodeset="measured",phase="ready"} 2`,
			`nodeset_node_provisioning_duration_seconds_count{driver="simulated"}`,
			`nodeset_node_registration_duration_seconds_count{driver="simulated"}`,
			`nodeset_node_drain_duration_seconds_count{outcome="drained"}`,
			`nodeset_driver_call_duration_seconds_count{driver="simulated",operation="create",outcome="success"}`,
			`nodeset_driver_call_duration_seconds_count{driver="simulated",operation="delete",outcome="success"}`,
		},
	}
	for port, series := range want {
		code, body, err := get(ctx, port, "/metrics")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		for _, s := range series {
			assert.Contains(t, body, s, "metrics on :%d", port)
		}
	}
}

// TestGracefulShutdownReleasesLeadership stops the nodeset-controller with
// SIGTERM: it exits by itself and gives up its leader Lease, so a successor
// takes over at once rather than after the lease duration.
func TestGracefulShutdownReleasesLeadership(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	var lease *coordinationv1.Lease
	eventually(t, time.Minute, "nodeset-controller holds its Lease", func(ctx context.Context) (bool, string) {
		l, err := kube.CoordinationV1().Leases("nodeset-system").Get(ctx, "nodeset-controller", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		lease = l
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", "no holder"
	})
	state, forced := c.nodeset.Kill(syscall.SIGTERM)
	require.NotNil(t, state)
	assert.False(t, forced, "the controller must exit by itself on SIGTERM")
	assert.Equal(t, 0, state.ExitCode(), "a graceful shutdown exits 0")
	l, err := kube.CoordinationV1().Leases("nodeset-system").Get(ctx, "nodeset-controller", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, ptr.Deref(l.Spec.HolderIdentity, ""), "the Lease held by %s was released on shutdown", ptr.Deref(lease.Spec.HolderIdentity, ""))
	require.NoError(t, c.nodeset.Start())
}

// documentedMetrics reads docs/observability.md's catalogue: metric name ->
// type, by the heading (controller) it is listed under.
func documentedMetrics(t *testing.T) map[string]map[string]string {
	t.Helper()
	doc := observabilityDoc(t)
	out := map[string]map[string]string{}
	section := ""
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| ([a-z]+) \\|")
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "### ") {
			section = strings.TrimPrefix(line, "### ")
			out[section] = map[string]string{}
			continue
		}
		if m := row.FindStringSubmatch(line); m != nil && section != "" {
			out[section][m[1]] = m[2]
		}
	}
	return out
}

// observabilityDoc is docs/observability.md, where the metrics, alerts and
// Event reasons are documented.
func observabilityDoc(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "observability.md"))
	require.NoError(t, err)
	return string(doc)
}

// exposedMetrics scrapes /metrics: family name -> type, for nodeset's own
// and the workqueue families.
func exposedMetrics(t *testing.T, port int) map[string]string {
	t.Helper()
	code, body, err := get(context.Background(), port, "/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	out := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 4 && fields[0] == "#" && fields[1] == "TYPE" &&
			(strings.HasPrefix(fields[2], "nodeset_") || strings.HasPrefix(fields[2], "workqueue_")) {
			out[fields[2]] = fields[3]
		}
	}
	return out
}

// TestMetricsCatalogue: docs/observability.md lists exactly the metrics each
// controller exposes, with their types, and the shipped alerts and dashboard
// use only those.
func TestMetricsCatalogue(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "catalogue")
	createClass(t, "catalogue-sim", nil)
	createSet(t, ns, "listed", "catalogue-sim", 1)
	eventually(t, 2*time.Minute, "1 node", converged(c, t, ns, "listed", 1))

	docs := documentedMetrics(t)
	require.Contains(t, docs, "Both")
	for section, port := range map[string]int{"nodeset-controller": c.NodeSetMetricsPort, "node-controller": c.NodeMetricsPort} {
		want := map[string]string{}
		for _, s := range []string{section, "Both"} {
			require.Contains(t, docs, s)
			for name, typ := range docs[s] {
				want[name] = typ
			}
		}
		assert.Equal(t, want, exposedMetrics(t, port), "%s: docs/observability.md and /metrics disagree", section)
	}

	known := map[string]bool{}
	for _, section := range docs {
		for name := range section {
			known[name] = true
		}
	}
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	used := regexp.MustCompile(`\b(?:nodeset|workqueue)_[a-z_]+`)
	for _, file := range []string{"prometheus-rules.yaml", "grafana-dashboard.json"} {
		data, err := os.ReadFile(filepath.Join(root, "deploy", "observability", file))
		require.NoError(t, err)
		names := used.FindAllString(string(data), -1)
		require.NotEmpty(t, names, file)
		for _, name := range names {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
			assert.True(t, known[base], "%s uses %s, which no controller exposes", file, name)
		}
	}
}
