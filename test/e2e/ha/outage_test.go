package ha

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/test/framework"
)

// TestAPIServerAndEtcdOutages stops kube-apiserver during a scale-up and
// during a drain, and etcd during a scale-up, each for longer than the
// controllers' lease (they exit and are restarted, as in a cluster). The set
// converges each time, and the audit log shows that no Node was created or
// deleted beyond what the scale asked for: nothing was removed because the
// API was away.
func TestAPIServerAndEtcdOutages(t *testing.T) {
	ctx := context.Background()
	cp := framework.Shared(t)
	c, kube, cs := startSupervised(t, cp)
	restarts := func() int { return c.NodeSet.Restarts() + c.Node.Restarts() }
	var err error

	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "outage"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "outage-sim"},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{
				InstanceType: "sim.small", BootDelay: &metav1.Duration{Duration: 2 * time.Second}}},
			Drain: &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 20 * time.Second}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.NodesetV1alpha1().NodeSets("outage").Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "outage"},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "outage-sim", Replicas: ptr.To[int32](0)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// outage stops a control-plane process for longer than the lease.
	var back time.Time
	outage := func(component string) {
		t.Helper()
		require.NoError(t, cp.StopComponent(component))
		// The outage's length is what is tested: longer than the lease, so
		// the leaders lose it and exit while nothing answers.
		time.Sleep(2 * leaseDuration)
		startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		require.NoError(t, cp.StartComponent(startCtx, component))
		back = time.Now()
	}
	// nodeWrites counts the controllers' creates and deletes of Nodes
	// since a moment: those that succeeded, and those whose outcome the
	// API server could not know (a 5xx: etcd went away with the request
	// in flight, and it may have been stored all the same).
	type counts struct{ created, creates5xx, deleted, deletes5xx int }
	nodeWrites := func(since time.Time) counts {
		require.NoError(t, cp.SyncAuditLog(ctx))
		var n counts
		for _, e := range writes(t, "", since) {
			if e.ObjectRef.Resource != "nodes" || e.ObjectRef.Subresource != "" || e.ResponseStatus == nil {
				continue
			}
			if e.User.Username != "nodeset-controller" && e.User.Username != "node-controller" {
				continue
			}
			unknown := e.ResponseStatus.Code >= 500
			switch {
			case e.Verb == "create" && e.Succeeded():
				n.created++
			case e.Verb == "create" && unknown:
				n.creates5xx++
			case e.Verb == "delete" && e.Succeeded():
				n.deleted++
			case e.Verb == "delete" && unknown:
				n.deletes5xx++
			}
		}
		return n
	}
	// writesTookEffect: want of the writes took effect (the converged
	// Nodes say so); the audit log must agree: no more succeeded than
	// that, and, where the log is complete, with those of unknown outcome,
	// enough. It is not complete across a kube-apiserver SIGKILL: a write
	// in flight may reach etcd while its audit event dies with the
	// process. None wanted means none tried.
	writesTookEffect := func(what string, want, succeeded, unknown int, logComplete bool) {
		t.Helper()
		if want == 0 {
			assert.Zero(t, succeeded+unknown, "%s: none wanted, %d succeeded and %d of unknown outcome (5xx) in the audit log", what, succeeded, unknown)
			return
		}
		assert.True(t, succeeded <= want && (!logComplete || want <= succeeded+unknown),
			"%s: %d wanted, %d succeeded and %d of unknown outcome (5xx) in the audit log", what, want, succeeded, unknown)
		if succeeded+unknown < want {
			t.Logf("%s: %d of %d writes are not in the audit log: in flight when kube-apiserver was killed", what, want-succeeded-unknown, want)
		}
	}
	converge := func(n int) {
		t.Helper()
		eventually(t, 3*time.Minute, fmt.Sprintf("%d Ready nodes backed by %d machines", n, n), func(ctx context.Context) (bool, string) {
			if ok, why := readyNodes(ctx, kube, "outage", "web", n); !ok {
				return false, why
			}
			machines, ok := c.Machines(ctx)
			if !ok {
				return false, "node controller not answering"
			}
			names := nodeNames(ctx, kube)
			var mine []string
			for _, m := range machines {
				mine = append(mine, m.Name)
			}
			sort.Strings(mine)
			return fmt.Sprint(mine) == fmt.Sprint(names), fmt.Sprintf("machines %v, nodes %v", mine, names)
		})
		t.Logf("%d Ready nodes, each with its machine, %v after the API server answered again", n, time.Since(back).Round(100*time.Millisecond))
	}

	// 1. kube-apiserver goes away while 8 machines boot.
	mark := time.Now()
	scale(t, cs, "outage", "web", 8)
	inFlight(t, kube, "outage", "web", 0, 8)
	outage("kube-apiserver")
	converge(8)
	w := nodeWrites(mark)
	writesTookEffect("each Node created once across the outage", 8, w.created, w.creates5xx, false)
	writesTookEffect("no Node deleted during a scale-up", 0, w.deleted, w.deletes5xx, false)

	// 2. kube-apiserver goes away while 5 Nodes drain behind a budget that
	// allows no eviction; they are deprovisioned at the drain timeout.
	names := nodeNames(ctx, kube)
	guard(t, kube, "outage", "guard", names)
	mark = time.Now()
	scale(t, cs, "outage", "web", 3)
	eventually(t, time.Minute, "drains under way", func(ctx context.Context) (bool, string) {
		list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		draining := 0
		for _, n := range list.Items {
			if n.DeletionTimestamp != nil && n.Spec.Unschedulable {
				draining++
			}
		}
		return draining == 5, fmt.Sprintf("%d cordoned and terminating", draining)
	})
	outage("kube-apiserver")
	converge(3)
	w = nodeWrites(mark)
	writesTookEffect("no Node created during a scale-down", 0, w.created, w.creates5xx, false)
	writesTookEffect("exactly the 5 Nodes the scale-down chose were deleted", 5, w.deleted, w.deletes5xx, false)
	kept := nodeNames(ctx, kube)
	for _, n := range kept {
		assert.Contains(t, names, n, "the remaining Nodes are the ones that were there")
	}

	// 3. etcd goes away while 4 more machines boot.
	mark = time.Now()
	scale(t, cs, "outage", "web", 7)
	inFlight(t, kube, "outage", "web", 3, 7)
	outage("etcd")
	converge(7)
	w = nodeWrites(mark)
	writesTookEffect("each Node created once across the etcd outage", 4, w.created, w.creates5xx, true)
	writesTookEffect("no Node deleted during a scale-up", 0, w.deleted, w.deletes5xx, true)

	scale(t, cs, "outage", "web", 0)
	require.NoError(t, kube.PolicyV1().PodDisruptionBudgets("outage").Delete(ctx, "guard", metav1.DeleteOptions{}))
	converge(0)
	t.Logf("converged after 3 outages of %v each; controllers restarted %d times", 2*leaseDuration, restarts())
}

