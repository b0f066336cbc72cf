package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// autoscalerClient connects to the nodeset-controller's externalgrpc API, as
// cluster-autoscaler does.
func autoscalerClient(t *testing.T, c *controllers) protos.CloudProviderClient {
	t.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", c.AutoscalerPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return protos.NewCloudProviderClient(conn)
}

// rpcLog records the calls a test makes, for its log.
type rpcLog struct {
	t     *testing.T
	start time.Time
	lines []string
}

func (l *rpcLog) add(format string, args ...any) {
	l.lines = append(l.lines, fmt.Sprintf("[%6.2fs] ", time.Since(l.start).Seconds())+fmt.Sprintf(format, args...))
}

func (l *rpcLog) print() { l.t.Logf("RPC sequence:\n  %s", strings.Join(l.lines, "\n  ")) }

func createAutoscaledSet(t *testing.T, namespace, name, class string, max int32) {
	t.Helper()
	_, cs := clients(t)
	_, err := cs.NodesetV1alpha1().NodeSets(namespace).Create(context.Background(), &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: nodesetv1alpha1.NodeSetSpec{
			NodeClassName: class,
			Replicas:      ptr.To[int32](0),
			Autoscaling:   &nodesetv1alpha1.Autoscaling{MinReplicas: 0, MaxReplicas: max},
			Template:      nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"example.com/pool": name}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// twoCPUs gives a class's simulated machines 2 CPUs and 8Gi.
func twoCPUs(class *nodesetv1alpha1.NodeClass) {
	class.Spec.Simulated.Capacity = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
}

// TestAutoscalerProtocol drives the server in the order cluster-autoscaler
// calls it, against both controllers and the real API server.
func TestAutoscalerProtocol(t *testing.T) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca")
	createClass(t, "ca-sim", twoCPUs)
	createAutoscaledSet(t, ns, "pool", "ca-sim", 5)
	createSet(t, ns, "fixed", "ca-sim", 1) // no spec.autoscaling: not a node group
	eventually(t, time.Minute, "the node controller publishes the class's capacity", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "ca-sim", metav1.GetOptions{})
		if err != nil || class.Status.Capacity == nil {
			return false, fmt.Sprint(err)
		}
		return class.Status.Capacity.Resources.Cpu().String() == "2", class.Status.Capacity.Resources.Cpu().String()
	})
	eventually(t, 2*time.Minute, "fixed node", converged(c, t, ns, "fixed", 1))
	ca := autoscalerClient(t, c)
	id := ns + "/pool"
	log := &rpcLog{t: t, start: time.Now()}
	defer log.print()

	_, err := ca.Refresh(ctx, &protos.RefreshRequest{})
	require.NoError(t, err)
	log.add("Refresh -> ok")
	eventually(t, time.Minute, "node group listed", func(ctx context.Context) (bool, string) {
		groups, err := ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
		if err != nil {
			return false, err.Error()
		}
		for _, g := range groups.NodeGroups {
			if g.Id == id {
				return g.MinSize == 0 && g.MaxSize == 5, g.String()
			}
			if strings.HasSuffix(g.Id, "/fixed") {
				return false, "a NodeSet without spec.autoscaling is listed"
			}
		}
		return false, fmt.Sprintf("%v", groups.NodeGroups)
	})
	log.add("NodeGroups -> %s {min 0, max 5}", id)
	fixed, err := setNodes(ctx, t, ns, "fixed")
	require.NoError(t, err)
	forNode, err := ca.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{
		Name: fixed[0].Name, ProviderID: fixed[0].Spec.ProviderID, Labels: fixed[0].Labels}})
	require.NoError(t, err)
	assert.Empty(t, forNode.NodeGroup.Id, "a node of a NodeSet without autoscaling")
	log.add("NodeGroupForNode(%s) -> %q", fixed[0].Name, forNode.NodeGroup.Id)
	size, err := ca.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: id})
	require.NoError(t, err)
	assert.Zero(t, size.TargetSize)
	instances, err := ca.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: id})
	require.NoError(t, err)
	assert.Empty(t, instances.Instances)
	log.add("NodeGroupTargetSize -> 0; NodeGroupNodes -> []")

	template, err := ca.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: id})
	require.NoError(t, err)
	node := &corev1.Node{}
	require.NoError(t, node.Unmarshal(template.NodeBytes))
	assert.Equal(t, template.NodeInfo, template.NodeBytes)
	assert.Equal(t, "2", ptr.To(node.Status.Allocatable[corev1.ResourceCPU]).String())
	assert.Equal(t, "pool", node.Labels["example.com/pool"])
	log.add("NodeGroupTemplateNodeInfo -> cpu %s, memory %s, labels %d", ptr.To(node.Status.Capacity[corev1.ResourceCPU]).String(),
		ptr.To(node.Status.Capacity[corev1.ResourceMemory]).String(), len(node.Labels))

	increased := time.Now()
	_, err = ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 2})
	require.NoError(t, err)
	log.add("NodeGroupIncreaseSize(+2) -> ok")
	var firstNode, ready time.Duration
	eventually(t, 2*time.Minute, "2 nodes", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "pool")
		if err == nil && len(nodes) > 0 && firstNode == 0 {
			firstNode = time.Since(increased)
		}
		return converged(c, t, ns, "pool", 2)(ctx)
	})
	ready = time.Since(increased)
	log.add("2 Nodes Ready: first Node object %s after IncreaseSize, all Ready %s after", firstNode.Round(time.Millisecond), ready.Round(time.Millisecond))
	_, err = ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 4})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "past maxReplicas")
	log.add("NodeGroupIncreaseSize(+4) -> %s", status.Code(err))

	instances, err = ca.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: id})
	require.NoError(t, err)
	require.Len(t, instances.Instances, 2)
	for _, i := range instances.Instances {
		assert.True(t, strings.HasPrefix(i.Id, "simulated:///"), i.Id)
		assert.Equal(t, protos.InstanceStatus_instanceRunning, i.Status.InstanceState)
	}
	log.add("NodeGroupNodes -> %s, %s (running)", instances.Instances[0].Id, instances.Instances[1].Id)

	// Provisioning stalls (the node controller is down): new Nodes have no
	// machine, and cluster-autoscaler, giving up on them, sends "fake" nodes
	// named by their instance ids.
	c.node.Kill(syscall.SIGTERM)
	_, err = ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 2})
	require.NoError(t, err)
	var unregistered []string
	eventually(t, time.Minute, "2 unregistered instances", func(ctx context.Context) (bool, string) {
		instances, err := ca.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: id})
		if err != nil {
			return false, err.Error()
		}
		unregistered = unregistered[:0]
		for _, i := range instances.Instances {
			// Nodes without a machine (not the replicas without a Node
			// yet, nodeset-pending://, before the controller makes them).
			if strings.HasPrefix(i.Id, "nodeset-unregistered://") && i.Status.InstanceState == protos.InstanceStatus_instanceCreating {
				unregistered = append(unregistered, i.Id)
			}
		}
		return len(unregistered) == 2, fmt.Sprintf("%v", instances.Instances)
	})
	log.add("NodeGroupIncreaseSize(+2) with provisioning stalled -> NodeGroupNodes shows %v (creating)", unregistered)

	pool, err := setNodes(ctx, t, ns, "pool")
	require.NoError(t, err)
	var registered corev1.Node
	for _, n := range pool {
		if n.Spec.ProviderID != "" {
			registered = n
		}
	}
	_, err = ca.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: id, Nodes: []*protos.ExternalGrpcNode{
		{Name: registered.Name, ProviderID: registered.Spec.ProviderID, Labels: registered.Labels},
		{Name: unregistered[0], ProviderID: unregistered[0]},
	}})
	require.NoError(t, err)
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "pool", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(2), *set.Spec.Replicas, "4 - 2 deleted")
	log.add("NodeGroupDeleteNodes(%s, fake %s) -> ok; replicas 2, delete-nodes %q", registered.Name, unregistered[0],
		set.Annotations[nodesetv1alpha1.AnnotationDeleteNodes])

	_, err = ca.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: id, Delta: -2})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "would take a registered node")
	_, err = ca.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: id, Delta: -1})
	require.NoError(t, err)
	log.add("NodeGroupDecreaseTargetSize(-2) -> FailedPrecondition; (-1) -> ok")

	require.NoError(t, c.node.Start())
	eventually(t, 2*time.Minute, "1 node left", converged(c, t, ns, "pool", 1))
	left, err := setNodes(ctx, t, ns, "pool")
	require.NoError(t, err)
	require.Len(t, left, 1)
	assert.NotEqual(t, registered.Name, left[0].Name, "the named node went")
	assert.NotEmpty(t, left[0].Spec.ProviderID)
	for _, u := range unregistered {
		_, err := kube.CoreV1().Nodes().Get(ctx, strings.TrimPrefix(u, "nodeset-unregistered://"), metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "unregistered node %s removed", u)
	}
	eventually(t, time.Minute, "delete list emptied", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		v := set.Annotations[nodesetv1alpha1.AnnotationDeleteNodes]
		return v == "", v
	})
	log.add("node controller back: 1 Node left (%s), the named and the fake node gone", left[0].Name)
}

