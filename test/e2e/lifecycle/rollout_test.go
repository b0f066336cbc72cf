package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
)

// fleetWatcher follows a NodeSet's Nodes through a watch and checks, after
// every event, that there are never more than maxTotal Nodes (terminating
// ones included: their machines still exist) and never fewer than minReady
// Ready Nodes that are not terminating.
type fleetWatcher struct {
	maxTotal, minReady int

	mu                   sync.Mutex
	nodes                map[string]*corev1.Node
	events               int
	violations           []string
	highest, lowestReady int
	stop                 func()
	done                 chan struct{}
}

func watchFleet(t *testing.T, namespace, name string, maxTotal, minReady int) *fleetWatcher {
	t.Helper()
	return watchNodes(t, resolve.Selector(&nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}).String(), maxTotal, minReady)
}

// watchNodes is watchFleet for the Nodes a label selector selects.
func watchNodes(t *testing.T, selector string, maxTotal, minReady int) *fleetWatcher {
	t.Helper()
	kube, _ := clients(t)
	ctx, cancel := context.WithCancel(context.Background())
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	w, err := kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	fw := &fleetWatcher{maxTotal: maxTotal, minReady: minReady, nodes: map[string]*corev1.Node{},
		lowestReady: 1 << 30, stop: cancel, done: make(chan struct{})}
	for i := range list.Items {
		fw.nodes[list.Items[i].Name] = &list.Items[i]
	}
	fw.check("initial list")
	go func() {
		defer close(fw.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					fw.mu.Lock()
					fw.violations = append(fw.violations, "the watch ended early")
					fw.mu.Unlock()
					return
				}
				node, isNode := ev.Object.(*corev1.Node)
				if !isNode {
					continue
				}
				fw.mu.Lock()
				if ev.Type == watch.Deleted {
					delete(fw.nodes, node.Name)
				} else {
					fw.nodes[node.Name] = node
				}
				fw.events++
				fw.mu.Unlock()
				fw.check(fmt.Sprintf("%s %s", ev.Type, node.Name))
			}
		}
	}()
	t.Cleanup(fw.close)
	return fw
}

func (fw *fleetWatcher) check(after string) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	ready := 0
	for _, n := range fw.nodes {
		if n.DeletionTimestamp == nil && nodeutil.IsReady(n) {
			ready++
		}
	}
	fw.highest = max(fw.highest, len(fw.nodes))
	fw.lowestReady = min(fw.lowestReady, ready)
	if len(fw.nodes) > fw.maxTotal {
		fw.violations = append(fw.violations, fmt.Sprintf("after %s: %d nodes, at most %d allowed", after, len(fw.nodes), fw.maxTotal))
	}
	if ready < fw.minReady {
		fw.violations = append(fw.violations, fmt.Sprintf("after %s: %d Ready nodes, at least %d required", after, ready, fw.minReady))
	}
}

func (fw *fleetWatcher) close() {
	fw.stop()
	<-fw.done
}

// assertHeld stops the watcher and fails the test on any violation.
func (fw *fleetWatcher) assertHeld(t *testing.T) {
	t.Helper()
	fw.close()
	fw.mu.Lock()
	defer fw.mu.Unlock()
	assert.Empty(t, fw.violations, "the rollout's bounds held")
	t.Logf("watched %d events: at most %d nodes, at least %d Ready", fw.events, fw.highest, fw.lowestReady)
}

func createRollingSet(t *testing.T, namespace, name, class string, replicas int32, surge, unavailable intstr.IntOrString) {
	t.Helper()
	_, cs := clients(t)
	_, err := cs.NodesetV1alpha1().NodeSets(namespace).Create(context.Background(), &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: nodesetv1alpha1.NodeSetSpec{
			NodeClassName: class,
			Replicas:      ptr.To(replicas),
			Template:      nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"example.com/version": "1"}},
			Strategy: nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.RollingUpdateStrategy,
				RollingUpdate: &nodesetv1alpha1.RollingUpdateNodeSet{MaxSurge: &surge, MaxUnavailable: &unavailable}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// updateSet changes a NodeSet, retrying on conflicts.
func updateSet(t *testing.T, namespace, name string, mutate func(*nodesetv1alpha1.NodeSet)) {
	t.Helper()
	_, cs := clients(t)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		set, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(set)
		_, err = cs.NodesetV1alpha1().NodeSets(namespace).Update(context.Background(), set, metav1.UpdateOptions{})
		return err
	}))
}

func setVersion(version string) func(*nodesetv1alpha1.NodeSet) {
	return func(s *nodesetv1alpha1.NodeSet) { s.Spec.Template.Labels["example.com/version"] = version }
}

