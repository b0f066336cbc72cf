package autoscaler

import (
	"context"
	"maps"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	nodesetfake "nodeset.dev/nodeset/pkg/generated/clientset/versioned/fake"
	"nodeset.dev/nodeset/pkg/generated/informers/externalversions"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/plan"
	"nodeset.dev/nodeset/pkg/resolve"
)

func testClass() *nodesetv1alpha1.NodeClass {
	return &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "sim"},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small",
				Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}}},
			NodeTemplate:    nodesetv1alpha1.NodeTemplate{Taints: []nodesetv1alpha1.Taint{{Key: "class", Value: "sim", Effect: "NoSchedule"}}},
			Limits:          &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](8)},
			TenantOverrides: []string{"instanceType", "capacity", "capacity.cpu", "capacity.memory"},
		},
		Status: nodesetv1alpha1.NodeClassStatus{Capacity: &nodesetv1alpha1.NodeCapacity{
			Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
			Labels:    map[string]string{corev1.LabelInstanceTypeStable: "sim.small"}}},
	}
}

func testSet(replicas int32) *nodesetv1alpha1.NodeSet {
	return &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", ResourceVersion: "1"},
		Spec: nodesetv1alpha1.NodeSetSpec{
			NodeClassName: "sim",
			Replicas:      ptr.To(replicas),
			Autoscaling:   &nodesetv1alpha1.Autoscaling{MinReplicas: 1, MaxReplicas: 6},
			Template:      nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"tier": "web"}},
		},
		Status: nodesetv1alpha1.NodeSetStatus{TemplateHash: "h1", Conditions: []metav1.Condition{
			{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue, Reason: "Accepted"}}},
	}
}

// setNode is a Node of set, of class sim, held by nodeset's finalizer.
func setNode(set *nodesetv1alpha1.NodeSet, name, providerID string, ready bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		nodesetv1alpha1.LabelNodeClass: "sim", nodesetv1alpha1.LabelTemplateHash: "h1"}, Finalizers: []string{nodesetv1alpha1.FinalizerTermination}},
		Spec: corev1.NodeSpec{ProviderID: providerID}}
	for k, v := range resolve.SelectorLabels(set) {
		n.Labels[k] = v
	}
	if ready {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	}
	return n
}

type fixture struct {
	server   *Server
	nodesets *nodesetfake.Clientset
	sets     cache.Indexer // the NodeSet lister's
}

func newFixture(t *testing.T, objects []runtime.Object, set *nodesetv1alpha1.NodeSet, nodes ...*corev1.Node) *fixture {
	t.Helper()
	return newClassFixture(t, testClass(), objects, set, nodes...)
}

func newClassFixture(t *testing.T, class *nodesetv1alpha1.NodeClass, objects []runtime.Object, set *nodesetv1alpha1.NodeSet, nodes ...*corev1.Node) *fixture {
	t.Helper()
	nodesets := nodesetfake.NewSimpleClientset(append([]runtime.Object{class, set}, objects...)...)
	var kubeObjects []runtime.Object
	for _, n := range nodes {
		kubeObjects = append(kubeObjects, n)
	}
	kube := kubefake.NewClientset(kubeObjects...)
	kubeFactory := kubeinformers.NewSharedInformerFactory(kube, 0)
	nodesetFactory := externalversions.NewSharedInformerFactory(nodesets, 0)
	for _, n := range nodes {
		require.NoError(t, kubeFactory.Core().V1().Nodes().Informer().GetIndexer().Add(n))
	}
	require.NoError(t, nodesetFactory.Nodeset().V1alpha1().NodeClasses().Informer().GetIndexer().Add(class))
	for _, o := range objects {
		if other, ok := o.(*nodesetv1alpha1.NodeClass); ok {
			require.NoError(t, nodesetFactory.Nodeset().V1alpha1().NodeClasses().Informer().GetIndexer().Add(other))
		}
	}
	require.NoError(t, nodesetFactory.Nodeset().V1alpha1().NodeSets().Informer().GetIndexer().Add(set))
	nodeLister := kubeFactory.Core().V1().Nodes().Lister()
	count := func(class *nodesetv1alpha1.NodeClass) (plan.ClassCount, error) {
		classNodes, err := nodeLister.List(labels.SelectorFromSet(labels.Set{nodesetv1alpha1.LabelNodeClass: class.Name}))
		return plan.CountClass(classNodes, nil), err
	}
	return &fixture{nodesets: nodesets, sets: nodesetFactory.Nodeset().V1alpha1().NodeSets().Informer().GetIndexer(), server: NewServer(nodesets, nodesetFactory.Nodeset().V1alpha1().NodeSets().Lister(),
		nodesetFactory.Nodeset().V1alpha1().NodeClasses().Lister(), nodeLister, count)}
}