// TestAutoscalerScaleUpForPendingPods: pods that do not fit stay Pending; the
// test, acting as cluster-autoscaler, sizes the NodeSet from its template
// node; simulated nodes join and kube-scheduler places the pods. Then the
// idle nodes are deleted by name and exactly those go.
func TestAutoscalerScaleUpForPendingPods(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca-pods")
	createClass(t, "ca-pods-sim", twoCPUs)
	createAutoscaledSet(t, ns, "workers", "ca-pods-sim", 6)
	ca := autoscalerClient(t, c)
	id := ns + "/workers"
	log := &rpcLog{t: t, start: time.Now()}
	defer log.print()

	// Three pods of 1.5 CPU, one per 2-CPU node, of a ReplicaSet, as the
	// workloads cluster-autoscaler scales for are. A bare pod bound in the
	// instant after the startup taint is lifted can be deleted by
	// kube-controller-manager's taint-eviction controller while its Node
	// cache still has the NoExecute taint (kubernetes/kubernetes#119862,
	// #139992); a ReplicaSet makes another, which goes to the same Node.
	selector := map[string]string{"app": "ca-job"}
	_, err := kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "job"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: selector},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"example.com/pool": "workers"},
					Containers: []corev1.Container{{Name: "work", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")}}}},
				},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	jobPods := func(ctx context.Context) ([]corev1.Pod, error) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=ca-job"})
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil }), nil
	}
	const wanted = 3
	// kube-scheduler has tried each pod and found no node for it.
	eventually(t, time.Minute, "3 pods Unschedulable", func(ctx context.Context) (bool, string) {
		pods, err := jobPods(ctx)
		if err != nil {
			return false, err.Error()
		}
		unschedulable := 0
		for _, pod := range pods {
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && pod.Spec.NodeName == "" {
					unschedulable++
				}
			}
		}
		return len(pods) == wanted && unschedulable == wanted, fmt.Sprintf("%d pods, %d Unschedulable", len(pods), unschedulable)
	})
	log.add("3 pods of 1500m Pending")

	// What cluster-autoscaler's binpacking estimate does, with the template.
	template, err := ca.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: id})
	require.NoError(t, err)
	node := &corev1.Node{}
	require.NoError(t, node.Unmarshal(template.NodeBytes))
	perNode := node.Status.Allocatable.Cpu().MilliValue() / 1500
	require.Positive(t, perNode, "a template node fits a pod")
	needed := int32((int64(wanted) + perNode - 1) / perNode)
	increased := time.Now()
	_, err = ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: needed})
	require.NoError(t, err)
	log.add("TemplateNodeInfo: %d pod(s) per node -> NodeGroupIncreaseSize(+%d)", perNode, needed)

	var firstNode time.Duration
	eventually(t, 2*time.Minute, "nodes Ready", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "workers")
		if err == nil && len(nodes) > 0 && firstNode == 0 {
			firstNode = time.Since(increased)
		}
		return converged(c, t, ns, "workers", int(needed))(ctx)
	})
	readyAfter := time.Since(increased)
	eventually(t, 2*time.Minute, "pods scheduled", func(ctx context.Context) (bool, string) {
		pods, err := jobPods(ctx)
		if err != nil {
			return false, err.Error()
		}
		scheduled := 0
		for _, pod := range pods {
			if pod.Spec.NodeName != "" {
				scheduled++
			}
		}
		return scheduled == wanted && len(pods) == wanted, fmt.Sprintf("%d of %d scheduled", scheduled, len(pods))
	})
	scheduledAfter := time.Since(increased)
	log.add("first Node object %s after IncreaseSize, %d Ready at %s, pods scheduled at %s", firstNode.Round(time.Millisecond),
		needed, readyAfter.Round(time.Millisecond), scheduledAfter.Round(time.Millisecond))
	busy := map[string]bool{}
	placed, err := jobPods(ctx)
	require.NoError(t, err)
	for _, pod := range placed {
		busy[pod.Spec.NodeName] = true
	}
	assert.Len(t, busy, 3, "one pod per node")

	// Two more nodes, idle; cluster-autoscaler removes exactly those.
	_, err = ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 2})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "5 nodes", converged(c, t, ns, "workers", 5))
	nodes, err := setNodes(ctx, t, ns, "workers")
	require.NoError(t, err)
	var idle []*protos.ExternalGrpcNode
	for _, n := range nodes {
		require.True(t, nodeutil.IsReady(&n))
		if !busy[n.Name] {
			idle = append(idle, &protos.ExternalGrpcNode{Name: n.Name, ProviderID: n.Spec.ProviderID, Labels: n.Labels})
		}
	}
	require.Len(t, idle, 2)
	_, err = ca.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: id, Nodes: idle})
	require.NoError(t, err)
	log.add("NodeGroupDeleteNodes(%s, %s) -> ok", idle[0].Name, idle[1].Name)
	eventually(t, 2*time.Minute, "3 nodes", converged(c, t, ns, "workers", 3))
	nodes, err = setNodes(ctx, t, ns, "workers")
	require.NoError(t, err)
	for _, n := range nodes {
		assert.True(t, busy[n.Name], "%s: only the idle nodes went", n.Name)
	}
	for _, before := range placed {
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, before.Name, metav1.GetOptions{})
		require.NoError(t, err, "pod %s undisturbed", before.Name)
		assert.Equal(t, before.Spec.NodeName, pod.Spec.NodeName, "pod %s undisturbed", before.Name)
		assert.Nil(t, pod.DeletionTimestamp, "pod %s undisturbed", before.Name)
	}
	log.add("3 nodes left, each with its pod")
}