func nodeNames(ctx context.Context, kube kubernetes.Interface) []string {
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodesetv1alpha1.LabelNodeSet + "=web," + nodesetv1alpha1.LabelNodeSetNamespace + "=outage"})
	if err != nil {
		return nil
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	return names
}

// guard runs a Running, Ready pod on each node behind one budget, named
// budget, that allows no disruption (its status written as the disruption
// controller would).
func guard(t *testing.T, kube kubernetes.Interface, namespace, budget string, nodes []string) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": budget}
	for _, node := range nodes {
		pod, err := kube.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: budget + "-" + node, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:                      node,
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
				Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		_, err = kube.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	pdb, err := kube.PolicyV1().PodDisruptionBudgets(namespace).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: budget},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(int32(len(nodes)))),
			Selector:     &metav1.LabelSelector{MatchLabels: labels},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	// kube-controller-manager's disruption controller computes the same
	// status (every pod needed, none may go); written here too so that the
	// budget holds from the first eviction, with a fresh read when that
	// controller wrote first.
	n := int32(len(nodes))
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pdb, err := kube.PolicyV1().PodDisruptionBudgets(namespace).Get(ctx, pdb.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation,
			CurrentHealthy: n, DesiredHealthy: n, ExpectedPods: n, DisruptionsAllowed: 0}
		_, err = kube.PolicyV1().PodDisruptionBudgets(namespace).UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err)
}

// startSupervised starts both controllers, supervised
// (framework.NewControllers: restarted when they exit, as in a cluster),
// waits until they are ready and stops them when the test ends, logging the
// tail of their logs when it failed. It returns them and admin clients.
func startSupervised(t *testing.T, cp *framework.ControlPlane) (*framework.Controllers, kubernetes.Interface, versioned.Interface) {
	t.Helper()
	ctx := context.Background()
	c, err := framework.NewControllers(ctx, cp, framework.ControllerOptions{})
	require.NoError(t, err)
	require.NoError(t, c.Start())
	framework.FailOnCrash(t, c.NodeSet, c.Node)
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, p := range []*framework.Process{c.NodeSet, c.Node} {
				t.Logf("%s:\n%s", p.Name, tailLines(p.Logs(), 40))
			}
		}
	})
	require.NoError(t, c.WaitReady(ctx))
	return c, kubernetes.NewForConfigOrDie(cp.AdminConfig()), versioned.NewForConfigOrDie(cp.AdminConfig())
}

func tailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