func (f *fixture) set(t *testing.T) *nodesetv1alpha1.NodeSet {
	set, err := f.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	return set
}

func (f *fixture) writes() int {
	n := 0
	for _, a := range f.nodesets.Actions() {
		if a.Matches("update", "nodesets") || a.Matches("patch", "nodesets") {
			n++
		}
	}
	return n
}

func code(err error) codes.Code { return status.Code(err) }

func TestGroupsAndNodeGroupForNode(t *testing.T) {
	set := testSet(2)
	f := newFixture(t, []runtime.Object{&nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "fixed", Namespace: "team-a"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "sim"}}}, set, setNode(set, "web-a", "simulated:///web-a", true))
	ctx := context.Background()
	groups, err := f.server.NodeGroups(ctx, &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	require.Len(t, groups.NodeGroups, 1, "only NodeSets with spec.autoscaling")
	assert.Equal(t, "team-a/web", groups.NodeGroups[0].Id)
	assert.Equal(t, [2]int32{1, 6}, [2]int32{groups.NodeGroups[0].MinSize, groups.NodeGroups[0].MaxSize})

	resp, err := f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{
		Name: "web-a", ProviderID: "simulated:///web-a", Labels: setNode(set, "x", "", false).Labels}})
	require.NoError(t, err)
	assert.Equal(t, "team-a/web", resp.NodeGroup.Id)
	resp, err = f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: "web-a"}})
	require.NoError(t, err)
	assert.Equal(t, "team-a/web", resp.NodeGroup.Id, "found by name when the caller sends no labels")
	resp, err = f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: "control-plane-1",
		Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}}})
	require.NoError(t, err)
	assert.Empty(t, resp.NodeGroup.Id, "a node of no NodeSet")
}

func TestIncreaseSize(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil, testSet(2))
	_, err := f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 3})
	require.NoError(t, err)
	assert.Equal(t, int32(5), *f.set(t).Spec.Replicas)

	_, err = f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 2})
	assert.Equal(t, codes.InvalidArgument, code(err), "past maxReplicas: %v", err)
	_, err = f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 0})
	assert.Equal(t, codes.InvalidArgument, code(err))
	_, err = f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: math.MaxInt32})
	assert.Equal(t, codes.InvalidArgument, code(err), "a delta that would wrap round int32 is past maxReplicas: %v", err)
	assert.Contains(t, err.Error(), "spec.autoscaling.maxReplicas is 6")
	_, err = f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/nope", Delta: 1})
	assert.Equal(t, codes.NotFound, code(err))
	assert.Equal(t, int32(5), *f.set(t).Spec.Replicas)
}

func TestIncreaseSizeRespectsClassLimits(t *testing.T) {
	set := testSet(2)
	set.Spec.Autoscaling.MaxReplicas = 20
	var nodes []*corev1.Node
	other := testSet(6)
	other.Name = "other"
	for _, name := range []string{"o1", "o2", "o3", "o4", "o5", "o6"} {
		nodes = append(nodes, setNode(other, name, "simulated:///"+name, true))
	}
	f := newFixture(t, nil, set, nodes...)
	// 6 nodes of the class exist and the set will create 2: maxNodes 8 allows nothing more.
	_, err := f.server.NodeGroupIncreaseSize(context.Background(), &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 1})
	assert.Equal(t, codes.ResourceExhausted, code(err), "%v", err)
	assert.Contains(t, err.Error(), "spec.limits.maxNodes")
}

