package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	nodesetcontroller "nodeset.dev/nodeset/pkg/controller/nodeset"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
	"nodeset.dev/nodeset/test/framework"
)

func createNamespace(t *testing.T, name string) string {
	t.Helper()
	kube, _ := clients(t)
	_, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// Pods are admitted once the namespace has its default ServiceAccount.
	require.NoError(t, framework.WaitForDefaultServiceAccount(context.Background(), kube, name))
	return name
}

func createClass(t *testing.T, name string, mutate func(*nodesetv1alpha1.NodeClass)) {
	t.Helper()
	_, cs := clients(t)
	class := &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{
				InstanceType: "sim.small",
				BootDelay:    &metav1.Duration{Duration: 200 * time.Millisecond},
			}},
			RegistrationTimeout: &metav1.Duration{Duration: time.Minute},
			Drain:               &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 20 * time.Second}},
		},
	}
	if mutate != nil {
		mutate(class)
	}
	_, err := cs.NodesetV1alpha1().NodeClasses().Create(context.Background(), class, metav1.CreateOptions{})
	require.NoError(t, err)
}

// waitClassValid waits until the node controller judged the class Valid.
func waitClassValid(t *testing.T, name string) {
	t.Helper()
	_, cs := clients(t)
	eventually(t, time.Minute, "NodeClass "+name+" Valid", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
		return cond != nil && cond.Status == metav1.ConditionTrue, fmt.Sprintf("Valid: %+v", cond)
	})
}

func createSet(t *testing.T, namespace, name, class string, replicas int32) *nodesetv1alpha1.NodeSet {
	t.Helper()
	_, cs := clients(t)
	set, err := cs.NodesetV1alpha1().NodeSets(namespace).Create(context.Background(), &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: nodesetv1alpha1.NodeSetSpec{
			NodeClassName: class,
			Replicas:      ptr.To(replicas),
			Template:      nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"example.com/set": name}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return set
}

func scale(t *testing.T, namespace, name string, replicas int32) {
	t.Helper()
	_, cs := clients(t)
	require.NoError(t, framework.Scale(context.Background(), cs, namespace, name, replicas))
}

func setNodes(ctx context.Context, t *testing.T, namespace, name string) ([]corev1.Node, error) {
	kube, _ := clients(t)
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: resolve.Selector(&nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}).String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// setMachines are the simulated machines the set owns.
func setMachines(all []framework.Machine, namespace, setName string) map[string]framework.Machine {
	out := map[string]framework.Machine{}
	for _, m := range all {
		// By owner: other tests' sets may have the same name.
		if m.Namespace == namespace && m.NodeSet == setName {
			out[m.Name] = m
		}
	}
	return out
}

// converged reports whether the set has exactly n Nodes, all Ready, untainted
// and backed by exactly the n machines of the set, and its status says so.
func converged(c *controllers, t *testing.T, namespace, name string, n int) func(ctx context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, namespace, name)
		if err != nil {
			return false, err.Error()
		}
		all, ok := c.machines(ctx)
		if !ok {
			return false, "node controller not answering /debug/machines"
		}
		machines := setMachines(all, namespace, name)
		if len(nodes) != n || len(machines) != n {
			return false, fmt.Sprintf("%d nodes and %d machines, want %d", len(nodes), len(machines), n)
		}
		for i := range nodes {
			node := &nodes[i]
			m, ok := machines[node.Name]
			switch {
			case node.DeletionTimestamp != nil:
				return false, node.Name + " is terminating"
			case !ok:
				return false, node.Name + " has no machine"
			case node.Spec.ProviderID == "" || node.Spec.ProviderID != m.ProviderID:
				return false, fmt.Sprintf("%s providerID %q, machine %q", node.Name, node.Spec.ProviderID, m.ProviderID)
			case !nodeutil.IsReady(node):
				return false, node.Name + " not Ready"
			case nodeutil.HasStartupTaint(node):
				return false, node.Name + " still has the startup taint"
			}
		}
		_, cs := clients(t)
		set, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if set.Status.ReadyReplicas != int32(n) || set.Status.Replicas != int32(n) || set.Status.ObservedGeneration != set.Generation {
			return false, fmt.Sprintf("status replicas=%d ready=%d observedGeneration=%d/%d",
				set.Status.Replicas, set.Status.ReadyReplicas, set.Status.ObservedGeneration, set.Generation)
		}
		return true, ""
	}
}