// rolledOut waits until every Node of the set, terminating ones included,
// carries the set's current template hash and there are replicas of them,
// all Ready, with as many machines.
func rolledOut(c *controllers, t *testing.T, namespace, name string, replicas int) func(ctx context.Context) (bool, string) {
	_, cs := clients(t)
	return func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if set.Status.ObservedGeneration != set.Generation {
			return false, "status not observed yet"
		}
		ok, why := converged(c, t, namespace, name, replicas)(ctx)
		if !ok {
			return false, why
		}
		nodes, err := setNodes(ctx, t, namespace, name)
		if err != nil {
			return false, err.Error()
		}
		for _, n := range nodes {
			if n.Labels[nodesetv1alpha1.LabelTemplateHash] != set.Status.TemplateHash {
				return false, fmt.Sprintf("node %s has template %s, current %s", n.Name, n.Labels[nodesetv1alpha1.LabelTemplateHash], set.Status.TemplateHash)
			}
		}
		return set.Status.UpdatedReplicas == int32(replicas), fmt.Sprintf("%d updated", set.Status.UpdatedReplicas)
	}
}

func nodeNames(t *testing.T, namespace, name string) []string {
	t.Helper()
	nodes, err := setNodes(context.Background(), t, namespace, name)
	require.NoError(t, err)
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	return names
}

// untouched asserts that the set's Nodes are still before, none of them
// terminating: nothing was created, replaced or deleted.
func untouched(t *testing.T, namespace, name string, before []string, msg string) {
	t.Helper()
	nodes, err := setNodes(context.Background(), t, namespace, name)
	require.NoError(t, err)
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
		assert.Nil(t, n.DeletionTimestamp, "%s: %s is being deleted", msg, n.Name)
	}
	sort.Strings(names)
	assert.Equal(t, before, names, msg)
}

func progressing(t *testing.T, namespace, name string) metav1.Condition {
	t.Helper()
	_, cs := clients(t)
	set, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	for _, c := range set.Status.Conditions {
		if c.Type == nodesetv1alpha1.NodeSetProgressing {
			return c
		}
	}
	return metav1.Condition{}
}

// observed waits until the controller has seen the set's latest generation.
func observed(t *testing.T, namespace, name string) func(ctx context.Context) (bool, string) {
	_, cs := clients(t)
	return func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return set.Status.ObservedGeneration == set.Generation, fmt.Sprintf("observed %d of %d", set.Status.ObservedGeneration, set.Generation)
	}
}

// TestRollingUpdateBounds changes the template of a NodeSet of 6 twice: with
// maxSurge 1 and maxUnavailable 0, then with maxUnavailable 2, while a
// watcher checks the bounds after every event.
func TestRollingUpdateBounds(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "roll")
	createClass(t, "roll-sim", nil)
	createRollingSet(t, ns, "web", "roll-sim", 6, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "6 nodes", rolledOut(c, t, ns, "web", 6))
	before := nodeNames(t, ns, "web")

	w := watchFleet(t, ns, "web", 7, 6)
	start := time.Now()
	updateSet(t, ns, "web", setVersion("2"))
	eventually(t, 5*time.Minute, "rolled out with surge 1", rolledOut(c, t, ns, "web", 6))
	slow := time.Since(start)
	w.assertHeld(t)
	assert.Equal(t, 7, w.highest, "the surge was used")
	for _, name := range nodeNames(t, ns, "web") {
		assert.NotContains(t, before, name, "every node was replaced")
	}
	// Status follows the Nodes within the node-event batch period.
	eventually(t, 30*time.Second, "Progressing Complete", func(context.Context) (bool, string) {
		reason := progressing(t, ns, "web").Reason
		return reason == ReasonComplete, reason
	})
	reasons := eventuallyEvent(t, "web", "ReplacingOutdatedNode")
	assert.Contains(t, reasons, "ReplacingOutdatedNode")

	updateSet(t, ns, "web", func(s *nodesetv1alpha1.NodeSet) {
		setVersion("3")(s)
		s.Spec.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(2))
	})
	w = watchFleet(t, ns, "web", 7, 4)
	start = time.Now()
	eventually(t, 5*time.Minute, "rolled out with maxUnavailable 2", rolledOut(c, t, ns, "web", 6))
	fast := time.Since(start)
	w.assertHeld(t)
	assert.Less(t, w.lowestReady, 6, "maxUnavailable was used")
	t.Logf("rollout of 6 nodes: %s with maxSurge 1, maxUnavailable 0; %s with maxUnavailable 2", slow.Round(time.Millisecond), fast.Round(time.Millisecond))
	assert.Less(t, fast, slow, "a larger maxUnavailable rolls faster")
}

// ReasonComplete mirrors the NodeSetController's reason.
const ReasonComplete = "Complete"