func TestDeleteNodesIsOneWrite(t *testing.T) {
	set := testSet(4)
	nodes := []*corev1.Node{
		setNode(set, "web-a", "simulated:///web-a", true),
		setNode(set, "web-b", "simulated:///web-b", true),
		setNode(set, "web-c", "", false), // never got a machine
		setNode(set, "web-d", "simulated:///web-d", true),
	}
	f := newFixture(t, nil, set, nodes...)
	ctx := context.Background()
	_, err := f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web", Nodes: []*protos.ExternalGrpcNode{
		{Name: "web-b", ProviderID: "simulated:///web-b"},
		// cluster-autoscaler's fake node for an instance that never registered
		{Name: unregisteredPrefix + "web-c", ProviderID: unregisteredPrefix + "web-c"},
	}})
	require.NoError(t, err)
	got := f.set(t)
	assert.Equal(t, int32(2), *got.Spec.Replicas)
	assert.Equal(t, "web-b,web-c", got.Annotations[nodesetv1alpha1.AnnotationDeleteNodes])
	assert.Equal(t, 1, f.writes(), "replicas and victims in one write")

	// The same request again (a retry) changes nothing.
	_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web", Nodes: []*protos.ExternalGrpcNode{
		{Name: "web-b", ProviderID: "simulated:///web-b"}}})
	require.NoError(t, err)
	assert.Equal(t, int32(2), *f.set(t).Spec.Replicas)

	_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web", Nodes: []*protos.ExternalGrpcNode{
		{Name: "elsewhere", ProviderID: "aws:///eu-west-1a/i-0123"}}})
	assert.Equal(t, codes.InvalidArgument, code(err), "a node outside the group is refused")
	assert.Contains(t, err.Error(), "does not belong to node group team-a/web")
}

func TestDeleteNodesRefusals(t *testing.T) {
	set := testSet(2)
	outdated := setNode(set, "web-b", "simulated:///web-b", true)
	outdated.Labels[nodesetv1alpha1.LabelTemplateHash] = "h0"
	f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true), outdated)
	_, err := f.server.NodeGroupDeleteNodes(context.Background(), &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web",
		Nodes: []*protos.ExternalGrpcNode{{Name: "web-a", ProviderID: "simulated:///web-a"}}})
	assert.Equal(t, codes.FailedPrecondition, code(err), "no scale-down while rolling out: %v", err)
	assert.Contains(t, err.Error(), "rolling out")

	set = testSet(1)
	f = newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true))
	_, err = f.server.NodeGroupDeleteNodes(context.Background(), &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web",
		Nodes: []*protos.ExternalGrpcNode{{Name: "web-a", ProviderID: "simulated:///web-a"}}})
	assert.Equal(t, codes.FailedPrecondition, code(err), "below minReplicas")
	assert.Zero(t, f.writes())
}

// TestScalingRefusedWhileNotAccepted: the NodeSetController makes and
// removes no Nodes of a set that is not Accepted, so a scale-up or a
// deletion is refused rather than answered and never carried out, and no
// template is offered for it (which would draw pods to it). Over its
// class's limits (Accepted=False, LimitExceeded) a set is still managed,
// and before its first verdict it will be.
func TestScalingRefusedWhileNotAccepted(t *testing.T) {
	notServed := &metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: "DriverNotServed",
		Message: `no node controller serves driver "simulated", so nothing validates NodeClass "sim"`}
	notValidated := &metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: "NodeClassNotValidated",
		Message: `NodeClass "sim" waits for the node controller serving driver "simulated" to validate generation 1`}
	validated := func(class *nodesetv1alpha1.NodeClass) {
		class.Generation = 2
		class.Status.DriverKind = nodesetv1alpha1.DriverKindMachine
		class.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeClassValid, Status: metav1.ConditionTrue, ObservedGeneration: 2}}
	}
	tests := []struct {
		name      string
		condition *metav1.Condition
		class     func(*nodesetv1alpha1.NodeClass)
		refused   string
	}{
		{name: "not accepted", condition: &metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: "NamespaceNotAllowed",
			Message: `namespace "team-a" may not use NodeClass "sim"`}, class: validated, refused: "not Accepted (NamespaceNotAllowed"},
		{name: "driver not served", condition: notServed, refused: "not Accepted (DriverNotServed"},
		{name: "driver served since the verdict", condition: notServed, class: validated},
		{name: "class not validated", condition: notValidated, refused: "not Accepted (NodeClassNotValidated"},
		{name: "class validated since the verdict", condition: notValidated, class: validated},
		{name: "over the class's limits", condition: &metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse,
			Reason: nodesetv1alpha1.ReasonLimitExceeded}},
		{name: "accepted", condition: &metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue, Reason: "Accepted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := testSet(2)
			if tt.condition != nil {
				set.Status.Conditions = []metav1.Condition{*tt.condition}
			}
			set.Spec.Autoscaling.MaxReplicas = 3
			class := testClass()
			if tt.class != nil {
				tt.class(class)
			}
			f := newClassFixture(t, class, nil, set, setNode(set, "web-a", "simulated:///web-a", true), setNode(set, "web-b", "simulated:///web-b", true))
			ctx := context.Background()
			groups, err := f.server.NodeGroups(ctx, &protos.NodeGroupsRequest{})
			require.NoError(t, err)
			require.Len(t, groups.NodeGroups, 1)
			if tt.condition != nil {
				assert.Contains(t, groups.NodeGroups[0].Debug, "Accepted="+string(tt.condition.Status)+" ("+tt.condition.Reason+")")
			}
			_, templateErr := f.server.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: "team-a/web"})
			if tt.refused == "" {
				require.NoError(t, templateErr)
			} else {
				assert.Equal(t, codes.Unimplemented, code(templateErr), "no template for a set nodeset makes no Nodes for: %v", templateErr)
				assert.ErrorContains(t, templateErr, tt.refused)
			}
			_, upErr := f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 1})
			_, downErr := f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web",
				Nodes: []*protos.ExternalGrpcNode{{Name: "web-a", ProviderID: "simulated:///web-a"}}})
			if tt.refused == "" {
				require.NoError(t, upErr)
				require.NoError(t, downErr)
				assert.Equal(t, 2, f.writes())
				return
			}
			for _, err := range []error{upErr, downErr} {
				assert.Equal(t, codes.FailedPrecondition, code(err), "%v", err)
				assert.ErrorContains(t, err, tt.refused)
			}
			assert.Zero(t, f.writes())
		})
	}
}

