package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/test/framework"
)

// tenant returns clients acting as user, an editor of namespace.
func tenant(t *testing.T, user, namespace string) (kubernetes.Interface, versioned.Interface) {
	t.Helper()
	require.NoError(t, framework.BindTenant(context.Background(), framework.Shared(t), user, namespace))
	cfg := framework.Shared(t).Config(user)
	return kubernetes.NewForConfigOrDie(cfg), versioned.NewForConfigOrDie(cfg)
}

func tenantSet(name string, class string, replicas int32) *nodesetv1alpha1.NodeSet {
	return &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: class, Replicas: ptr.To(replicas)},
	}
}

// TestTenantPermissions: a namespace editor manages NodeSets in its namespace
// and nothing else.
func TestTenantPermissions(t *testing.T) {
	startControllers(t)
	ctx := context.Background()
	mine, theirs := createNamespace(t, "tenant-mine"), createNamespace(t, "tenant-theirs")
	createClass(t, "tenant-sim", nil)
	kube, cs := tenant(t, "tenant-a", mine)

	set, err := cs.NodesetV1alpha1().NodeSets(mine).Create(ctx, tenantSet("app", "tenant-sim", 1), metav1.CreateOptions{})
	require.NoError(t, err, "a tenant creates a NodeSet in its namespace")
	require.NoError(t, framework.Scale(ctx, cs, mine, "app", 2), "and scales it")
	classes, err := cs.NodesetV1alpha1().NodeClasses().List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "the catalogue is readable by everyone")
	assert.NotEmpty(t, classes.Items)

	forbidden := func(what string, err error) {
		t.Helper()
		assert.True(t, apierrors.IsForbidden(err), "%s must be forbidden, got %v", what, err)
	}
	_, err = cs.NodesetV1alpha1().NodeSets(theirs).Create(ctx, tenantSet("intruder", "tenant-sim", 1), metav1.CreateOptions{})
	forbidden("a NodeSet in another namespace", err)
	_, err = cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "mine"},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.huge"}}}}, metav1.CreateOptions{})
	forbidden("creating a NodeClass", err)
	class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "tenant-sim", metav1.GetOptions{})
	require.NoError(t, err)
	class.Spec.Limits = nil
	_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
	forbidden("changing a NodeClass", err)
	_, err = kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	forbidden("listing Nodes", err)
	_, err = kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "tenant-made",
		Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: "tenant-sim"}}}, metav1.CreateOptions{})
	forbidden("creating a Node", err)
	_, err = kube.CoreV1().Secrets("nodeset-system").Get(ctx, "aws-credentials", metav1.GetOptions{})
	forbidden("reading a credentials Secret", err)
	_, err = kube.CoreV1().Secrets("nodeset-system").List(ctx, metav1.ListOptions{})
	forbidden("listing the credentials Secrets", err)

	require.NoError(t, cs.NodesetV1alpha1().NodeSets(mine).Delete(ctx, set.Name, metav1.DeleteOptions{}), "and deletes it")
}