func TestScaleConverges(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "scale")
	createClass(t, "scale-sim", nil)
	createSet(t, ns, "scaler", "scale-sim", 0)
	eventually(t, time.Minute, "0 nodes", converged(c, t, ns, "scaler", 0))

	scale(t, ns, "scaler", 5)
	eventually(t, 2*time.Minute, "scale to 5", converged(c, t, ns, "scaler", 5))

	nodes, err := setNodes(context.Background(), t, ns, "scaler")
	require.NoError(t, err)
	for _, node := range nodes {
		assert.Equal(t, "scale-sim", node.Labels[nodesetv1alpha1.LabelNodeClass])
		assert.Equal(t, "scaler", node.Labels["example.com/set"])
		assert.Contains(t, node.Finalizers, nodesetv1alpha1.FinalizerTermination)
		assert.True(t, strings.HasPrefix(node.Name, "scaler-"))
	}

	// kubectl scale, as a tenant would type it.
	cmd := exec.Command(framework.Shared(t).Kubectl(), "scale", "-n", ns, "nodeset/scaler", "--replicas=2")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+framework.Shared(t).KubeconfigPath)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	eventually(t, 2*time.Minute, "scale to 2", converged(c, t, ns, "scaler", 2))

	scale(t, ns, "scaler", 0)
	eventually(t, 2*time.Minute, "scale to 0", converged(c, t, ns, "scaler", 0))
}

func TestDeletedNodeIsDrainedDeprovisionedAndReplaced(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "replace")
	createClass(t, "replace-sim", nil)
	createSet(t, ns, "replacer", "replace-sim", 2)
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "replacer", 2))

	nodes, err := setNodes(ctx, t, ns, "replacer")
	require.NoError(t, err)
	victim := nodes[0].Name
	pod := runPod(t, ns, "on-victim", victim, nil)

	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "victim gone with its machine", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, "node still exists"
		}
		all, ok := c.machines(ctx)
		if !ok {
			return false, "node controller not answering"
		}
		if _, has := setMachines(all, ns, "replacer")[victim]; has {
			return false, "machine still exists"
		}
		return true, ""
	})
	// The drain evicted the pod and waited for it to be gone before the
	// machine went: it is gone by now, not merely terminating.
	_, err = kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the pod on the node was evicted: %v", err)
	reasons := eventuallyEvent(t, victim, nodecontroller.ReasonDrained)
	assert.NotContains(t, reasons, nodecontroller.ReasonDrainTimedOut, "the drain finished without waiting out its timeout")
	eventually(t, 2*time.Minute, "replaced", converged(c, t, ns, "replacer", 2))
	nodes, err = setNodes(ctx, t, ns, "replacer")
	require.NoError(t, err)
	for _, n := range nodes {
		assert.NotEqual(t, victim, n.Name)
	}
}

func TestNodeSetDeletionRemovesEverything(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "teardown")
	createClass(t, "teardown-sim", nil)
	createSet(t, ns, "doomed", "teardown-sim", 3)
	eventually(t, 2*time.Minute, "3 nodes", converged(c, t, ns, "doomed", 3))
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "doomed", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "everything gone", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "doomed")
		if err != nil || len(nodes) > 0 {
			return false, fmt.Sprintf("%d nodes left (%v)", len(nodes), err)
		}
		all, ok := c.machines(ctx)
		if !ok || len(setMachines(all, ns, "doomed")) > 0 {
			return false, "machines left"
		}
		_, err = cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "doomed", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, "NodeSet still exists"
		}
		return true, ""
	})
}