// TestNoTemplateOrScaleUpForAnUnjudgedSpec: a set the NodeSetController
// has not judged yet, or edited since its Accepted verdict into a spec
// nodeset makes no Nodes from (the webhook absent), gets no template and
// no scale-up: its template would carry the edit's labels, which could
// draw other tenants' pending pods to a scale-up whose Nodes never come.
// Taking its nodes away stays open.
func TestNoTemplateOrScaleUpForAnUnjudgedSpec(t *testing.T) {
	gpu := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: nodesetv1alpha1.NodeClassSpec{
		Driver:       nodesetv1alpha1.DriverSimulated,
		NodeTemplate: nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"example.com/pool": "gpu"}}}}
	editedSince := func(labels map[string]string) func(*nodesetv1alpha1.NodeSet) {
		return func(set *nodesetv1alpha1.NodeSet) {
			set.Generation = 2
			set.Status.Conditions[0].ObservedGeneration = 1
			maps.Copy(set.Spec.Template.Labels, labels)
		}
	}
	tests := []struct {
		name    string
		edit    func(*nodesetv1alpha1.NodeSet)
		refused string
	}{
		{name: "no verdict yet", edit: func(set *nodesetv1alpha1.NodeSet) { set.Status.Conditions = nil }, refused: "has not judged the NodeSet yet"},
		{name: "a reserved label since its verdict", edit: editedSince(map[string]string{"node-restriction.kubernetes.io/nodeset-tenant": "ml-research"}),
			refused: "node-restriction.kubernetes.io/nodeset-tenant"},
		{name: "another class's label since its verdict", edit: editedSince(map[string]string{"example.com/pool": "gpu"}),
			refused: "example.com/pool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := testSet(2)
			tt.edit(set)
			f := newClassFixture(t, testClass(), []runtime.Object{gpu}, set,
				setNode(set, "web-a", "simulated:///web-a", true), setNode(set, "web-b", "simulated:///web-b", true))
			ctx := context.Background()
			_, err := f.server.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: "team-a/web"})
			assert.Equal(t, codes.Unimplemented, code(err), "no template: %v", err)
			assert.ErrorContains(t, err, tt.refused)
			_, err = f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 1})
			assert.Equal(t, codes.FailedPrecondition, code(err), "no scale-up: %v", err)
			assert.ErrorContains(t, err, tt.refused)
			assert.Zero(t, f.writes())
			_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web",
				Nodes: []*protos.ExternalGrpcNode{{Name: "web-a", ProviderID: "simulated:///web-a"}}})
			require.NoError(t, err)
			assert.Equal(t, 1, f.writes())
		})
	}
}

// TestDecreaseTargetSizeOnlyForReplicasWithoutAMachine: cluster-autoscaler
// takes back a scale-up that timed out by its whole increase; only replicas
// whose machine was never made go, and a Node whose machine is booting
// (a provider ID, not Ready yet) is kept, as a cloud's group keeps its
// pending instances.
func TestDecreaseTargetSizeOnlyForReplicasWithoutAMachine(t *testing.T) {
	set := testSet(5)
	f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true), setNode(set, "web-b", "simulated:///web-b", true),
		setNode(set, "web-c", "", false), setNode(set, "web-d", "simulated:///web-d", false))
	ctx := context.Background()
	_, err := f.server.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: "team-a/web", Delta: -3})
	assert.Equal(t, codes.FailedPrecondition, code(err), "would take web-d, whose machine is booting")
	assert.ErrorContains(t, err, "attempt to delete existing nodes: team-a/web has 3 nodes with a machine")
	assert.Equal(t, int32(5), *f.set(t).Spec.Replicas)
	_, err = f.server.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: "team-a/web", Delta: -2})
	require.NoError(t, err, "the replica without a Node and web-c, which has no machine")
	assert.Equal(t, int32(3), *f.set(t).Spec.Replicas)
}

