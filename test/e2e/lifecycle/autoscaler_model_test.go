package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
)

// fourCPUs gives a class's simulated machines 4 CPUs and 16Gi.
func fourCPUs(class *nodesetv1alpha1.NodeClass) {
	class.Spec.Simulated.Capacity = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
}

type modelSet struct {
	name, class   string
	replicas, max int32
	taint         *nodesetv1alpha1.Taint
}

type modelPods struct {
	pool     string
	cpu      []string
	tolerate *nodesetv1alpha1.Taint
}

func createModelSet(t *testing.T, namespace string, s modelSet) {
	t.Helper()
	_, cs := clients(t)
	set := &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: namespace},
		Spec: nodesetv1alpha1.NodeSetSpec{
			NodeClassName: s.class,
			Replicas:      ptr.To(s.replicas),
			Autoscaling:   &nodesetv1alpha1.Autoscaling{MinReplicas: 0, MaxReplicas: s.max},
			Template:      nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"example.com/pool": s.name}},
		},
	}
	if s.taint != nil {
		set.Spec.Template.Taints = []nodesetv1alpha1.Taint{*s.taint}
	}
	_, err := cs.NodesetV1alpha1().NodeSets(namespace).Create(context.Background(), set, metav1.CreateOptions{})
	require.NoError(t, err)
}

func createModelPods(t *testing.T, namespace string, p modelPods) []string {
	t.Helper()
	kube, _ := clients(t)
	var names []string
	for i, cpu := range p.cpu {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", p.pool, i)},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"example.com/pool": p.pool},
				Containers: []corev1.Container{{Name: "work", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}},
			},
		}
		// The startup taints (NoExecute) are tolerated: kube-controller-
		// manager's taint-eviction controller reads Nodes from its own
		// cache, and under load it evicted a pod that kube-scheduler had
		// just placed on a Node whose startup taints were already lifted
		// (its Events: Scheduled, then TaintManagerEviction). The pods
		// still wait for Ready: a new Node is not-ready:NoSchedule until
		// then. What this test counts is cluster-autoscaler's accounting.
		for _, taint := range resolve.StartupTaints() {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: taint.Key, Operator: corev1.TolerationOpExists, Effect: taint.Effect})
		}
		if p.tolerate != nil {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: p.tolerate.Key, Operator: corev1.TolerationOpEqual, Value: p.tolerate.Value,
				Effect: corev1.TaintEffect(p.tolerate.Effect)})
		}
		_, err := kube.CoreV1().Pods(namespace).Create(context.Background(), pod, metav1.CreateOptions{})
		require.NoError(t, err)
		names = append(names, pod.Name)
	}
	return names
}