// TestADeletedNodeSetCountsItsNodesDown: while a deleted NodeSet's Nodes
// drain, its status counts the Nodes not yet deleted, and Progressing
// says it is being deleted, as kubectl get nds shows it. A budget holds
// one Node's drain, so that the set stays deleting long enough to be read.
func TestADeletedNodeSetCountsItsNodesDown(t *testing.T) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "countdown")
	createClass(t, "countdown-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Drain = &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 10 * time.Minute}}
	})
	createSet(t, ns, "going", "countdown-sim", 2)
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "going", 2))
	nodes, err := setNodes(ctx, t, ns, "going")
	require.NoError(t, err)
	pod := guardedPod(t, ns, "held", nodes[0].Name, "hold")
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "going", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "the status counting the held Node", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "going", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		progressing := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetProgressing)
		if progressing == nil {
			return false, "no Progressing condition"
		}
		return set.Status.Replicas == 0 && set.Status.ReadyReplicas == 0 && progressing.Reason == nodesetcontroller.ReasonDeleting &&
				progressing.Message == "the NodeSet is being deleted; nodes left: 1, terminating: 1",
			fmt.Sprintf("replicas %d, ready %d, Progressing %s: %s", set.Status.Replicas, set.Status.ReadyReplicas, progressing.Reason, progressing.Message)
	})
	// Released: the pod goes at once, as a kubelet would let it.
	require.NoError(t, kube.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "hold", metav1.DeleteOptions{}))
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	eventually(t, 2*time.Minute, "the NodeSet gone", func(ctx context.Context) (bool, string) {
		_, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "going", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func TestUnregisteredMachineIsReplaced(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	ns := createNamespace(t, "unregistered")
	createClass(t, "never-ready", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Simulated.FailurePercent = ptr.To[int32](100)
		class.Spec.RegistrationTimeout = &metav1.Duration{Duration: 2 * time.Second}
	})
	createSet(t, ns, "flaky", "never-ready", 1)
	seen := map[string]bool{}
	eventually(t, 2*time.Minute, "three successive replacements", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "flaky")
		if err != nil {
			return false, err.Error()
		}
		for _, n := range nodes {
			assert.False(t, nodeutil.IsReady(&n), "a failing machine never registers")
			seen[n.Name] = true
		}
		if all, ok := c.machines(ctx); ok {
			// At most the current machine and the one being deprovisioned.
			assert.LessOrEqual(t, len(setMachines(all, ns, "flaky")), 2, "replaced machines must not pile up")
		}
		return len(seen) >= 3, fmt.Sprintf("saw %d distinct nodes", len(seen))
	})
	kube, _ := clients(t)
	events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=RegistrationTimeout"})
	require.NoError(t, err)
	assert.NotEmpty(t, events.Items, "a RegistrationTimeout event explains each replacement")
	// Told on the NodeSet too, whose tenant may not read the Node's Events.
	eventuallyEventOn(t, kube, "flaky", nodecontroller.ReasonRegistrationTimeout, "The machine did not register within 2s; replacing it")
	scale(t, ns, "flaky", 0)
	eventually(t, time.Minute, "scaled to 0", converged(c, t, ns, "flaky", 0))
}

func TestDrainBlockedByPDBGivesUpAtTimeout(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "pdb")
	const drainTimeout = 4 * time.Second
	createClass(t, "pdb-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Drain = &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: drainTimeout}}
	})
	createSet(t, ns, "guarded", "pdb-sim", 1)
	eventually(t, 2*time.Minute, "1 node", converged(c, t, ns, "guarded", 1))
	nodes, err := setNodes(ctx, t, ns, "guarded")
	require.NoError(t, err)
	node := nodes[0].Name
	pod := guardedPod(t, ns, "guarded-pod", node, "guard")
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}))
	var drainStarted time.Time
	eventually(t, time.Minute, "drain started and cordoned", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		started := n.Annotations["nodeset.dev/drain-started"]
		if started == "" || !n.Spec.Unschedulable {
			return false, "not cordoned or no drain-started annotation"
		}
		drainStarted, err = time.Parse(time.RFC3339, started)
		return err == nil, fmt.Sprint(err)
	})
	// The PodDisruptionBudget holds the pod while the node waits.
	_, err = kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err, "the PDB must keep the pod from being evicted")

	eventually(t, time.Minute, "node deprovisioned after the drain timeout", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			return false, fmt.Sprintf("node still exists: annotations %v, finalizers %v", n.Annotations, n.Finalizers)
		}
		return apierrors.IsNotFound(err), err.Error()
	})
	// RFC3339 has second precision: allow one second.
	assert.GreaterOrEqual(t, time.Since(drainStarted), drainTimeout-time.Second, "the node went before its drain timeout")
	eventuallyEvent(t, node, nodecontroller.ReasonDrainTimedOut)
	// The budget, not an error, held the pod.
	eventuallyEvent(t, node, nodecontroller.ReasonEvictionBlocked)
	eventually(t, 2*time.Minute, "replacement ready", converged(c, t, ns, "guarded", 1))
}