// TestTemplateNodeIsPerNodeSet: cluster-autoscaler's template node is per
// node group. A NodeSet that overrides its class's machine (here the
// simulated capacity, as a tenant overrides instanceType) scales from zero
// as its own machine; its neighbour of the same class as the class's.
func TestTemplateNodeIsPerNodeSet(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca-template")
	createClass(t, "ca-overridable", func(class *nodesetv1alpha1.NodeClass) {
		twoCPUs(class)
		class.Spec.TenantOverrides = []string{"instanceType", "capacity.cpu", "capacity.memory"}
	})
	createAutoscaledSet(t, ns, "plain", "ca-overridable", 3)
	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns},
		Spec: nodesetv1alpha1.NodeSetSpec{
			NodeClassName: "ca-overridable",
			Replicas:      ptr.To[int32](0),
			Autoscaling:   &nodesetv1alpha1.Autoscaling{MinReplicas: 0, MaxReplicas: 3},
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.xlarge",
				Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	ca := autoscalerClient(t, c)
	templateOf := func(ctx context.Context, name string) (*corev1.Node, error) {
		resp, err := ca.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: ns + "/" + name})
		if err != nil {
			return nil, err
		}
		node := &corev1.Node{}
		return node, node.Unmarshal(resp.NodeBytes)
	}
	eventually(t, time.Minute, "the overriding set's own template node", func(ctx context.Context) (bool, string) {
		node, err := templateOf(ctx, "big")
		if err != nil {
			return false, err.Error()
		}
		cpu := ptr.To(node.Status.Allocatable[corev1.ResourceCPU]).String()
		return cpu == "16" && node.Labels[corev1.LabelInstanceTypeStable] == "sim.xlarge", cpu + " " + node.Labels[corev1.LabelInstanceTypeStable]
	})
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "big", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, set.Status.Capacity, "published in the NodeSet's status")
	assert.Equal(t, set.Status.TemplateHash, set.Status.Capacity.TemplateHash, "for the set's current template")
	eventually(t, time.Minute, "the plain set's template node is the class's machine", func(ctx context.Context) (bool, string) {
		node, err := templateOf(ctx, "plain")
		if err != nil {
			return false, err.Error()
		}
		cpu := ptr.To(node.Status.Allocatable[corev1.ResourceCPU]).String()
		return cpu == "2", cpu
	})
}