// templateReady waits until cluster-autoscaler could build the set's
// template node (the node controller has published its capacity).
func templateReady(t *testing.T, ca protos.CloudProviderClient, id string) {
	t.Helper()
	eventually(t, time.Minute, id+" template node", func(ctx context.Context) (bool, string) {
		_, err := ca.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: id})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// TestAutoscalerModelScaleUps runs cluster-autoscaler's accounting (caModel,
// with its default flags) against both controllers, the API server and
// kube-scheduler, and counts the nodes it adds for pending pods: exactly
// the nodes the pods need, from one node, from zero, in several groups at
// once, with template taints and with mixed pod and node sizes. Every new
// Node carries a startup taint cluster-autoscaler knows by default.
func TestAutoscalerModelScaleUps(t *testing.T) {
	c := startControllers(t)
	createClass(t, "ca-model-2cpu", twoCPUs)
	createClass(t, "ca-model-4cpu", fourCPUs)
	batch := &nodesetv1alpha1.Taint{Key: "example.com/dedicated", Value: "batch", Effect: "NoSchedule"}
	scenarios := []struct {
		name   string
		sets   []modelSet
		pods   []modelPods
		needed int32
	}{
		{"from one node", []modelSet{{name: "one", class: "ca-model-2cpu", replicas: 1, max: 6}},
			[]modelPods{{pool: "one", cpu: []string{"1500m", "1500m", "1500m"}}}, 2},
		{"from zero", []modelSet{{name: "zero", class: "ca-model-2cpu", max: 6}},
			[]modelPods{{pool: "zero", cpu: []string{"1500m", "1500m", "1500m"}}}, 3},
		{"several groups", []modelSet{{name: "small", class: "ca-model-2cpu", max: 6}, {name: "large", class: "ca-model-4cpu", max: 6}},
			[]modelPods{{pool: "small", cpu: []string{"1500m", "1500m"}}, {pool: "large", cpu: []string{"1500m", "1500m", "1500m"}}}, 4},
		{"template taint", []modelSet{{name: "tainted", class: "ca-model-2cpu", max: 6, taint: batch}},
			[]modelPods{{pool: "tainted", cpu: []string{"1500m", "1500m"}, tolerate: batch}}, 2},
		{"mixed sizes", []modelSet{{name: "narrow", class: "ca-model-2cpu", max: 6}, {name: "wide", class: "ca-model-4cpu", max: 6}},
			[]modelPods{{pool: "narrow", cpu: []string{"1100m", "1500m", "1900m"}}, {pool: "wide", cpu: []string{"2500m", "2500m", "1500m"}}}, 5},
	}
	var report []string
	var added, needed int32
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ns := createNamespace(t, fmt.Sprintf("ca-model-%d", i))
			model := newCAModel(t, c, ns, caDefaultFlags)
			for _, s := range sc.sets {
				createModelSet(t, ns, s)
				if s.replicas > 0 {
					eventually(t, 2*time.Minute, s.name+" at its start size", converged(c, t, ns, s.name, int(s.replicas)))
				}
				templateReady(t, model.ca, ns+"/"+s.name)
			}
			var pods []string
			for _, p := range sc.pods {
				pods = append(pods, createModelPods(t, ns, p)...)
			}
			kube, _ := clients(t)
			start := time.Now()
			eventually(t, 3*time.Minute, "pods placed on new nodes", func(ctx context.Context) (bool, string) {
				if err := model.loop(ctx); err != nil {
					return false, "model: " + err.Error()
				}
				list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err.Error()
				}
				for _, pod := range list.Items {
					if pod.Spec.NodeName == "" {
						return false, pod.Name + " pending"
					}
				}
				for _, s := range sc.sets {
					if ok, why := converged(c, t, ns, s.name, int(s.replicas+model.increased[ns+"/"+s.name]))(ctx); !ok {
						return false, why
					}
				}
				if len(list.Items) != len(pods) {
					return false, fmt.Sprintf("%d of %d pods; %s", len(list.Items), len(pods), whatBecameOf(ctx, kube, ns, pods, list.Items))
				}
				return true, ""
			})
			var got int32
			for _, n := range model.increased {
				got += n
			}
			assert.Equal(t, sc.needed, got, "new nodes for the pending pods (per group: %v)", model.increased)
			assert.Empty(t, model.foreignTaints, "new Nodes starting with no startup taint cluster-autoscaler knows")
			added += got
			needed += sc.needed
			report = append(report, fmt.Sprintf("%-16s needed %d, added %d (ratio %.2f) in %d loops, %s",
				sc.name, sc.needed, got, float64(got)/float64(sc.needed), model.loops, time.Since(start).Round(100*time.Millisecond)))
		})
	}
	t.Logf("new nodes per scale-up / nodes needed:\n  %s\n  all: %d / %d = %.2f", strings.Join(report, "\n  "), added, needed, float64(added)/float64(needed))
}

// whatBecameOf says, for each of the pods named that is not among present,
// the Events recorded about it: who deleted a pod the test needs.
func whatBecameOf(ctx context.Context, kube kubernetes.Interface, namespace string, names []string, present []corev1.Pod) string {
	here := map[string]bool{}
	for _, p := range present {
		here[p.Name] = true
	}
	var out []string
	for _, name := range names {
		if here[name] {
			continue
		}
		events, err := kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			out = append(out, name+": "+err.Error())
			continue
		}
		var said []string
		for _, e := range events.Items {
			said = append(said, fmt.Sprintf("%s %s/%s: %s", e.Source.Component+e.ReportingController, e.Type, e.Reason, e.Message))
		}
		out = append(out, fmt.Sprintf("%s gone, its Events: %v", name, said))
	}
	return strings.Join(out, "; ")
}