func TestStaticAndForeignNodes(t *testing.T) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	createClass(t, "static-sim", nil)
	_, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: "example.com-metal",
			Parameters: &runtime.RawExtension{Raw: []byte(`{"rack":"a1"}`)}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	mkNode := func(name string, labels map[string]string) {
		_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	mkNode("foreign-unserved", map[string]string{nodesetv1alpha1.LabelNodeClass: "elsewhere"})
	mkNode("foreign-plain", map[string]string{"kubernetes.io/hostname": "foreign-plain"})
	mkNode("static-one", map[string]string{nodesetv1alpha1.LabelNodeClass: "static-sim"})

	eventually(t, 2*time.Minute, "the admin's lone node gets a machine", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, "static-one", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if n.Spec.ProviderID == "" || !nodeutil.IsReady(n) || nodeutil.HasStartupTaint(n) {
			return false, fmt.Sprintf("providerID=%q ready=%v", n.Spec.ProviderID, nodeutil.IsReady(n))
		}
		all, ok := c.machines(ctx)
		if !ok {
			return false, "node controller not answering"
		}
		for _, m := range all {
			if m.Name == "static-one" {
				return true, ""
			}
		}
		return false, "no machine named static-one"
	})
	// By now the node controller has synced all three; the other two are untouched.
	for _, name := range []string{"foreign-unserved", "foreign-plain"} {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Empty(t, n.Finalizers, name)
		assert.Empty(t, n.Spec.ProviderID, name)
		assert.Empty(t, n.Status.Conditions, name)
	}
	all, _ := c.machines(ctx)
	for _, m := range all {
		assert.NotContains(t, []string{"foreign-unserved", "foreign-plain"}, m.Name)
	}

	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, "static-one", metav1.DeleteOptions{}))
	eventually(t, time.Minute, "static node and machine gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, "static-one", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, "node still exists"
		}
		all, ok := c.machines(ctx)
		for _, m := range all {
			if m.Name == "static-one" {
				return false, "machine still exists"
			}
		}
		return ok, "node controller not answering"
	})
	for _, name := range []string{"foreign-unserved", "foreign-plain"} {
		require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
	}
}

// TestRestartDuringScaleUp kills both controllers with SIGKILL again and
// again while a NodeSet scales up, and checks that exactly replicas Nodes and
// machines exist at the end, with no orphan machine.
func TestRestartDuringScaleUp(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	ns := createNamespace(t, "crash")
	createClass(t, "crash-sim", nil)
	createSet(t, ns, "crashy", "crash-sim", 0)
	const replicas = 30
	scale(t, ns, "crashy", replicas)
	for i := range 6 {
		// Kill at different points of the scale-up: right away, then as nodes appear.
		target := c.nodeset
		if i%2 == 1 {
			target = c.node
		}
		eventually(t, time.Minute, "progress before the next kill", func(ctx context.Context) (bool, string) {
			nodes, err := setNodes(ctx, t, ns, "crashy")
			return err == nil && len(nodes) >= i*replicas/8, fmt.Sprintf("%d nodes", len(nodes))
		})
		c.restart(t, target, syscall.SIGKILL)
	}
	c.restart(t, c.nodeset, syscall.SIGKILL)
	c.restart(t, c.node, syscall.SIGKILL)
	eventually(t, 3*time.Minute, "exactly 30 nodes and machines", converged(c, t, ns, "crashy", replicas))

	// No orphans anywhere: every machine has its Node.
	kube, _ := clients(t)
	all, ok := c.machines(ctx)
	require.True(t, ok)
	var orphans []string
	for _, m := range all {
		if _, err := kube.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			orphans = append(orphans, m.Name)
		}
	}
	sort.Strings(orphans)
	assert.Empty(t, orphans, "machines without a Node")
	scale(t, ns, "crashy", 0)
	eventually(t, 3*time.Minute, "scaled to 0", converged(c, t, ns, "crashy", 0))
}

