package lifecycle

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/example"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/test/framework"
)

// TestOutOfTreeDriver runs the example driver of docs/drivers/out-of-tree.md
// as its own node controller next to the built-in one: its class is
// validated, its NodeSet gets machines (directories), and scale-down and
// deletion remove exactly the right ones.
func TestOutOfTreeDriver(t *testing.T) {
	startControllers(t)
	ctx := context.Background()
	kube, cs := clients(t)
	binDir, machineDir := t.TempDir(), t.TempDir()
	bins, err := framework.BuildCommands(ctx, binDir, "./cmd/example-node-controller")
	require.NoError(t, err)
	kubeconfig, err := framework.Shared(t).WriteKubeconfig("node-controller")
	require.NoError(t, err)
	ports, err := framework.FreePort()
	require.NoError(t, err)
	health, err := framework.FreePort()
	require.NoError(t, err)
	p := &framework.Process{Name: "example-node-controller", Path: bins["example-node-controller"], Args: []string{
		"--kubeconfig=" + kubeconfig,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", health),
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}, Env: []string{"EXAMPLE_MACHINE_DIR=" + machineDir}}
	require.NoError(t, p.Start())
	t.Cleanup(func() {
		p.Kill(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("example-node-controller logs:\n%s", tail(p.Logs(), 60))
		}
	})
	eventually(t, time.Minute, "example node controller ready", func(ctx context.Context) (bool, string) {
		code, body, err := get(ctx, health, "/readyz")
		return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
	})

	createClass(t, "example-small", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Driver = example.Name
		class.Spec.Simulated = nil
		class.Spec.Parameters = &runtime.RawExtension{Raw: []byte(`{"size":"small"}`)}
	})
	createClass(t, "example-wrong", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Driver = example.Name
		class.Spec.Simulated = nil
		class.Spec.Parameters = &runtime.RawExtension{Raw: []byte(`{"size":"huge"}`)}
	})
	eventually(t, time.Minute, "the wrong class refused by the driver", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "example-wrong", metav1.GetOptions{})
		if err != nil || len(class.Status.Conditions) == 0 {
			return false, fmt.Sprint(err)
		}
		cond := class.Status.Conditions[0]
		return cond.Status == metav1.ConditionFalse, cond.Message
	})

	ns := createNamespace(t, "outoftree")
	createSet(t, ns, "dirs", "example-small", 2)
	machines := func() []string {
		entries, err := os.ReadDir(machineDir)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(machineDir, e.Name(), "machine.json")); err == nil {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		return names
	}
	// No kubelet joins a directory: the test reports each Node Ready.
	eventually(t, 2*time.Minute, "2 machines, Nodes Ready and untainted", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "dirs")
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range nodes {
			n := &nodes[i]
			if n.Spec.ProviderID == "" {
				continue
			}
			if !nodeutil.IsReady(n) {
				markNodeReady(ctx, t, n.Name)
				continue
			}
			if !nodeutil.HasStartupTaint(n) {
				ready++
			}
		}
		return ready == 2 && len(machines()) == 2, fmt.Sprintf("%d ready, machines %v", ready, machines())
	})
	assert.Equal(t, nodeNames(t, ns, "dirs"), machines(), "a directory per Node, named after it")
	nodes, err := setNodes(ctx, t, ns, "dirs")
	require.NoError(t, err)
	assert.Equal(t, example.Name+":///"+nodes[0].Name, nodes[0].Spec.ProviderID)

	_, err = kube.CoreV1().Nodes().Patch(ctx, nodes[1].Name, "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"nodeset.dev/delete-node":"true"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	scale(t, ns, "dirs", 1)
	eventually(t, time.Minute, "the chosen machine gone", func(context.Context) (bool, string) {
		m := machines()
		return len(m) == 1 && m[0] == nodes[0].Name, fmt.Sprintf("machines %v", m)
	})
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "dirs", metav1.DeleteOptions{}))
	eventually(t, time.Minute, "every machine gone", func(context.Context) (bool, string) {
		return len(machines()) == 0, fmt.Sprintf("machines %v", machines())
	})
}

// markNodeReady reports a Node Ready, as its kubelet would.
func markNodeReady(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	kube, _ := clients(t)
	now := metav1.Now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, now, now)
	_, err := kube.CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
}