// TestAutoscalerModelUnregisteredInstances: cluster-autoscaler (caModel,
// with --max-node-provision-time=10s) gives up on an instance that never
// registers and deletes exactly its Node through its fake node; a stale
// placeholder id left in its cached instance list after the Node registered
// never deletes that Node.
func TestAutoscalerModelUnregisteredInstances(t *testing.T) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca-model-stuck")
	createClass(t, "ca-model-stuck", twoCPUs)
	createAutoscaledSet(t, ns, "stuck", "ca-model-stuck", 4)
	id := ns + "/stuck"
	scale(t, ns, "stuck", 1)
	eventually(t, 2*time.Minute, "one registered node", converged(c, t, ns, "stuck", 1))
	flags := caDefaultFlags
	flags.maxNodeProvisionTime = 10 * time.Second
	model := newCAModel(t, c, ns, flags)
	model.scaleUp = false
	templateReady(t, model.ca, id)
	nodes, err := setNodes(ctx, t, ns, "stuck")
	require.NoError(t, err)
	registered := map[string]bool{nodes[0].Name: true}
	unregisteredNode := func(ctx context.Context) (string, error) {
		nodes, err := setNodes(ctx, t, ns, "stuck")
		for _, n := range nodes {
			if n.Spec.ProviderID == "" && n.DeletionTimestamp == nil {
				return n.Name, err
			}
		}
		return "", err
	}

	// A stale instance id: provisioning stalls while the set is scaled by
	// hand (no scale-up of cluster-autoscaler's, so its instance list is
	// refreshed only every 2 minutes); the model caches the placeholder id.
	c.node.Kill(syscall.SIGTERM)
	scale(t, ns, "stuck", 2)
	var late string
	// The model's first look at the group's instances must come after the
	// Node exists: the list is cached from then on. cluster-autoscaler keeps
	// it 2 minutes; a machine that registers within that time is seen by a
	// stale id. The model keeps it until the Node has registered, so that a
	// loaded machine, slower to register than 2 minutes, still tests the
	// same stale list.
	model.flags.instancesRefresh = time.Hour
	eventually(t, time.Minute, "the new Node, with no machine", func(ctx context.Context) (bool, string) {
		name, err := unregisteredNode(ctx)
		late = name
		return err == nil && name != "", fmt.Sprint("no unregistered Node yet ", err)
	})
	eventually(t, time.Minute, "the model caches a placeholder instance", func(ctx context.Context) (bool, string) {
		if err := model.loop(ctx); err != nil {
			return false, "model: " + err.Error()
		}
		_, cached := model.unregisteredSince["nodeset-unregistered://"+late]
		return cached, fmt.Sprintf("%v", model.unregisteredSince)
	})
	// Created with the machine's capacity in its status, before any kubelet.
	lateNode, err := kube.CoreV1().Nodes().Get(ctx, late, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "2", lateNode.Status.Capacity.Cpu().String(), "a new Node's status capacity, kept by the API server on create")
	require.NoError(t, c.node.Start())
	started := time.Now()
	// The machine registers; the model's cached list still has the old id.
	// Until the Node has registered, the model waits for it as long as it
	// takes: a loaded machine may take longer than the 10s provision time to
	// start the node controller and make the machine, and cluster-autoscaler
	// would then rightly give up on a Node that had not registered.
	model.flags.maxNodeProvisionTime = time.Hour
	eventually(t, 3*time.Minute, "the late node registers while the model's list is stale", func(ctx context.Context) (bool, string) {
		if err := model.loop(ctx); err != nil {
			return false, "model: " + err.Error()
		}
		if ok, why := converged(c, t, ns, "stuck", 2)(ctx); !ok {
			return false, why
		}
		// The loop's Node list may predate the registration that converged
		// then saw: the model has seen the stale id once one of its loops
		// listed the Node registered.
		_, ok := model.unregisteredSince["nodeset-unregistered://"+late]
		stale := model.sawStale["nodeset-unregistered://"+late]
		return ok && stale, fmt.Sprintf("stale entry %v, seen registered %v", ok, stale)
	})
	// Then the stale entry outlives the max node provision time.
	model.flags.maxNodeProvisionTime = flags.maxNodeProvisionTime
	eventually(t, time.Minute, "the stale entry outlives the max node provision time", func(ctx context.Context) (bool, string) {
		if err := model.loop(ctx); err != nil {
			return false, "model: " + err.Error()
		}
		since, ok := model.unregisteredSince["nodeset-unregistered://"+late]
		return ok && time.Since(since) > flags.maxNodeProvisionTime+2*time.Second, fmt.Sprintf("stale entry %v since %v", ok, since)
	})
	t.Logf("%s registered %s after the node controller started", late, time.Since(started).Round(time.Second))
	model.flags.instancesRefresh = caDefaultFlags.instancesRefresh
	assert.True(t, model.sawStale["nodeset-unregistered://"+late], "the model's list was stale")
	assert.Empty(t, model.deleteCalls, "nothing deleted by a stale id")
	// Within one loop cluster-autoscaler may have mapped the placeholder
	// before the Node registered: its deletion deletes nothing all the same.
	_, err = model.ca.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: id, Nodes: []*protos.ExternalGrpcNode{
		{Name: "nodeset-unregistered://" + late, ProviderID: "nodeset-unregistered://" + late}}})
	require.NoError(t, err, "a deletion by a stale id: nothing to delete")
	registered[late] = true
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "stuck", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(2), *set.Spec.Replicas)
	assert.Empty(t, set.Annotations[nodesetv1alpha1.AnnotationDeleteNodes])

	// The give-up path: cluster-autoscaler scales up while provisioning
	// stalls; the instance never registers, and after the max node
	// provision time its fake node is deleted through DeleteNodes.
	c.node.Kill(syscall.SIGTERM)
	_, err = model.ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 1})
	require.NoError(t, err)
	model.requests[id] = true
	var never string
	eventually(t, time.Minute, "the Node of the new instance, with no machine", func(ctx context.Context) (bool, string) {
		name, err := unregisteredNode(ctx)
		never = name
		return err == nil && name != "", fmt.Sprint("no unregistered Node yet ", err)
	})
	// cluster-autoscaler sees the new instance when it next lists the
	// group's instances: at once while it counts the group as scaling up,
	// but the Node nodeset creates at once counts as registered (unready,
	// since the max node startup time is 0 here), which ends the scale-up
	// request; the list is then refreshed on its 2-minute period. The test
	// ends that period now rather than waiting it out: the stopped node
	// controller runs the registered Nodes' simulated kubelets, and after
	// 50s without them kube-controller-manager would judge those Nodes
	// unreachable, which is not what this test is about.
	delete(model.instances, id)
	eventually(t, flags.maxNodeProvisionTime+time.Minute, "the never-registered node is given up", func(ctx context.Context) (bool, string) {
		if err := model.loop(ctx); err != nil {
			return false, "model: " + err.Error()
		}
		return len(model.deleteCalls) > 0, fmt.Sprintf("unregistered %q, since %v", never, model.unregisteredSince)
	})
	require.NotEmpty(t, never)
	require.Len(t, model.deleteCalls, 1, "one DeleteNodes call")
	assert.Equal(t, []string{id + ": OK", "nodeset-unregistered://" + never}, model.deleteCalls[0])
	eventually(t, time.Minute, "only the never-registered Node goes", func(ctx context.Context) (bool, string) {
		node, err := kube.CoreV1().Nodes().Get(ctx, never, metav1.GetOptions{})
		if err == nil && node.DeletionTimestamp == nil {
			return false, never + " not deleted"
		}
		return true, ""
	})
	require.NoError(t, c.node.Start())
	eventually(t, 2*time.Minute, "the two registered nodes stay", converged(c, t, ns, "stuck", 2))
	nodes, err = setNodes(ctx, t, ns, "stuck")
	require.NoError(t, err)
	for _, n := range nodes {
		assert.True(t, registered[n.Name], "%s: a registered node", n.Name)
		assert.True(t, nodeutil.IsReady(&n))
	}
}