// TestDecreaseTargetSizeAfterDeleteNodes: a Node that DeleteNodes named is
// going, even while the controller has not deleted it yet, and does not hold
// the target size up.
func TestDecreaseTargetSizeAfterDeleteNodes(t *testing.T) {
	set := testSet(3)
	set.Annotations = map[string]string{nodesetv1alpha1.AnnotationDeleteNodes: "web-a"}
	f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true), setNode(set, "web-b", "simulated:///web-b", true),
		setNode(set, "web-c", "", false))
	ctx := context.Background()
	_, err := f.server.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: "team-a/web", Delta: -3})
	assert.Equal(t, codes.FailedPrecondition, code(err), "web-b is registered and stays")
	_, err = f.server.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: "team-a/web", Delta: -2})
	require.NoError(t, err, "web-a is on the delete list and web-c never registered")
	assert.Equal(t, int32(1), *f.set(t).Spec.Replicas)
}

func TestNodeGroupNodesStatesAndErrors(t *testing.T) {
	set := testSet(4)
	creating := setNode(set, "web-c", "", false)
	creating.Annotations = map[string]string{nodesetv1alpha1.AnnotationProvisioningError: "OutOfCapacity: out of capacity: no sim.small in zone a"}
	failing := setNode(set, "web-e", "", false)
	// Another writer of the Node's annotations (its kubelet) is not held
	// to the node controller's bound: the answer is.
	failing.Annotations = map[string]string{nodesetv1alpha1.AnnotationProvisioningError: "ProvisioningFailed: quota" + strings.Repeat(" é", 100_000)}
	deleting := setNode(set, "web-d", "simulated:///web-d", true)
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	// A Node with a machine is no failed creation, whatever its
	// annotations say: its kubelet may have written them, and
	// cluster-autoscaler would delete it.
	booting := setNode(set, "web-b", "simulated:///web-b", false)
	booting.Annotations = map[string]string{nodesetv1alpha1.AnnotationProvisioningError: "OutOfCapacity: written by the kubelet"}
	f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true), booting,
		creating, deleting, failing)
	resp, err := f.server.NodeGroupNodes(context.Background(), &protos.NodeGroupNodesRequest{Id: "team-a/web"})
	require.NoError(t, err)
	got := map[string]*protos.Instance{}
	for _, i := range resp.Instances {
		got[i.Id] = i
	}
	require.Len(t, got, 5)
	assert.Equal(t, protos.InstanceStatus_instanceRunning, got["simulated:///web-a"].Status.InstanceState)
	assert.Equal(t, protos.InstanceStatus_instanceCreating, got["simulated:///web-b"].Status.InstanceState, "not Ready yet")
	assert.Nil(t, got["simulated:///web-b"].Status.ErrorInfo, "the Node has its machine")
	assert.Equal(t, protos.InstanceStatus_instanceDeleting, got["simulated:///web-d"].Status.InstanceState)
	c := got[unregisteredPrefix+"web-c"]
	require.NotNil(t, c.Status.ErrorInfo)
	assert.Equal(t, int32(errorClassOutOfResources), c.Status.ErrorInfo.InstanceErrorClass, "capacity errors make cluster-autoscaler back off")
	assert.Equal(t, "OutOfCapacity", c.Status.ErrorInfo.ErrorCode)
	e := got[unregisteredPrefix+"web-e"].Status.ErrorInfo
	assert.Equal(t, int32(errorClassOther), e.InstanceErrorClass)
	assert.Equal(t, "ProvisioningFailed", e.ErrorCode)
	assert.LessOrEqual(t, len(e.ErrorMessage), nodeutil.ProvisioningErrorLimit)
	assert.True(t, utf8.ValidString(e.ErrorMessage), "cut at a character boundary")
}