// TestRolloutWaitsForDisruptionBudget: the old node's pod is guarded by a
// budget that allows no disruption, so its drain waits; once the budget
// allows it the node goes, well before the drain timeout.
func TestRolloutWaitsForDisruptionBudget(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "roll-pdb")
	createClass(t, "roll-pdb-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Drain.Timeout = &metav1.Duration{Duration: 5 * time.Minute}
	})
	createRollingSet(t, ns, "db", "roll-pdb-sim", 1, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "1 node", rolledOut(c, t, ns, "db", 1))
	old := nodeNames(t, ns, "db")[0]
	pod := runPod(t, ns, "db-0", old, map[string]string{"app": "db"})
	running, err := kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	running.Status.Phase = corev1.PodRunning
	running.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	_, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, running, metav1.UpdateOptions{})
	require.NoError(t, err)
	pdb, err := kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	setBudgetStatus(t, ns, pdb.Name, 1, 0)

	updateSet(t, ns, "db", setVersion("2"))
	eventuallyEvent(t, old, nodecontroller.ReasonEvictionBlocked)
	n, err := kube.CoreV1().Nodes().Get(ctx, old, metav1.GetOptions{})
	require.NoError(t, err, "the budget holds the old node")
	require.NotNil(t, n.DeletionTimestamp)
	var draining *corev1.NodeCondition
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == nodecontroller.DrainCondition {
			draining = &n.Status.Conditions[i]
		}
	}
	require.NotNil(t, draining, "the drain shows in the Node's conditions")
	assert.Contains(t, draining.Message, "held by a PodDisruptionBudget")

	// The budget now allows the disruption: it asks for none available any
	// more, as kube-controller-manager's disruption controller then computes
	// too (written here as well, so the test does not wait on its resync).
	pdb, err = kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, pdb.Name, metav1.GetOptions{})
	require.NoError(t, err)
	pdb.Spec.MinAvailable = ptr.To(intstr.FromInt32(0))
	_, err = kube.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, pdb, metav1.UpdateOptions{})
	require.NoError(t, err)
	setBudgetStatus(t, ns, pdb.Name, 1, 1)
	eventually(t, time.Minute, "rolled out", rolledOut(c, t, ns, "db", 1))
	_, err = kube.CoreV1().Nodes().Get(ctx, old, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err))
	reasons := eventuallyEvent(t, old, nodecontroller.ReasonDrained)
	assert.NotContains(t, reasons, nodecontroller.ReasonDrainTimedOut)
}

// onDeleteSet makes, in namespace ns, the class class and a NodeSet batch of
// 3 with the OnDelete strategy, and returns its Nodes' names once made.
func onDeleteSet(t *testing.T, c *controllers, ns, class string) []string {
	t.Helper()
	createClass(t, class, nil)
	createRollingSet(t, ns, "batch", class, 3, intstr.FromInt32(1), intstr.FromInt32(0))
	updateSet(t, ns, "batch", func(s *nodesetv1alpha1.NodeSet) {
		s.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.OnDeleteStrategy}
	})
	eventually(t, 2*time.Minute, "3 nodes", rolledOut(c, t, ns, "batch", 3))
	return nodeNames(t, ns, "batch")
}

// TestOnDeleteReplacesOnlyDeletedNodes: a template change replaces nothing
// until a Node is deleted, and its replacement has the new template.
func TestOnDeleteReplacesOnlyDeletedNodes(t *testing.T) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ondelete")
	before := onDeleteSet(t, c, ns, "ondelete-sim")

	updateSet(t, ns, "batch", setVersion("2"))
	// The sync that saw the new template wrote this status after deciding
	// what to create and delete: what it did is visible now.
	eventually(t, time.Minute, "template change observed and left to deletions", func(ctx context.Context) (bool, string) {
		ok, why := observed(t, ns, "batch")(ctx)
		if !ok {
			return false, why
		}
		p := progressing(t, ns, "batch")
		return strings.Contains(p.Message, "3 outdated, replaced when deleted (strategy OnDelete)"), p.Reason + ": " + p.Message
	})
	untouched(t, ns, "batch", before, "OnDelete replaces nothing by itself")

	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, before[0], metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "replacement", converged(c, t, ns, "batch", 3))
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "batch", metav1.GetOptions{})
	require.NoError(t, err)
	nodes, err := setNodes(ctx, t, ns, "batch")
	require.NoError(t, err)
	updated := 0
	for _, n := range nodes {
		if n.Labels[nodesetv1alpha1.LabelTemplateHash] == set.Status.TemplateHash {
			updated++
			assert.NotContains(t, before, n.Name)
		} else {
			assert.Contains(t, before[1:], n.Name, "untouched old nodes stay")
		}
	}
	assert.Equal(t, 1, updated, "only the deleted node was replaced, with the new template")
}