// TestAdmissionRefusals: the webhook refuses, at create time and as the
// tenant, what the controller would not accept, naming the rule.
func TestAdmissionRefusals(t *testing.T) {
	startControllers(t)
	ctx := context.Background()
	ns := createNamespace(t, "tenant-refused")
	_, cs := tenant(t, "tenant-b", ns)
	createClass(t, "tenant-listed", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{"somebody-else"}}
	})
	createClass(t, "tenant-bounded", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.TenantOverrides = []string{"bootDelay"}
		c.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](3)}
	})

	restricted := tenantSet("restricted", "tenant-bounded", 1)
	restricted.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.huge"}
	reserved := tenantSet("reserved", "tenant-bounded", 1)
	reserved.Spec.Template.Labels = map[string]string{"nodeset.dev/nodeclass": "other"}
	tests := []struct {
		set  *nodesetv1alpha1.NodeSet
		want []string
	}{
		{tenantSet("missing", "no-such-class", 1), []string{`NodeClass "no-such-class" does not exist`, "NodeClassNotFound"}},
		{tenantSet("disallowed", "tenant-listed", 1), []string{`may not use NodeClass "tenant-listed"`, "spec.allowedNamespaces.namespaces", "NamespaceNotAllowed"}},
		{restricted, []string{"spec.simulated.instanceType", "bootDelay", "OverrideNotAllowed"}},
		{reserved, []string{"spec.template.labels: keys under nodeset.dev/ are reserved"}},
		{tenantSet("too-many", "tenant-bounded", 4), []string{"spec.limits.maxNodesPerNamespace of 3", "LimitExceeded"}},
	}
	for _, tt := range tests {
		_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, tt.set, metav1.CreateOptions{})
		require.Error(t, err, tt.set.Name)
		for _, want := range tt.want {
			assert.Contains(t, err.Error(), want, tt.set.Name)
		}
		_, err = cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, tt.set.Name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%s: nothing is left behind", tt.set.Name)
	}

	// Within the limit it is admitted; growing past it is refused.
	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, tenantSet("fits", "tenant-bounded", 2), metav1.CreateOptions{})
	require.NoError(t, err)
	err = framework.Scale(ctx, cs, ns, "fits", 5)
	require.Error(t, err, "kubectl scale past the limit is refused too")
	assert.Contains(t, err.Error(), "spec.limits.maxNodesPerNamespace of 3")
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "fits", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(2), *set.Spec.Replicas, "the refused scale changed nothing")
}

// TestLimitsHoldWhenNodeSetsRace creates NodeSets of a limited class at the
// same moment: whatever admission lets through, the nodes of the namespace
// never exceed the limit.
func TestLimitsHoldWhenNodeSetsRace(t *testing.T) {
	startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "tenant-race")
	_, cs := tenant(t, "tenant-a", ns)
	createClass(t, "tenant-race-sim", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](4)}
	})
	// The watch sees every change to the namespace's Nodes: never more than 4.
	w := watchNodes(t, nodesetv1alpha1.LabelNodeSetNamespace+"="+ns, 4, 0)
	var wg sync.WaitGroup
	admitted := make([]bool, 4)
	for i := range admitted {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, tenantSet(fmt.Sprintf("racer-%d", i), "tenant-race-sim", 3), metav1.CreateOptions{})
			admitted[i] = err == nil
		}()
	}
	wg.Wait()
	t.Logf("admitted: %v", admitted)
	count := func(ctx context.Context) (int, error) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns})
		if err != nil {
			return 0, err
		}
		return len(nodes.Items), nil
	}
	// The webhook refuses a set that would exceed the limit as far as its
	// cache knows; racers it let through are capped by the controller.
	want := 0
	for _, ok := range admitted {
		if ok {
			want = min(4, want+3)
		}
	}
	require.Positive(t, want, "at least one racer is admitted")
	// Until the controller has decided on every admitted set: each has its
	// 3 Nodes or says the limit holds it back, and the namespace has what
	// the limit allows.
	eventually(t, 2*time.Minute, "every admitted set decided", func(ctx context.Context) (bool, string) {
		for i, ok := range admitted {
			if !ok {
				continue
			}
			set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, fmt.Sprintf("racer-%d", i), metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if set.Status.ObservedGeneration != set.Generation {
				return false, set.Name + " not observed yet"
			}
			limited := false
			for _, c := range set.Status.Conditions {
				limited = limited || (c.Type == nodesetv1alpha1.NodeSetAccepted && c.Reason == nodesetv1alpha1.ReasonLimitExceeded)
			}
			if set.Status.Replicas != 3 && !limited {
				return false, fmt.Sprintf("%s has %d Nodes and no %s", set.Name, set.Status.Replicas, nodesetv1alpha1.ReasonLimitExceeded)
			}
		}
		n, err := count(ctx)
		if err != nil {
			return false, err.Error()
		}
		return n == want, fmt.Sprintf("%d Nodes in the namespace", n)
	})
	w.close()
	most := w.highest
	if most > 4 {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns})
		require.NoError(t, err)
		for _, node := range nodes.Items {
			t.Logf("%s of %s, class %s, created %s", node.Name, node.Labels[nodesetv1alpha1.LabelNodeSet],
				node.Labels[nodesetv1alpha1.LabelNodeClass], node.CreationTimestamp.Format(time.RFC3339Nano))
		}
		for _, line := range strings.Split(shared.nodeset.Logs(), "\n") {
			if strings.Contains(line, ns+"/") && (strings.Contains(line, "Created Node") || strings.Contains(line, "limits")) {
				t.Log(line)
			}
		}
	}
	w.assertHeld(t)
	assert.Equal(t, want, most, "the admitted sets get their nodes, up to the namespace's limit")
}