// runPod creates a pod bound to node (no scheduler involved) and returns its name.
// eventuallyEvent waits for an Event with reason about the named object and
// returns the reasons of all its Events.
func eventuallyEvent(t *testing.T, name, reason string) []string {
	t.Helper()
	kube, _ := clients(t)
	var reasons []string
	eventually(t, time.Minute, "a "+reason+" event for "+name, func(ctx context.Context) (bool, string) {
		events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err.Error()
		}
		reasons = reasons[:0]
		for _, e := range events.Items {
			reasons = append(reasons, e.Reason)
		}
		return slices.Contains(reasons, reason), fmt.Sprintf("events %v", reasons)
	})
	return reasons
}

// guardedPod runs a Running, Ready pod on node behind a PodDisruptionBudget
// that allows no disruption, as the disruption controller would compute it:
// a drain of node waits for it until the budget is deleted.
func guardedPod(t *testing.T, namespace, name, node, budget string) string {
	t.Helper()
	ctx := context.Background()
	kube, _ := clients(t)
	labels := map[string]string{"guarded-by": budget}
	pod := runPod(t, namespace, name, node, labels)
	// The Eviction API lets Pending pods go regardless of budgets: make this
	// one Running and Ready, as a kubelet would.
	running, err := kube.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	running.Status.Phase = corev1.PodRunning
	running.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	_, err = kube.CoreV1().Pods(namespace).UpdateStatus(ctx, running, metav1.UpdateOptions{})
	require.NoError(t, err)
	pdb, err := kube.PolicyV1().PodDisruptionBudgets(namespace).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: budget},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: labels},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	setBudgetStatus(t, namespace, pdb.Name, 1, 0)
	return pod
}

// setBudgetStatus writes the status kube-controller-manager's disruption
// controller computes for a budget (healthy pods, disruptions allowed) at
// its current generation, so that it holds from the first eviction. That
// controller writes it too: each write reads the budget afresh.
func setBudgetStatus(t *testing.T, namespace, name string, healthy, allowed int32) {
	t.Helper()
	kube, _ := clients(t)
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pdb, err := kube.PolicyV1().PodDisruptionBudgets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		desired := healthy - allowed
		pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation,
			CurrentHealthy: healthy, DesiredHealthy: desired, ExpectedPods: healthy, DisruptionsAllowed: allowed}
		_, err = kube.PolicyV1().PodDisruptionBudgets(namespace).UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err)
}

// runPod puts a pod on node as the scheduler does (created unscheduled,
// for a scheduler none serves, then bound through pods/binding),
// tolerating every NoExecute taint (the taints of a Node whose kubelet is
// simulated) but not the cordon's: an ordinary pod, which a drain evicts
// and waits for also when it came after the drain's start (a pod that
// tolerates the cordon, or whose creator named the Node, is taken for one
// its controller put on the cordoned Node).
func runPod(t *testing.T, namespace, name, node string, labels map[string]string) string {
	t.Helper()
	bindPod(t, namespace, name, node, labels)
	return name
}

// bindPod creates an unscheduled pod and binds it to node as a scheduler
// would: its spec.nodeName is set by the binding, not by its creator.
func bindPod(t *testing.T, namespace, name, node string, labels map[string]string) {
	t.Helper()
	kube, _ := clients(t)
	ctx := context.Background()
	_, err := kube.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			SchedulerName:                 "no-scheduler",
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().Pods(namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{}))
}
