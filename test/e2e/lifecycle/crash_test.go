package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeset.dev/nodeset/test/framework"
)

// crashSequence scales a NodeSet through the plan's sizes (12→3→9→0 with 8
// kills in make test, 50→10→40→0 with 24 in make test-reliability), killing
// a controller with SIGKILL at random moments of each step and restarting
// it, then checks the invariants: Nodes = machines = replicas, every Node
// backed by its own machine, no providerID twice, no machine without a Node.
// machines returns the names of the set's machines as the driver has them.
func crashSequence(t *testing.T, c *controllers, namespace, name string, machines func() []string) {
	t.Helper()
	p := framework.PlanCrashes(t, framework.CrashPlan{Sizes: []int{12, 3, 9, 0}, Kills: 8, Seed: 20261123},
		framework.CrashPlan{Sizes: []int{50, 10, 40, 0}, Kills: 24})
	kills := p.RunCrashes(t, []*framework.Process{c.nodeset, c.node},
		func(size int) { scale(t, namespace, name, int32(size)) },
		func(step, size int) {
			eventually(t, 4*time.Minute, fmt.Sprintf("step %d: %d nodes after the kills", step, size), converged(c, t, namespace, name, size))
			checkInvariants(t, namespace, name, size, machines)
		})
	assert.GreaterOrEqual(t, kills, p.Kills-len(p.Sizes)+1)
}

func checkInvariants(t *testing.T, namespace, name string, size int, machines func() []string) {
	t.Helper()
	nodes, err := setNodes(context.Background(), t, namespace, name)
	require.NoError(t, err)
	require.Len(t, nodes, size)
	ids := map[string]string{}
	for _, n := range nodes {
		require.NotEmpty(t, n.Spec.ProviderID, n.Name)
		other, dup := ids[n.Spec.ProviderID]
		require.False(t, dup, "providerID %s on %s and %s", n.Spec.ProviderID, n.Name, other)
		ids[n.Spec.ProviderID] = n.Name
	}
	assert.ElementsMatch(t, nodeNames(t, namespace, name), machines(), "the driver's machines are exactly the Nodes")
}

// TestCrashSequenceSimulated runs the crash sequence with the simulated driver.
func TestCrashSequenceSimulated(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "crash-sim")
	createClass(t, "crash-seq-sim", nil)
	createSet(t, ns, "seq", "crash-seq-sim", 0)
	crashSequence(t, c, ns, "seq", func() []string {
		all, ok := c.machines(context.Background())
		require.True(t, ok)
		var names []string
		for name := range setMachines(all, ns, "seq") {
			names = append(names, name)
		}
		return sortedStrings(names)
	})
}

// TestCrashSequenceDockerMachine runs it with the docker-machine driver: its
// machines (plugin files) and records survive the node controller, so a
// crash can really leak or double one.
func TestCrashSequenceDockerMachine(t *testing.T) {
	c := startControllers(t)
	sshd, err := framework.StartSSHD(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(sshd.Stop)
	ns := createNamespace(t, "crash-dm")
	machineDir, _ := dockerMachineClass(t, "crash-seq-dm", sshd)
	createSet(t, ns, "dmseq", "crash-seq-dm", 0)
	crashSequence(t, c, ns, "dmseq", func() []string { return pluginMachines(t, machineDir) })
	kube, _ := clients(t)
	tokens, err := kube.CoreV1().Secrets(metav1.NamespaceSystem).List(context.Background(), metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
	require.NoError(t, err)
	assert.Empty(t, tokens.Items, "no bootstrap token outlives its machine")
}

func sortedStrings(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}