// TestTemplateNodeWireCompatibility checks the bytes on the wire: the Node
// is in field 1 (read by releases before 1.35 as an embedded message) and
// field 2 (read by later releases as bytes), identical, and decodes.
func TestTemplateNodeWireCompatibility(t *testing.T) {
	f := newFixture(t, nil, testSet(0))
	resp, err := f.server.NodeGroupTemplateNodeInfo(context.Background(), &protos.NodeGroupTemplateNodeInfoRequest{Id: "team-a/web"})
	require.NoError(t, err)
	wire, err := proto.Marshal(resp)
	require.NoError(t, err)

	fields := map[protowire.Number][]byte{}
	for b := wire; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		require.GreaterOrEqual(t, n, 0)
		b = b[n:]
		require.Equal(t, protowire.BytesType, typ, "field %d is length-delimited", num)
		value, m := protowire.ConsumeBytes(b)
		require.GreaterOrEqual(t, m, 0)
		fields[num] = value
		b = b[m:]
	}
	require.Contains(t, fields, protowire.Number(1))
	require.Contains(t, fields, protowire.Number(2))
	assert.Equal(t, fields[1], fields[2])

	node := &corev1.Node{}
	require.NoError(t, node.Unmarshal(fields[1]), "field 1 is a core/v1 Node")
	assert.Equal(t, "4", ptr.To(node.Status.Capacity[corev1.ResourceCPU]).String())
	assert.Equal(t, "16Gi", ptr.To(node.Status.Capacity[corev1.ResourceMemory]).String())
	assert.Equal(t, "web", node.Labels["tier"], "the NodeSet's template labels")
	assert.Equal(t, "sim.small", node.Labels[corev1.LabelInstanceTypeStable])
	assert.Equal(t, "web", node.Labels[nodesetv1alpha1.LabelNodeSet])
	var taintKeys []string
	for _, taint := range node.Spec.Taints {
		taintKeys = append(taintKeys, taint.Key)
	}
	assert.Contains(t, taintKeys, "class", "the class's taints")
	assert.NotContains(t, taintKeys, nodesetv1alpha1.TaintUnregistered, "a template node is a registered one")
	assert.NotContains(t, taintKeys, nodeutil.AutoscalerStartupTaint)
	require.Len(t, node.Status.Conditions, 1)
	assert.Equal(t, corev1.NodeReady, node.Status.Conditions[0].Type)
}

// TestGetOptionsIsUnimplemented: cluster-autoscaler's externalgrpc client
// builds a group's options from the protocol's fields only, and the
// protocol has no max node startup time, so any answer would set it to 0.
// The server answers Unimplemented for every group, with or without the
// annotations that once carried per-NodeSet options, known or not.
func TestGetOptionsIsUnimplemented(t *testing.T) {
	set := testSet(1)
	set.Annotations = map[string]string{"cluster-autoscaler.nodeset.dev/scale-down-unneeded-time": "5m"}
	f := newFixture(t, nil, set)
	for _, id := range []string{"team-a/web", "team-a/not-cached-yet"} {
		resp, err := f.server.NodeGroupGetOptions(context.Background(), &protos.NodeGroupAutoscalingOptionsRequest{Id: id,
			Defaults: &protos.NodeGroupAutoscalingOptions{ScaleDownUtilizationThreshold: 0.5, MaxNodeProvisionDuration: durationpb.New(15 * time.Minute)}})
		assert.Equal(t, codes.Unimplemented, code(err), "%s: %v", id, err)
		assert.Nil(t, resp)
	}
}

// TestFakeNodesOfUnregisteredInstances: cluster-autoscaler makes a "fake"
// node, named by the instance id and without labels, of every instance it
// cannot match to a Node by provider ID. A placeholder id belongs to its
// Node's NodeSet while that Node has no provider ID; a provider ID to the
// NodeSet of the Node carrying it. A placeholder whose Node has registered
// since (a stale cache entry) belongs to no group.
func TestFakeNodesOfUnregisteredInstances(t *testing.T) {
	set := testSet(3)
	f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true), setNode(set, "web-b", "", false),
		setNode(set, "web-c", "simulated:///web-c", false))
	ctx := context.Background()
	for _, tc := range []struct {
		name, id, group string
	}{
		{"unregistered", unregisteredPrefix + "web-b", "team-a/web"},
		{"registered since: stale", unregisteredPrefix + "web-a", ""},
		{"gone", unregisteredPrefix + "web-z", ""},
		{"by provider id", "simulated:///web-c", "team-a/web"},
		{"unknown provider id", "simulated:///elsewhere", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: tc.id, ProviderID: tc.id}})
			require.NoError(t, err)
			assert.Equal(t, tc.group, resp.NodeGroup.Id)
		})
	}
}

