package lifecycle

// Tests of nodeset next to kube-controller-manager, which the test control
// plane runs as a cluster does: the clusterrole-aggregation controller gives
// namespace editors the NodeSets, the ReplicaSet, Deployment and disruption
// controllers keep workloads and their budgets, the node lifecycle
// controller judges the Nodes' heartbeats.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/kubeletsim"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/test/framework"
)

// TestTenantThroughEditRole: a user bound to the built-in edit ClusterRole in
// a namespace, and to nothing else, creates, scales and deletes a NodeSet
// there (the rules of nodeset:aggregate-to-edit, aggregated into edit by
// kube-controller-manager), and cannot write NodeClasses.
func TestTenantThroughEditRole(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	admin, _ := clients(t)
	ns := createNamespace(t, "edit-role")
	createClass(t, "edit-role-sim", nil)

	eventually(t, time.Minute, "edit aggregates nodeset:aggregate-to-edit", func(ctx context.Context) (bool, string) {
		edit, err := admin.RbacV1().ClusterRoles().Get(ctx, "edit", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, rule := range edit.Rules {
			if slices.Contains(rule.APIGroups, nodesetv1alpha1.GroupName) && slices.Contains(rule.Resources, "nodesets/scale") &&
				slices.Contains(rule.Verbs, "update") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("edit has %d rules, none for nodesets/scale", len(edit.Rules))
	})
	_, cs := tenant(t, "tenant-a", ns) // a RoleBinding to edit, nothing else
	bindings, err := admin.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, b := range bindings.Items {
		assert.Equal(t, "edit", b.RoleRef.Name, "the tenant's only binding in %s is to edit", ns)
	}

	_, err = cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, tenantSet("app", "edit-role-sim", 1), metav1.CreateOptions{})
	require.NoError(t, err, "an editor creates a NodeSet")
	eventually(t, 2*time.Minute, "1 node", converged(c, t, ns, "app", 1))
	require.NoError(t, framework.Scale(ctx, cs, ns, "app", 3), "an editor scales it (nodesets/scale)")
	eventually(t, 2*time.Minute, "3 nodes", converged(c, t, ns, "app", 3))
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "app", metav1.GetOptions{})
	require.NoError(t, err)
	set.Spec.Replicas = ptr.To[int32](2)
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Update(ctx, set, metav1.UpdateOptions{})
	require.NoError(t, err, "an editor updates it")
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "app", 2))

	_, err = cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "edit-role-own"},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}}}}, metav1.CreateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "an editor creating a NodeClass: %v", err)
	class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "edit-role-sim", metav1.GetOptions{})
	require.NoError(t, err, "the catalogue is readable")
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](100)}
	_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "an editor changing a NodeClass: %v", err)
	err = cs.NodesetV1alpha1().NodeClasses().Delete(ctx, "edit-role-sim", metav1.DeleteOptions{})
	assert.True(t, apierrors.IsForbidden(err), "an editor deleting a NodeClass: %v", err)

	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "app", metav1.DeleteOptions{}), "an editor deletes the NodeSet")
	eventually(t, 2*time.Minute, "the NodeSet and its Nodes gone", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "app")
		if err != nil {
			return false, err.Error()
		}
		_, err = cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "app", metav1.GetOptions{})
		return len(nodes) == 0 && apierrors.IsNotFound(err), fmt.Sprintf("%d nodes; NodeSet: %v", len(nodes), err)
	})
}

// readyWatch counts a Deployment's Ready, not terminating pods on every
// change and keeps the lowest count seen.
type readyWatch struct {
	mu     sync.Mutex
	pods   map[string]*corev1.Pod
	lowest int
	events int
	// at is what the pods were when the fewest were Ready.
	at []string
	// synced: the initial list is in, each event from then on is a change.
	synced bool
}

func (w *readyWatch) observe(pod *corev1.Pod, gone bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gone {
		delete(w.pods, pod.Name)
	} else {
		w.pods[pod.Name] = pod
	}
	ready := 0
	for _, p := range w.pods {
		if p.DeletionTimestamp == nil && podReady(p) {
			ready++
		}
	}
	w.events++
	if w.synced && ready < w.lowest {
		w.lowest = ready
		w.at = w.at[:0]
		for _, p := range w.pods {
			w.at = append(w.at, fmt.Sprintf("%s on %s: ready=%v terminating=%v phase=%s", p.Name, p.Spec.NodeName, podReady(p), p.DeletionTimestamp != nil, p.Status.Phase))
		}
	}
}

func (w *readyWatch) lowestReady() (int, int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lowest, w.events, slices.Clone(w.at)
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// watchReady starts a readyWatch of namespace's pods labelled app=name, once
// all replicas are Ready.
func watchReady(ctx context.Context, t *testing.T, namespace, name string, replicas int) *readyWatch {
	t.Helper()
	kube, _ := clients(t)
	w := &readyWatch{pods: map[string]*corev1.Pod{}, lowest: replicas}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=" + name }))
	informer := factory.Core().V1().Pods().Informer()
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj.(*corev1.Pod), false) },
		UpdateFunc: func(_, obj any) { w.observe(obj.(*corev1.Pod), false) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				w.observe(pod, true)
			}
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	require.True(t, cache.WaitForCacheSync(ctx.Done(), informer.HasSynced))
	w.mu.Lock()
	w.synced = true
	w.mu.Unlock()
	return w
}