// TestAutoscalerRefusesNotAcceptedSet: the nodeset controller makes and
// removes no Node of a NodeSet that is not Accepted, so cluster-autoscaler's
// IncreaseSize and DeleteNodes are refused for it (FailedPrecondition), as
// cluster-autoscaler expects of a group that cannot scale now: a failed
// scale-up backs the group off and lets another group take the pending
// pods, where an answered one would stand for 15 minutes of upcoming nodes
// that never come; a failed deletion gives the node back (cluster-autoscaler
// lifts its ToBeDeleted taint), where an answered one would leave it
// drained, tainted and running. The server refuses them itself, with or
// without the webhook. Once the set is Accepted again, both work.
func TestAutoscalerRefusesNotAcceptedSet(t *testing.T) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca-unaccepted")
	allow := func(namespaces ...string) {
		t.Helper()
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "ca-unaccepted", metav1.GetOptions{})
			if err != nil {
				return err
			}
			class.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: namespaces}
			_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
			return err
		}))
	}
	createClass(t, "ca-unaccepted", func(class *nodesetv1alpha1.NodeClass) {
		twoCPUs(class)
		class.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{ns}}
	})
	createAutoscaledSet(t, ns, "pool", "ca-unaccepted", 3)
	ca := autoscalerClient(t, c)
	id := ns + "/pool"
	debug := func(ctx context.Context) string {
		groups, err := ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
		if err != nil {
			return err.Error()
		}
		for _, g := range groups.NodeGroups {
			if g.Id == id {
				return g.Debug
			}
		}
		return "not listed"
	}
	eventually(t, time.Minute, "the set is Accepted, as the server sees it", func(ctx context.Context) (bool, string) {
		d := debug(ctx)
		return strings.Contains(d, "Accepted=True"), d
	})
	_, err := ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 1})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "one node", converged(c, t, ns, "pool", 1))
	nodes, err := setNodes(ctx, t, ns, "pool")
	require.NoError(t, err)
	node := nodes[0]

	allow("elsewhere")
	eventually(t, time.Minute, "the set is not Accepted, as the server sees it", func(ctx context.Context) (bool, string) {
		d := debug(ctx)
		return strings.Contains(d, "NamespaceNotAllowed"), d
	})
	// The webhook refuses these writes too, but the refusal must not
	// depend on it (docs/design.md: its absence never weakens safety).
	withoutWebhook(t)
	_, err = ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 1})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "IncreaseSize of a set that gets no Nodes: %v", err)
	_, err = ca.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: id, Nodes: []*protos.ExternalGrpcNode{
		{Name: node.Name, ProviderID: node.Spec.ProviderID, Labels: node.Labels}}})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "DeleteNodes of a set whose Nodes are not removed: %v", err)
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "pool", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(1), *set.Spec.Replicas, "spec.replicas untouched")
	assert.Empty(t, set.Annotations[nodesetv1alpha1.AnnotationDeleteNodes], "no victim written down")

	allow(ns)
	eventually(t, time.Minute, "the set is Accepted again, as the server sees it", func(ctx context.Context) (bool, string) {
		d := debug(ctx)
		return strings.Contains(d, "Accepted=True"), d
	})
	_, err = ca.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: id, Nodes: []*protos.ExternalGrpcNode{
		{Name: node.Name, ProviderID: node.Spec.ProviderID, Labels: node.Labels}}})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "the named node is gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