// TestDeleteNodesByStaleInstanceID: a deletion that names a Node by its
// placeholder id after the Node registered (cluster-autoscaler's cached
// instance list is older than the provider ID) deletes nothing for that id,
// and does not fail: the other nodes of the call go; the same id deletes
// the Node while it is still unregistered.
func TestDeleteNodesByStaleInstanceID(t *testing.T) {
	set := testSet(3)
	f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true), setNode(set, "web-b", "", false),
		setNode(set, "web-c", "simulated:///web-c", true))
	ctx := context.Background()
	_, err := f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web", Nodes: []*protos.ExternalGrpcNode{
		{Name: unregisteredPrefix + "web-a", ProviderID: unregisteredPrefix + "web-a"}}})
	require.NoError(t, err)
	assert.Zero(t, f.writes(), "nothing to delete")

	_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web", Nodes: []*protos.ExternalGrpcNode{
		{Name: unregisteredPrefix + "web-a", ProviderID: unregisteredPrefix + "web-a"},
		{Name: unregisteredPrefix + "web-b", ProviderID: unregisteredPrefix + "web-b"}}})
	require.NoError(t, err)
	got := f.set(t)
	assert.Equal(t, int32(2), *got.Spec.Replicas, "web-b goes, web-a stays")
	assert.Equal(t, "web-b", got.Annotations[nodesetv1alpha1.AnnotationDeleteNodes])

	_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web", Nodes: []*protos.ExternalGrpcNode{
		{Name: "web-c", ProviderID: "simulated:///other"}}})
	assert.Equal(t, codes.InvalidArgument, code(err), "a name and a provider ID of different Nodes: %v", err)
}

func TestProtocolAnswers(t *testing.T) {
	f := newFixture(t, nil, testSet(1))
	ctx := context.Background()
	_, err := f.server.Refresh(ctx, &protos.RefreshRequest{})
	assert.NoError(t, err)
	label, err := f.server.GPULabel(ctx, &protos.GPULabelRequest{})
	require.NoError(t, err)
	assert.Equal(t, GPULabel, label.Label)
	types, err := f.server.GetAvailableGPUTypes(ctx, &protos.GetAvailableGPUTypesRequest{})
	require.NoError(t, err)
	assert.Empty(t, types.GpuTypes)
	_, err = f.server.PricingNodePrice(ctx, &protos.PricingNodePriceRequest{})
	assert.Equal(t, codes.Unimplemented, code(err), "the protocol's answer for no pricing")
	_, err = f.server.PricingPodPrice(ctx, &protos.PricingPodPriceRequest{})
	assert.Equal(t, codes.Unimplemented, code(err))
	size, err := f.server.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: "team-a/web"})
	require.NoError(t, err)
	assert.Equal(t, int32(1), size.TargetSize)
}