// deploymentReady: all replicas of the current template are Ready and no
// other pod is left.
func deploymentReady(t *testing.T, namespace, name string, replicas int32) func(ctx context.Context) (bool, string) {
	kube, _ := clients(t)
	return func(ctx context.Context) (bool, string) {
		d, err := kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := d.Status
		return d.Status.ObservedGeneration == d.Generation && s.Replicas == replicas && s.UpdatedReplicas == replicas &&
				s.ReadyReplicas == replicas && s.AvailableReplicas == replicas,
			fmt.Sprintf("replicas=%d updated=%d ready=%d available=%d", s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas)
	}
}

// podsOn are the nodes of namespace's app=name pods.
func podsOn(ctx context.Context, t *testing.T, namespace, name string) map[string]int {
	kube, _ := clients(t)
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	require.NoError(t, err)
	on := map[string]int{}
	for _, p := range pods.Items {
		on[p.Spec.NodeName]++
	}
	return on
}

// TestDeploymentDrainedUnderBudget: a Deployment runs on a NodeSet's nodes
// behind a PodDisruptionBudget that the disruption controller keeps. When the
// NodeSet scales down and when it rolls out a new template, the nodes that go
// are drained through the Eviction API: the budget holds (never fewer Ready
// pods than minAvailable), the ReplicaSet replaces every evicted pod on the
// remaining nodes, and the Deployment ends with all replicas Ready.
func TestDeploymentDrainedUnderBudget(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns := createNamespace(t, "deploy-drain")
	createClass(t, "deploy-drain-sim", func(class *nodesetv1alpha1.NodeClass) {
		// Longer than the test: a drain only ever ends by evictions the
		// budget allows, never by giving up on it.
		class.Spec.Drain.Timeout = &metav1.Duration{Duration: 10 * time.Minute}
		class.Spec.NodeTemplate.Taints = []nodesetv1alpha1.Taint{{Key: "example.com/dedicated", Value: "web", Effect: string(corev1.TaintEffectNoSchedule)}}
	})
	createRollingSet(t, ns, "web", "deploy-drain-sim", 3, intstr.FromInt32(1), intstr.FromInt32(0))
	eventually(t, 2*time.Minute, "3 nodes", rolledOut(c, t, ns, "web", 3))
	require.NoError(t, framework.StartPods(ctx, kube, ns))

	const replicas, minAvailable = 4, 3
	labels := map[string]string{"app": "web"}
	_, err := kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// The set's namespace and name: other tests' sets are named web too.
					NodeSelector: map[string]string{"example.com/version": "1", nodesetv1alpha1.LabelNodeSetNamespace: ns, nodesetv1alpha1.LabelNodeSet: "web"},
					Tolerations: []corev1.Toleration{{Key: "example.com/dedicated", Operator: corev1.TolerationOpEqual, Value: "web",
						Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(minAvailable)),
			Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "the Deployment Ready", deploymentReady(t, ns, "web", replicas))
	eventually(t, time.Minute, "the budget computed by the disruption controller", func(ctx context.Context) (bool, string) {
		pdb, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := pdb.Status
		return s.ObservedGeneration == pdb.Generation && s.CurrentHealthy == replicas && s.DisruptionsAllowed == replicas-minAvailable,
			fmt.Sprintf("%+v", s)
	})
	watch := watchReady(ctx, t, ns, "web", replicas)
	nodesWithPods := func() []string {
		var names []string
		for node := range podsOn(ctx, t, ns, "web") {
			names = append(names, node)
		}
		return names
	}

	// Scale-down: the pods of the node that goes move to the two left.
	before, placed := nodeNames(t, ns, "web"), podsOn(ctx, t, ns, "web")
	t.Logf("before the scale-down, pods on %v", placed)
	scale(t, ns, "web", 2)
	eventually(t, 3*time.Minute, "2 nodes", converged(c, t, ns, "web", 2))
	eventually(t, 2*time.Minute, "the Deployment Ready after the scale-down", deploymentReady(t, ns, "web", replicas))
	remaining := nodeNames(t, ns, "web")
	assert.Subset(t, remaining, nodesWithPods(), "every pod runs on a node that stays")
	for _, name := range before {
		if !slices.Contains(remaining, name) {
			assert.NotZero(t, placed[name], "the node that went, %s, had pods to drain", name)
		}
	}
	lowest, events, at := watch.lowestReady()
	assert.GreaterOrEqual(t, lowest, minAvailable, "Ready pods during the scale-down (%d pod events); then: %v", events, at)

	// Rollout: every node is replaced, one at a time (maxSurge 1); each old
	// node is drained under the budget.
	updateSet(t, ns, "web", func(s *nodesetv1alpha1.NodeSet) {
		s.Spec.Template.Labels["example.com/version"] = "2"
	})
	// The pods follow the new nodes' label.
	require.NoError(t, retryUpdateDeployment(ctx, t, ns, "web", func(d *appsv1.Deployment) {
		delete(d.Spec.Template.Spec.NodeSelector, "example.com/version")
	}))
	eventually(t, 3*time.Minute, "rolled out", rolledOut(c, t, ns, "web", 2))
	eventually(t, 2*time.Minute, "the Deployment Ready after the rollout", deploymentReady(t, ns, "web", replicas))
	assert.Subset(t, nodeNames(t, ns, "web"), nodesWithPods(), "every pod runs on a new node")
	for _, old := range remaining {
		assert.NotContains(t, nodeNames(t, ns, "web"), old)
	}
	lowest, events, at = watch.lowestReady()
	assert.GreaterOrEqual(t, lowest, minAvailable, "Ready pods during the scale-down and the rollout (%d pod events); then: %v", events, at)
	t.Logf("at least %d of %d pods Ready throughout (%d pod events)", lowest, replicas, events)
}

