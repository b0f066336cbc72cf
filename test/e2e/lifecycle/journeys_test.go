package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeset.dev/nodeset/test/framework"
)

// kubectlRun runs kubectl as the admin, with env added to its environment,
// and returns what it printed.
func kubectlRun(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, framework.Shared(t).Kubectl(), args...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+framework.Shared(t).KubeconfigPath), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectlRun(t, nil, args...)
	require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
	return out
}

// TestJourneyKubectl: what a Kubernetes user types, against both
// controllers: a NodeSet applied server-side and applied again after the
// controllers wrote to it, kubectl wait for Available, kubectl scale with
// and without a precondition, the printer columns at zero, and kubectl
// delete with each --cascade.
func TestJourneyKubectl(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "journey")
	// The admin's class, applied server-side, and applied again after the
	// controllers wrote to it (finalizer, status): no conflict.
	class := filepath.Join(t.TempDir(), "class.yaml")
	writeClass := func(pool string) {
		require.NoError(t, os.WriteFile(class, []byte(`apiVersion: nodeset.dev/v1alpha1
kind: NodeClass
metadata: {name: journey-sim}
spec:
  driver: simulated
  simulated: {instanceType: sim.small, bootDelay: 200ms}
  nodeTemplate:
    labels: {example.com/pool: `+pool+`}
  registrationTimeout: 1m
  drain: {timeout: 20s}
`), 0o644))
	}
	writeClass("general")
	assert.Contains(t, mustKubectl(t, "apply", "--server-side", "-f", class), "serverside-applied")
	mustKubectl(t, "wait", "nodeclass/journey-sim", "--for=condition=Valid", "--timeout=1m")
	writeClass("journey")
	assert.Contains(t, mustKubectl(t, "apply", "--server-side", "-f", class), "serverside-applied")
	mustKubectl(t, "wait", "nodeclass/journey-sim", "--for=condition=Valid", "--timeout=1m")

	manifest := func(name string, replicas int) string {
		file := filepath.Join(t.TempDir(), name+".yaml")
		require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`apiVersion: nodeset.dev/v1alpha1
kind: NodeSet
metadata: {name: %s, namespace: %s}
spec:
  nodeClassName: journey-sim
  replicas: %d
  template:
    labels: {example.com/tier: %s}
`, name, ns, replicas, name)), 0o644))
		return file
	}

	// Server-side apply; the controllers' writes (finalizer, status) take
	// no field the user applied, so applying again never conflicts.
	web := manifest("web", 2)
	assert.Contains(t, mustKubectl(t, "apply", "--server-side", "-f", web), "serverside-applied")
	mustKubectl(t, "wait", "-n", ns, "nodeset/web", "--for=condition=Available", "--timeout=2m")
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "web", 2))
	assert.Contains(t, mustKubectl(t, "apply", "--server-side", "-f", web), "serverside-applied")
	assert.Contains(t, mustKubectl(t, "apply", "--server-side", "-f", manifest("web", 3)), "serverside-applied")
	eventually(t, 2*time.Minute, "3 nodes", converged(c, t, ns, "web", 3))

	// Labels and annotations of a NodeSet are the user's; a kubectl edit
	// of its class is refused with the schema's message.
	mustKubectl(t, "label", "-n", ns, "nodeset/web", "env=prod")
	mustKubectl(t, "annotate", "-n", ns, "nodeset/web", "example.com/owner=web-team")
	assert.Contains(t, mustKubectl(t, "get", "nds", "-n", ns, "-l", "env=prod", "-o", "name"), "nodeset.nodeset.dev/web")
	out, err := kubectlRun(t, []string{"EDITOR=sed -i s/nodeClassName:.journey-sim/nodeClassName:\\ other/"},
		"edit", "-n", ns, "nodeset/web")
	require.Error(t, err, out)
	// kubectl edit shows the refusal in the file it reopens, and keeps it.
	stored := regexp.MustCompile(`stored to "([^"]+)"`).FindStringSubmatch(out)
	require.Len(t, stored, 2, out)
	edited, err := os.ReadFile(stored[1])
	require.NoError(t, err)
	require.NoError(t, os.Remove(stored[1]))
	assert.Contains(t, string(edited), "spec.nodeClassName is immutable; create a new NodeSet to change class")
	assert.Contains(t, mustKubectl(t, "apply", "--server-side", "-f", manifest("web", 3)), "serverside-applied",
		"labels and annotations set by kubectl label and annotate are no conflict")

	// kubectl scale's precondition is checked against spec.replicas.
	out, err = kubectlRun(t, nil, "scale", "-n", ns, "nodeset/web", "--current-replicas=2", "--replicas=1")
	require.Error(t, err, out)
	assert.Contains(t, out, "Expected replicas to be 2, was 3")
	mustKubectl(t, "scale", "-n", ns, "nodeset/web", "--current-replicas=3", "--replicas=0")
	eventually(t, 2*time.Minute, "0 nodes", converged(c, t, ns, "web", 0))
	out = mustKubectl(t, "get", "nds", "web", "-n", ns, "--no-headers")
	assert.Regexp(t, `^web\s+journey-sim\s+0\s+0\s+0\s+0\s+0\s+\S+\n$`, out, "CLASS, DESIRED, CURRENT, READY, UP-TO-DATE, AVAILABLE, AGE at zero")

	// kubectl delete, with each --cascade: Nodes have no ownerReferences, so
	// none is orphaned; the NodeSet's Nodes are drained and deprovisioned
	// and the delete returns once they are gone.
	for _, cascade := range []string{"orphan", "foreground", "background"} {
		t.Run(cascade, func(t *testing.T) {
			name := "cascade-" + cascade
			mustKubectl(t, "create", "-f", manifest(name, 2))
			eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, name, 2))
			mustKubectl(t, "delete", "-n", ns, "nodeset", name, "--cascade="+cascade, "--timeout=2m")
			_, cs := clients(t)
			_, err := cs.NodesetV1alpha1().NodeSets(ns).Get(context.Background(), name, metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "the NodeSet is gone when kubectl delete returns: %v", err)
			nodes, err := setNodes(context.Background(), t, ns, name)
			require.NoError(t, err)
			assert.Empty(t, nodes, "no Node outlives its NodeSet with --cascade=%s", cascade)
			all, ok := c.machines(context.Background())
			require.True(t, ok)
			assert.Empty(t, setMachines(all, ns, name), "nor any machine")
		})
	}
}
