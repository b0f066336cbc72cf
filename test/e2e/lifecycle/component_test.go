package lifecycle

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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
			`nodeset_nodes{nodeclass="metrics-sim",phase="ready"}`,
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