// retryUpdateDeployment changes a Deployment, retrying on conflicts.
func retryUpdateDeployment(ctx context.Context, t *testing.T, namespace, name string, mutate func(*appsv1.Deployment)) error {
	kube, _ := clients(t)
	for {
		d, err := kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(d)
		_, err = kube.AppsV1().Deployments(namespace).Update(ctx, d, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// TestUnreachableNodeReplacedOnce: a node whose kubelet stops heartbeating
// (no Lease renewal, no status) is marked Ready=Unknown and tainted
// node.kubernetes.io/unreachable by the node lifecycle controller, and
// nodeset replaces it exactly once, within the NodeSet's remediation cap.
func TestUnreachableNodeReplacedOnce(t *testing.T) {
	c := startControllers(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kube, cs := clients(t)
	ns := createNamespace(t, "unreachable")
	createClass(t, "unreachable-sim", nil)
	createSet(t, ns, "fleet", "unreachable-sim", 5)
	eventually(t, 2*time.Minute, "5 nodes", converged(c, t, ns, "fleet", 5))
	before := nodeNames(t, ns, "fleet")
	silent := before[0]

	// Every taint each Node of the set ever had, as the watch saw them.
	var mu sync.Mutex
	taints := map[string]map[string]bool{}
	factory := informers.NewSharedInformerFactory(kube, 0)
	informer := factory.Core().V1().Nodes().Informer()
	record := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok || node.Labels[nodesetv1alpha1.LabelNodeSet] != "fleet" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if taints[node.Name] == nil {
			taints[node.Name] = map[string]bool{}
		}
		for _, taint := range node.Spec.Taints {
			taints[node.Name][taint.Key+":"+string(taint.Effect)] = true
		}
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }})
	require.NoError(t, err)
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	require.True(t, cache.WaitForCacheSync(ctx.Done(), informer.HasSynced))

	_, err = kube.CoreV1().Nodes().Patch(ctx, silent, "application/merge-patch+json",
		fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"cut off"}}}`, kubeletsim.AnnotationUnreachable), metav1.PatchOptions{})
	require.NoError(t, err)
	// The grace period of the node lifecycle controller (50s by default)
	// passes before it judges the node.
	eventually(t, 3*time.Minute, silent+" marked unreachable and replaced", func(ctx context.Context) (bool, string) {
		mu.Lock()
		tainted := taints[silent][corev1.TaintNodeUnreachable+":"+string(corev1.TaintEffectNoExecute)]
		mu.Unlock()
		if !tainted {
			return false, silent + " not tainted unreachable:NoExecute yet"
		}
		return !slices.Contains(nodeNames(t, ns, "fleet"), silent), silent + " still there"
	})
	eventually(t, 2*time.Minute, "5 nodes again", converged(c, t, ns, "fleet", 5))
	eventuallyEvent(t, silent, "Unhealthy")

	after := nodeNames(t, ns, "fleet")
	var replacements []string
	for _, name := range after {
		if !slices.Contains(before, name) {
			replacements = append(replacements, name)
		}
	}
	assert.Len(t, replacements, 1, "exactly one replacement: %v", replacements)
	for _, name := range before[1:] {
		assert.Contains(t, after, name, "a heartbeating node stays")
	}
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "fleet", metav1.GetOptions{})
	require.NoError(t, err)
	for _, cond := range set.Status.Conditions {
		if cond.Type == nodesetv1alpha1.NodeSetRemediationAllowed {
			assert.Equal(t, metav1.ConditionTrue, cond.Status, "one of 5 is within the cap: %s", cond.Message)
		}
	}
	// The replacement is not itself judged: it heartbeats, and the node
	// lifecycle controller lifted the not-ready taint it was created with.
	for _, name := range replacements {
		node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.True(t, nodeutil.IsReady(node))
		for _, taint := range node.Spec.Taints {
			assert.NotContains(t, []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}, taint.Key, "%s", name)
		}
	}
}