// TestPauseAndResume: a paused NodeSet keeps its outdated nodes; resuming
// rolls them.
func TestPauseAndResume(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "pause")
	createClass(t, "pause-sim", nil)
	createRollingSet(t, ns, "api", "pause-sim", 3, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "3 nodes", rolledOut(c, t, ns, "api", 3))
	before := nodeNames(t, ns, "api")

	updateSet(t, ns, "api", func(s *nodesetv1alpha1.NodeSet) {
		s.Spec.Paused = true
		setVersion("2")(s)
	})
	eventually(t, time.Minute, "paused", func(ctx context.Context) (bool, string) {
		ok, why := observed(t, ns, "api")(ctx)
		if !ok {
			return false, why
		}
		p := progressing(t, ns, "api")
		return p.Reason == "Paused", p.Reason + ": " + p.Message
	})
	untouched(t, ns, "api", before, "a paused NodeSet replaces nothing")

	w := watchFleet(t, ns, "api", 4, 3)
	updateSet(t, ns, "api", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Paused = false })
	eventually(t, 3*time.Minute, "rolled out after resume", rolledOut(c, t, ns, "api", 3))
	w.assertHeld(t)
}

// TestNodeClassChangeRollsEveryNodeSet: an admin's change to the class (its
// node template) rolls the nodes of every NodeSet of the class.
func TestNodeClassChangeRollsEveryNodeSet(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns1, ns2 := createNamespace(t, "classroll-a"), createNamespace(t, "classroll-b")
	createClass(t, "classroll-sim", nil)
	createRollingSet(t, ns1, "one", "classroll-sim", 2, intstr.FromInt32(1), intstr.FromInt32(0))
	createRollingSet(t, ns2, "two", "classroll-sim", 2, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "one ready", rolledOut(c, t, ns1, "one", 2))
	eventually(t, 2*time.Minute, "two ready", rolledOut(c, t, ns2, "two", 2))
	before := append(nodeNames(t, ns1, "one"), nodeNames(t, ns2, "two")...)
	hashes := map[string]string{}
	for _, ns := range []struct{ namespace, name string }{{ns1, "one"}, {ns2, "two"}} {
		set, err := cs.NodesetV1alpha1().NodeSets(ns.namespace).Get(ctx, ns.name, metav1.GetOptions{})
		require.NoError(t, err)
		hashes[ns.name] = set.Status.TemplateHash
	}

	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "classroll-sim", metav1.GetOptions{})
		if err != nil {
			return err
		}
		class.Spec.NodeTemplate.Labels = map[string]string{"example.com/image": "v2"}
		_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
		return err
	}))
	// A class's change leaves the sets' generation as it was: until a set's
	// status shows the new template, its old Nodes look rolled out.
	for _, ns := range []struct{ namespace, name string }{{ns1, "one"}, {ns2, "two"}} {
		eventually(t, 2*time.Minute, ns.name+" sees the class change", func(ctx context.Context) (bool, string) {
			set, err := cs.NodesetV1alpha1().NodeSets(ns.namespace).Get(ctx, ns.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return set.Status.TemplateHash != hashes[ns.name], "template " + set.Status.TemplateHash
		})
	}
	eventually(t, 3*time.Minute, "one rolled", rolledOut(c, t, ns1, "one", 2))
	eventually(t, 3*time.Minute, "two rolled", rolledOut(c, t, ns2, "two", 2))
	for _, ns := range []struct{ namespace, name string }{{ns1, "one"}, {ns2, "two"}} {
		nodes, err := setNodes(ctx, t, ns.namespace, ns.name)
		require.NoError(t, err)
		for _, n := range nodes {
			assert.NotContains(t, before, n.Name)
			assert.Equal(t, "v2", n.Labels["example.com/image"], "the class's new node label")
		}
	}
}

// TestRolloutSurvivesRestarts kills both controllers in the middle of a
// rollout: it finishes within its bounds, with no machine left over.
func TestRolloutSurvivesRestarts(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "roll-crash")
	createClass(t, "roll-crash-sim", nil)
	createRollingSet(t, ns, "svc", "roll-crash-sim", 4, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "4 nodes", rolledOut(c, t, ns, "svc", 4))

	w := watchFleet(t, ns, "svc", 5, 4)
	updateSet(t, ns, "svc", setVersion("2"))
	_, cs := clients(t)
	eventually(t, 2*time.Minute, "rollout under way", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "svc", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return set.Status.UpdatedReplicas >= 1 && set.Status.UpdatedReplicas < 4, fmt.Sprintf("%d updated", set.Status.UpdatedReplicas)
	})
	c.restart(t, c.nodeset, syscall.SIGKILL)
	c.restart(t, c.node, syscall.SIGKILL)
	eventually(t, 3*time.Minute, "rolled out", rolledOut(c, t, ns, "svc", 4))
	w.assertHeld(t)
}