// TestOverridingSetGetsItsOwnTemplateNode: a NodeSet that overrides the
// class's machine is scaled from zero with the capacity published for its
// own template, never the class's; until it is published there is none.
func TestOverridingSetGetsItsOwnTemplateNode(t *testing.T) {
	set := testSet(0)
	set.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.large",
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")}}
	f := newFixture(t, nil, set)
	_, err := f.server.TemplateNode(set)
	assert.Equal(t, codes.Unimplemented, code(err), "no capacity published for the set's template yet: not the class's 4 CPUs: %v", err)

	class := testClass()
	effective, err := resolve.EffectiveSpec(class, set)
	require.NoError(t, err)
	hash := resolve.TemplateHash(&effective, set)
	set.Status.Capacity = &nodesetv1alpha1.TemplateCapacity{TemplateHash: "stale", NodeCapacity: nodesetv1alpha1.NodeCapacity{
		Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}
	_, err = f.server.TemplateNode(set)
	assert.Equal(t, codes.Unimplemented, code(err), "a capacity of another template is stale: %v", err)

	set.Status.Capacity = &nodesetv1alpha1.TemplateCapacity{TemplateHash: hash, NodeCapacity: nodesetv1alpha1.NodeCapacity{
		Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")},
		Labels:    map[string]string{corev1.LabelInstanceTypeStable: "sim.large"}}}
	node, err := f.server.TemplateNode(set)
	require.NoError(t, err)
	assert.Equal(t, "16", ptr.To(node.Status.Capacity[corev1.ResourceCPU]).String())
	assert.Equal(t, "64Gi", ptr.To(node.Status.Allocatable[corev1.ResourceMemory]).String())
	assert.Equal(t, "sim.large", node.Labels[corev1.LabelInstanceTypeStable])

	assert.NotContains(t, node.Labels, GPULabel, "no GPU, no GPU label")

	set.Status.Capacity.Resources["nvidia.com/gpu"] = resource.MustParse("4")
	node, err = f.server.TemplateNode(set)
	require.NoError(t, err)
	assert.Equal(t, "nvidia.com-gpu", node.Labels[GPULabel], "a new node with GPUs carries the GPU label, as the set's Nodes do")

	plain := testSet(0)
	node, err = f.server.TemplateNode(plain)
	require.NoError(t, err, "a set that overrides nothing uses the class's capacity")
	assert.Equal(t, "4", ptr.To(node.Status.Capacity[corev1.ResourceCPU]).String())
}

// TestAKubeletsOwnNodeIsInNoNodeGroup: a Node its kubelet registered with a
// set's labels and nodeset's finalizer, but no seal, since its class seals
// its Nodes, is in no node group, even before the node controller marks
// it; nor is one with the set's labels and no finalizer: cluster-autoscaler
// never takes either for one of the set's nodes (and never deletes one,
// lowering the set's replicas for it).
func TestAKubeletsOwnNodeIsInNoNodeGroup(t *testing.T) {
	set := testSet(2)
	since := time.Now().Add(-time.Hour)
	class := testClass()
	class.Status.SealedSince = &metav1.Time{Time: since}
	sealed := setNode(set, "web-a", "simulated:///web-a", true)
	sealed.Labels[nodesetv1alpha1.LabelSeal] = nodeutil.Seal("team-a", "web", "sim")
	stranger := setNode(set, "kubelets-own", "", true)
	stranger.Finalizers = []string{nodesetv1alpha1.FinalizerTermination}
	stranger.CreationTimestamp = metav1.NewTime(since.Add(time.Minute))
	// Labelled so by its kubelet, without the finalizer.
	unheld := setNode(set, "labelled-by-hand", "", true)
	unheld.Finalizers = nil
	unheld.Status.NodeInfo.KubeletVersion = "v1.37.2"
	f := newClassFixture(t, class, nil, set, sealed, stranger, unheld)
	ctx := context.Background()
	for _, tc := range []struct {
		node *corev1.Node
		want string
	}{{sealed, "team-a/web"}, {stranger, ""}, {unheld, ""}} {
		for _, labels := range []map[string]string{tc.node.Labels, nil} {
			resp, err := f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{
				Name: tc.node.Name, ProviderID: tc.node.Spec.ProviderID, Labels: labels}})
			require.NoError(t, err)
			assert.Equal(t, tc.want, resp.NodeGroup.Id, "node %s, with labels %v", tc.node.Name, labels)
		}
	}
	nodes, err := f.server.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: "team-a/web"})
	require.NoError(t, err)
	var ids []string
	for _, i := range nodes.Instances {
		ids = append(ids, i.Id)
	}
	assert.Equal(t, []string{"simulated:///web-a", "nodeset-pending://team-a/web/1"}, ids,
		"NodeGroupNodes leaves the stranger out too: the second replica is still to come")
}

// TestARealNodeIsNoPlaceholderOfAnotherSet: a Node's provider ID may be set
// once, to anything, by its kubelet. A Node that takes another set's
// placeholder instance id as its provider ID is still the Node it is: it
// maps to no other set, and a deletion of it takes nothing of that set (no
// replica lowered, no Node of the set deleted). cluster-autoscaler's own
// fake nodes, named by the id, still map.
func TestARealNodeIsNoPlaceholderOfAnotherSet(t *testing.T) {
	set := testSet(3)
	victim := setNode(set, "web-b", "", false)
	for _, id := range []string{"nodeset-pending://team-a/web/1", unregisteredPrefix + "web-b"} {
		t.Run(id, func(t *testing.T) {
			evil := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "evil"}, Spec: corev1.NodeSpec{ProviderID: id}}
			f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true), victim, evil)
			ctx := context.Background()
			resp, err := f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: "evil", ProviderID: id}})
			require.NoError(t, err)
			assert.Empty(t, resp.GetNodeGroup().GetId(), "a real Node is not another set's instance")
			resp, err = f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: id, ProviderID: id}})
			require.NoError(t, err)
			assert.Equal(t, "team-a/web", resp.GetNodeGroup().GetId(), "cluster-autoscaler's fake node of the instance")

			_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web",
				Nodes: []*protos.ExternalGrpcNode{{Name: "evil", ProviderID: id}}})
			assert.Equal(t, codes.InvalidArgument, code(err), "not the group's: %v", err)
			assert.Zero(t, f.writes())
		})
	}
}