// TestDedicatedNodesCarryTheTenant: a Dedicated class's nodes are labelled
// and tainted for the NodeSet's namespace.
func TestDedicatedNodesCarryTheTenant(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	ns := createNamespace(t, "tenant-dedicated")
	createClass(t, "tenant-dedicated-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Tenancy = nodesetv1alpha1.TenancyDedicated
	})
	_, cs := tenant(t, "tenant-a", ns)
	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, tenantSet("own", "tenant-dedicated-sim", 2), metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "own", 2))
	nodes, err := setNodes(ctx, t, ns, "own")
	require.NoError(t, err)
	for _, n := range nodes {
		assert.Equal(t, ns, n.Labels["nodeset.dev/tenant"], n.Name)
		var tainted bool
		for _, taint := range n.Spec.Taints {
			tainted = tainted || (taint.Key == "nodeset.dev/tenant" && taint.Value == ns && taint.Effect == corev1.TaintEffectNoSchedule)
		}
		assert.True(t, tainted, "%s has the taint nodeset.dev/tenant=%s:NoSchedule: %v", n.Name, ns, n.Spec.Taints)
	}
}

// TestCredentialsNeverLeak gives a class a credentials Secret with a unique
// value, runs nodes of it through their whole life, and sweeps every Node,
// NodeSet, NodeClass and Event, the controllers' logs and their metrics for it.
func TestCredentialsNeverLeak(t *testing.T) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	secretValue := fmt.Sprintf("s3cr3t-%d", time.Now().UnixNano())
	_, err := kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sweep-credentials"},
		StringData: map[string]string{"token": secretValue},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	ns := createNamespace(t, "tenant-sweep")
	createClass(t, "sweep-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "sweep-credentials"}
	})
	createSet(t, ns, "sweep", "sweep-sim", 2)
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "sweep", 2))
	scale(t, ns, "sweep", 1)
	eventually(t, 2*time.Minute, "1 node", converged(c, t, ns, "sweep", 1))

	var haystacks = map[string]string{}
	add := func(name string, obj any, err error) {
		require.NoError(t, err, name)
		data, err := json.Marshal(obj)
		require.NoError(t, err)
		haystacks[name] = string(data)
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	add("Nodes", nodes, err)
	sets, err := cs.NodesetV1alpha1().NodeSets("").List(ctx, metav1.ListOptions{})
	add("NodeSets", sets, err)
	classes, err := cs.NodesetV1alpha1().NodeClasses().List(ctx, metav1.ListOptions{})
	add("NodeClasses", classes, err)
	events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	add("Events", events, err)
	haystacks["nodeset-controller log"] = c.nodeset.Logs()
	haystacks["node-controller log"] = c.node.Logs()
	for name, port := range map[string]int{"nodeset-controller metrics": c.NodeSetMetricsPort, "node-controller metrics": c.NodeMetricsPort} {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		haystacks[name] = string(body)
	}
	for name, haystack := range haystacks {
		assert.NotEmpty(t, haystack, name)
		assert.False(t, strings.Contains(haystack, secretValue), "the credential value appears in %s", name)
	}
}
