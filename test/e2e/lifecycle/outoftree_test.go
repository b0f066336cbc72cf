package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
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
	machineDir := t.TempDir()
	runExampleNodeController(t, nil, []string{"EXAMPLE_MACHINE_DIR=" + machineDir})

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

// TestOutOfTreeGroupDriver runs the example group driver of
// docs/drivers/out-of-tree.md as its own node controller: its class is
// published as a Group driver, its NodeSet gets the machines the group
// names as Nodes, scale-down terminates the chosen machine and lowers the
// group, and deletion removes the group.
func TestOutOfTreeGroupDriver(t *testing.T) {
	startControllers(t)
	ctx := context.Background()
	kube, cs := clients(t)
	groupDir := t.TempDir()
	runExampleNodeController(t, []string{"--drivers=" + example.GroupName, "--group-poll-interval=2s"},
		[]string{"EXAMPLE_GROUP_DIR=" + groupDir})

	createClass(t, "example-group-small", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Driver = example.GroupName
		class.Spec.Simulated = nil
		class.Spec.Parameters = &runtime.RawExtension{Raw: []byte(`{"size":"small"}`)}
	})
	eventually(t, time.Minute, "the class valid, published as a Group driver", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "example-group-small", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		valid := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
		return valid != nil && valid.Status == metav1.ConditionTrue && class.Status.DriverKind == nodesetv1alpha1.DriverKindGroup,
			fmt.Sprintf("valid %v, driverKind %q", valid, class.Status.DriverKind)
	})

	ns := createNamespace(t, "outoftree-group")
	createSet(t, ns, "groups", "example-group-small", 2)
	group := func() string {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "groups", metav1.GetOptions{})
		if err != nil || set.Status.Group == nil {
			return ""
		}
		return set.Status.Group.Name
	}
	// machines are the group's machines, as the driver reports them.
	machines := func() (names []string, desired int32) {
		if group() == "" {
			return nil, 0
		}
		status, err := (&example.GroupDriver{Root: groupDir}).DescribeGroup(ctx, drivers.Class{}, group())
		if err != nil {
			return nil, 0
		}
		for _, m := range status.Machines {
			names = append(names, m.Name)
		}
		sort.Strings(names)
		return names, status.DesiredSize
	}
	// No kubelet joins a directory: the test reports each Node Ready.
	eventually(t, 2*time.Minute, "2 machines in the group, their Nodes Ready", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "groups")
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range nodes {
			if !nodeutil.IsReady(&nodes[i]) {
				markNodeReady(ctx, t, nodes[i].Name)
			} else if !nodeutil.HasStartupTaint(&nodes[i]) {
				ready++
			}
		}
		names, desired := machines()
		return ready == 2 && len(names) == 2 && desired == 2, fmt.Sprintf("%d ready, machines %v, desired %d", ready, names, desired)
	})
	names, _ := machines()
	assert.Equal(t, names, nodeNames(t, ns, "groups"), "the Nodes are named as the group named its machines")
	nodes, err := setNodes(ctx, t, ns, "groups")
	require.NoError(t, err)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for _, n := range nodes {
		assert.Equal(t, example.GroupName+"://"+group()+"/"+n.Name, n.Spec.ProviderID)
		assert.DirExists(t, filepath.Join(groupDir, group(), n.Name))
	}

	_, err = kube.CoreV1().Nodes().Patch(ctx, nodes[1].Name, "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"nodeset.dev/delete-node":"true"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	scale(t, ns, "groups", 1)
	eventually(t, time.Minute, "the chosen machine and its Node gone, the group lowered to 1", func(ctx context.Context) (bool, string) {
		names, desired := machines()
		left := nodeNames(t, ns, "groups")
		return slices.Equal(names, []string{nodes[0].Name}) && desired == 1 && slices.Equal(left, names),
			fmt.Sprintf("machines %v, desired %d, Nodes %v", names, desired, left)
	})
	assert.NoDirExists(t, filepath.Join(groupDir, group(), nodes[1].Name))

	dir := filepath.Join(groupDir, group())
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "groups", metav1.DeleteOptions{}))
	eventually(t, time.Minute, "the NodeSet, its Nodes and its group gone", func(ctx context.Context) (bool, string) {
		_, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "groups", metav1.GetOptions{})
		left := nodeNames(t, ns, "groups")
		_, statErr := os.Stat(dir)
		return apierrors.IsNotFound(err) && len(left) == 0 && errors.Is(statErr, os.ErrNotExist),
			fmt.Sprintf("NodeSet: %v, Nodes %v, group directory: %v", err, left, statErr)
	})
}

// runExampleNodeController builds cmd/example-node-controller and runs it
// with args and env until the test ends, once it is ready; it returns the
// process and its metrics port.
func runExampleNodeController(t *testing.T, args, env []string) (*framework.Process, int) {
	t.Helper()
	p, metrics, health := startExampleNodeController(t, args, env)
	eventually(t, time.Minute, "example node controller ready", func(ctx context.Context) (bool, string) {
		code, body, err := get(ctx, health, "/readyz")
		return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
	})
	return p, metrics
}

// startExampleNodeController starts the example node controller and returns
// it with its metrics and health ports, without waiting for it.
func startExampleNodeController(t *testing.T, args, env []string) (*framework.Process, int, int) {
	t.Helper()
	ctx := context.Background()
	bins, err := framework.BuildCommands(ctx, t.TempDir(), "./cmd/example-node-controller")
	require.NoError(t, err)
	kubeconfig, err := framework.Shared(t).WriteKubeconfig("node-controller")
	require.NoError(t, err)
	metrics, err := framework.FreePort()
	require.NoError(t, err)
	health, err := framework.FreePort()
	require.NoError(t, err)
	p := &framework.Process{Name: "example-node-controller", Path: bins["example-node-controller"], Args: append([]string{
		"--kubeconfig=" + kubeconfig,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", health),
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}, args...), Env: env}
	require.NoError(t, p.Start())
	t.Cleanup(func() {
		p.Kill(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("example-node-controller logs:\n%s", tail(p.Logs(), 60))
		}
	})
	return p, metrics, health
}