// TestAutoscalerModelTakesBackATimedOutScaleUp: cluster-autoscaler 1.36
// takes back a scale-up whose nodes have not all come within the max node
// provision time, by its whole increase (DecreaseTargetSize). Machines
// that are made and booting, slower than that, are kept, as a cloud's group
// keeps its pending instances: the take-back is refused, and the NodeSet
// keeps its replicas and Nodes.
func TestAutoscalerModelTakesBackATimedOutScaleUp(t *testing.T) {
	c := startControllers(t)
	kube, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca-model-slow")
	createClass(t, "ca-model-slow", func(class *nodesetv1alpha1.NodeClass) {
		twoCPUs(class)
		class.Spec.Simulated.BootDelay = &metav1.Duration{Duration: time.Hour} // booting all through the test
	})
	createAutoscaledSet(t, ns, "slow", "ca-model-slow", 4)
	id := ns + "/slow"
	flags := caDefaultFlags
	flags.maxNodeProvisionTime = time.Hour // until the machines are made
	model := newCAModel(t, c, ns, flags)
	templateReady(t, model.ca, id)
	createModelPods(t, ns, modelPods{pool: "slow", cpu: []string{"1500m", "1500m"}})
	eventually(t, 2*time.Minute, "the model scales the set up by 2", func(ctx context.Context) (bool, string) {
		if err := model.loop(ctx); err != nil {
			return false, "model: " + err.Error()
		}
		return model.increased[id] == 2, fmt.Sprintf("increased by %d", model.increased[id])
	})
	var made []string
	eventually(t, 2*time.Minute, "both machines made (a provider ID), booting", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "slow")
		if err != nil {
			return false, err.Error()
		}
		made = made[:0]
		for _, n := range nodes {
			if n.Spec.ProviderID != "" && !nodeutil.IsReady(&n) {
				made = append(made, n.Name)
			}
		}
		return len(nodes) == 2 && len(made) == 2, fmt.Sprintf("%d Nodes, made %v", len(nodes), made)
	})

	model.flags.maxNodeProvisionTime = time.Second
	eventually(t, time.Minute, "the scale-up times out", func(ctx context.Context) (bool, string) {
		if err := model.loop(ctx); err != nil {
			return false, "model: " + err.Error()
		}
		return len(model.reverts) > 0, "no take-back yet"
	})
	assert.Equal(t, []string{id + " -2: FailedPrecondition"}, model.reverts, "booting machines are not taken back")
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "slow", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(2), *set.Spec.Replicas)
	for _, name := range made {
		node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Nil(t, node.DeletionTimestamp, "%s kept", name)
	}
}
