package nodeset

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodesetfake "nodeset.dev/nodeset/pkg/generated/clientset/versioned/fake"
	"nodeset.dev/nodeset/pkg/generated/informers/externalversions"
	"nodeset.dev/nodeset/pkg/resolve"
)

var testNow = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

type fixture struct {
	claims     cache.Indexer // the driver claims' Leases
	t          *testing.T
	kube       *kubefake.Clientset
	nodesets   *nodesetfake.Clientset
	controller *Controller
	recorder   *record.FakeRecorder
}

func validClass(name string) *nodesetv1alpha1.NodeClass {
	return &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver:         nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}},
			Tenancy:        nodesetv1alpha1.TenancyShared,
		},
		Status: nodesetv1alpha1.NodeClassStatus{Conditions: []metav1.Condition{{
			Type: nodesetv1alpha1.NodeClassValid, Status: metav1.ConditionTrue, ObservedGeneration: 1, Reason: "Valid"}},
			DriverKind: nodesetv1alpha1.DriverKindMachine},
	}
}

func newSet(replicas int32) *nodesetv1alpha1.NodeSet {
	return &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", UID: "set-uid", Generation: 2,
			Finalizers: []string{FinalizerNodes}},
		Spec: nodesetv1alpha1.NodeSetSpec{
			NodeClassName: "sim",
			Replicas:      ptr.To(replicas),
			Template: nodesetv1alpha1.NodeTemplate{
				Labels: map[string]string{"tier": "web"},
				Taints: []nodesetv1alpha1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}},
			},
			Strategy:     nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.RollingUpdateStrategy},
			DeletePolicy: nodesetv1alpha1.DeletePolicyNewest,
		},
	}
}

// setNode is a Node of set as the controller would have made it.
func setNode(t *testing.T, set *nodesetv1alpha1.NodeSet, class *nodesetv1alpha1.NodeClass, name string, age time.Duration, ready bool) *corev1.Node {
	spec, err := resolve.EffectiveSpec(class, set)
	require.NoError(t, err)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, UID: types.UID(name + "-uid"),
		CreationTimestamp: metav1.NewTime(testNow.Add(-age)),
		Labels:            resolve.NodeLabels(&spec, class.Name, set, resolve.TemplateHash(&spec, set)),
		Finalizers:        []string{nodesetv1alpha1.FinalizerTermination},
	}}
	if ready {
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(testNow.Add(-age / 2))}}
	}
	return node
}

func newFixture(t *testing.T, class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet, nodes ...*corev1.Node) *fixture {
	f := &fixture{t: t, recorder: record.NewFakeRecorder(100)}
	var kubeObjects []runtime.Object
	for _, n := range nodes {
		kubeObjects = append(kubeObjects, n)
	}
	kubeObjects = append(kubeObjects, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}})
	var nodesetObjects []runtime.Object
	if class != nil {
		nodesetObjects = append(nodesetObjects, class)
	}
	nodesetObjects = append(nodesetObjects, set)
	f.kube = kubefake.NewClientset(kubeObjects...)
	f.nodesets = nodesetfake.NewClientset(nodesetObjects...)
	generated := 0
	f.kube.PrependReactor("create", "nodes", func(action core.Action) (bool, runtime.Object, error) {
		node := action.(core.CreateAction).GetObject().(*corev1.Node)
		if node.Name == "" {
			generated++
			node.Name = fmt.Sprintf("%s%05d", node.GenerateName, generated)
		}
		return false, nil, nil
	})

	kubeFactory := kubeinformers.NewSharedInformerFactory(f.kube, 0)
	nodesetFactory := externalversions.NewSharedInformerFactory(f.nodesets, 0)
	c, err := NewController(context.Background(), f.kube, f.nodesets, f.recorder,
		kubeFactory.Core().V1().Nodes(), kubeFactory.Core().V1().Namespaces(),
		nodesetFactory.Nodeset().V1alpha1().NodeSets(), nodesetFactory.Nodeset().V1alpha1().NodeClasses(),
		Options{Now: func() time.Time { return testNow }, DriverClaims: kubeFactory.Coordination().V1().Leases(), DriverClaimsNamespace: "nodeset-system"})
	require.NoError(t, err)
	f.claims = kubeFactory.Coordination().V1().Leases().Informer().GetIndexer()
	c.claims.synced = func() bool { return true } // the informer is not run: its indexer is filled by hand
	for _, n := range nodes {
		require.NoError(t, kubeFactory.Core().V1().Nodes().Informer().GetIndexer().Add(n))
	}
	require.NoError(t, kubeFactory.Core().V1().Namespaces().Informer().GetIndexer().Add(kubeObjects[len(kubeObjects)-1]))
	if class != nil {
		require.NoError(t, nodesetFactory.Nodeset().V1alpha1().NodeClasses().Informer().GetIndexer().Add(class))
	}
	require.NoError(t, nodesetFactory.Nodeset().V1alpha1().NodeSets().Informer().GetIndexer().Add(set))
	f.controller = c
	return f
}

func (f *fixture) sync() error {
	return f.controller.syncNodeSet(context.Background(), "team-a/web")
}

func (f *fixture) nodeCreates() []*corev1.Node {
	var out []*corev1.Node
	for _, a := range f.kube.Actions() {
		if a.Matches("create", "nodes") {
			out = append(out, a.(core.CreateAction).GetObject().(*corev1.Node))
		}
	}
	return out
}

func (f *fixture) nodeDeletes() []string {
	var out []string
	for _, a := range f.kube.Actions() {
		if a.Matches("delete", "nodes") {
			out = append(out, a.(core.DeleteAction).GetName())
		}
	}
	return out
}

func (f *fixture) status() nodesetv1alpha1.NodeSetStatus {
	set, err := f.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(f.t, err)
	return set.Status
}

func TestScaleUpCreatesCompleteNodesOnce(t *testing.T) {
	class := validClass("sim")
	set := newSet(3)
	f := newFixture(t, class, set)
	require.NoError(t, f.sync())
	status := f.status()

	created := f.nodeCreates()
	require.Len(t, created, 3)
	for _, node := range created {
		assert.Regexp(t, `^web-[bcdfghjklmnpqrstvwxz2456789]{5}$`, node.Name, "named as generateName would, by the controller")
		assert.Equal(t, "team-a", node.Labels[nodesetv1alpha1.LabelNodeSetNamespace])
		assert.Equal(t, "web", node.Labels[nodesetv1alpha1.LabelNodeSet])
		assert.Equal(t, "sim", node.Labels[nodesetv1alpha1.LabelNodeClass])
		assert.NotEmpty(t, node.Labels[nodesetv1alpha1.LabelTemplateHash])
		assert.Equal(t, "web", node.Labels["tier"])
		assert.Equal(t, []string{nodesetv1alpha1.FinalizerTermination}, node.Finalizers)
		assert.Contains(t, node.Spec.Taints, corev1.Taint{Key: nodesetv1alpha1.TaintUnregistered, Effect: corev1.TaintEffectNoExecute})
		assert.Contains(t, node.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule})
	}

	// The informer has not seen the new Nodes: a second sync must not create more.
	require.NoError(t, f.sync())
	assert.Len(t, f.nodeCreates(), 3, "a lagging cache must not create Nodes twice")

	assert.Equal(t, "nodeset.dev/nodeset=web,nodeset.dev/nodeset-namespace=team-a", status.Selector)
	assert.Equal(t, int64(2), status.ObservedGeneration)
	accepted := findCondition(status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, accepted)
	assert.Equal(t, metav1.ConditionTrue, accepted.Status)
}

func TestScaleDownPicksVictims(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	nodes := []*corev1.Node{
		setNode(t, set, class, "web-old", 3*time.Hour, true),
		setNode(t, set, class, "web-mid", 2*time.Hour, true),
		setNode(t, set, class, "web-new", time.Hour, true),
		setNode(t, set, class, "web-sick", 4*time.Hour, false),
		setNode(t, set, class, "web-marked", 5*time.Hour, true),
	}
	nodes[4].Annotations = map[string]string{nodesetv1alpha1.AnnotationDeleteNode: "true"}
	f := newFixture(t, class, set, nodes...)
	require.NoError(t, f.sync())
	assert.ElementsMatch(t, []string{"web-marked", "web-sick", "web-new"}, f.nodeDeletes())
	assert.Empty(t, f.nodeCreates())
	// Deletions not yet observed: nothing more is deleted.
	require.NoError(t, f.sync())
	assert.Len(t, f.nodeDeletes(), 3)
}

func TestNotAcceptedCreatesNothing(t *testing.T) {
	unserved := validClass("sim")
	unserved.Status.Conditions = nil
	invalid := validClass("sim")
	invalid.Status.Conditions[0].Status = metav1.ConditionFalse
	invalid.Status.Conditions[0].Message = "capacity.cpu must not be negative"
	listed := validClass("sim")
	listed.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{"team-b"}}
	restricted := newSet(2)
	restricted.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.huge"}
	badLabel := newSet(2)
	badLabel.Spec.Template.Labels = map[string]string{"tier": "not a value!"}
	managed := newSet(2)
	managed.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.ManagedStrategy}
	deleting := validClass("sim")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(-time.Minute)}
	deleting.Finalizers = []string{nodesetv1alpha1.FinalizerInUse}
	late := newSet(2)
	late.CreationTimestamp = metav1.Now()
	spot := validClass("sim")
	spot.Spec.NodeTemplate.Labels = map[string]string{"lifecycle": "spot"}
	onDemand := newSet(2)
	onDemand.Spec.Template.Labels = map[string]string{"lifecycle": "on-demand"}
	tests := []struct {
		name    string
		class   *nodesetv1alpha1.NodeClass
		set     *nodesetv1alpha1.NodeSet
		reason  string
		message string
	}{
		{"class missing", nil, newSet(2), ReasonNodeClassNotFound, `NodeClass "sim" does not exist`},
		{"class not validated", unserved, newSet(2), ReasonNodeClassNotValidated, `NodeClass "sim" waits for the node controller serving driver "simulated" to validate generation 1: no node controller has claimed driver "simulated" yet`},
		{"class invalid", invalid, newSet(2), ReasonNodeClassInvalid, "capacity.cpu must not be negative"},
		{"namespace not allowed", listed, newSet(2), ReasonNamespaceNotAllowed, `namespace "team-a" may not use NodeClass "sim"`},
		{"restricted override", validClass("sim"), restricted, ReasonOverrideNotAllowed, "spec.simulated.instanceType is restricted by NodeClass sim"},
		{"bad label value", validClass("sim"), badLabel, ReasonInvalidTemplate, `spec.template.labels["tier"] value "not a value!"`},
		{"created after its class's deletion began", deleting, late, ReasonNodeClassDeleting, `NodeClass "sim" is being deleted`},
		{"a label the class stamps, changed", spot, onDemand, ReasonOverrideNotAllowed, `spec.template.labels["lifecycle"] "on-demand": NodeClass sim sets it to "spot"`},
		{"Managed on a machine driver", validClass("sim"), managed, ReasonStrategyNotSupported, `spec.strategy.type Managed lets a group driver roll the nodes, and NodeClass "sim" uses driver "simulated"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.class, tt.set)
			require.NoError(t, f.sync())
			assert.Empty(t, f.nodeCreates())
			accepted := findCondition(f.status().Conditions, nodesetv1alpha1.NodeSetAccepted)
			require.NotNil(t, accepted)
			assert.Equal(t, metav1.ConditionFalse, accepted.Status)
			assert.Equal(t, tt.reason, accepted.Reason)
			assert.Contains(t, accepted.Message, tt.message)
			assert.Contains(t, <-f.recorder.Events, ReasonNotAccepted)
		})
	}
}

func TestLimitsCapCreations(t *testing.T) {
	class := validClass("sim")
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](3)}
	set := newSet(5)
	f := newFixture(t, class, set, setNode(t, set, class, "web-a", time.Hour, true))
	require.NoError(t, f.sync())
	assert.Len(t, f.nodeCreates(), 2)
	accepted := findCondition(f.status().Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, accepted)
	assert.Equal(t, ReasonLimitExceeded, accepted.Reason)
	assert.Contains(t, accepted.Message, "at most 3 nodes per namespace")
}

func asgClass() *nodesetv1alpha1.NodeClass {
	class := validClass("sim")
	class.Spec.Driver = nodesetv1alpha1.DriverEKSASG
	class.Spec.Simulated = nil
	class.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Region: "eu-west-1"}
	class.Status.DriverKind = nodesetv1alpha1.DriverKindGroup
	return class
}

func TestGroupDriverNodesAreLeftToTheNodeController(t *testing.T) {
	f := newFixture(t, asgClass(), newSet(3))
	require.NoError(t, f.sync())
	assert.Empty(t, f.nodeCreates(), "the cloud group makes the machines, the node controller their Nodes")
}

func TestGroupDriverScaleDownChoosesTheVictims(t *testing.T) {
	class := asgClass()
	set := newSet(1)
	nodes := []*corev1.Node{
		setNode(t, set, class, "ip-old", 3*time.Hour, true),
		setNode(t, set, class, "ip-new", time.Hour, true),
		setNode(t, set, class, "ip-marked", 5*time.Hour, true),
	}
	nodes[2].Annotations = map[string]string{nodesetv1alpha1.AnnotationDeleteNode: "true"}
	f := newFixture(t, class, set, nodes...)
	require.NoError(t, f.sync())
	assert.ElementsMatch(t, []string{"ip-marked", "ip-new"}, f.nodeDeletes(),
		"the NodeSet chooses which instances go; the node controller terminates them with the decrement")
	assert.Empty(t, f.nodeCreates())
}

func TestGroupFailureIsAReplicaFailure(t *testing.T) {
	set := newSet(2)
	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "nodeset-web", Message: "out of capacity: InsufficientInstanceCapacity"}
	failure := syncedCondition(t, set, nodesetv1alpha1.NodeSetReplicaFailure)
	assert.Equal(t, ReasonGroupFailure, failure.Reason)
	assert.Equal(t, "cloud group nodeset-web: out of capacity: InsufficientInstanceCapacity", failure.Message)
}

// TestAMachineNotMadeIsAReplicaFailure: Nodes whose machine the driver
// could not make (the node controller's provisioning-error annotation, no
// providerID) make ReplicaFailure True, ProvisioningFailed, with how many
// and the first one's error; a Node being deleted, or one with its
// machine, is not counted, and the condition goes once every Node has one.
func TestAMachineNotMadeIsAReplicaFailure(t *testing.T) {
	class := validClass("sim")
	set := newSet(3)
	made := setNode(t, set, class, "web-a", time.Hour, true)
	made.Spec.ProviderID = "simulated:///web-a"
	made.Annotations = map[string]string{nodesetv1alpha1.AnnotationProvisioningError: "ProvisioningFailed: an earlier failure, since cleared"}
	full := setNode(t, set, class, "web-c", time.Minute, false)
	full.Annotations = map[string]string{nodesetv1alpha1.AnnotationProvisioningError: "OutOfCapacity: no room"}
	broken := setNode(t, set, class, "web-b", time.Minute, false)
	broken.Annotations = map[string]string{nodesetv1alpha1.AnnotationProvisioningError: "ProvisioningFailed: boom"}
	going := setNode(t, set, class, "web-0", time.Minute, false)
	going.Annotations = map[string]string{nodesetv1alpha1.AnnotationProvisioningError: "ProvisioningFailed: going anyway"}
	going.DeletionTimestamp = &metav1.Time{Time: testNow}
	now := testNow
	failure := findCondition(computeStatus(set, &resolution{accepted: metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue}},
		[]*corev1.Node{made, full, broken, going}, nil, now).Conditions, nodesetv1alpha1.NodeSetReplicaFailure)
	require.NotNil(t, failure)
	assert.Equal(t, metav1.ConditionTrue, failure.Status)
	assert.Equal(t, ReasonProvisioningFailed, failure.Reason)
	assert.Equal(t, "the driver could not make the machine of 2 of 3 nodes; web-b: ProvisioningFailed: boom", failure.Message)

	full.Spec.ProviderID, broken.Spec.ProviderID = "simulated:///web-c", "simulated:///web-b"
	set.Status.Conditions = []metav1.Condition{*failure}
	status := computeStatus(set, &resolution{accepted: metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue}},
		[]*corev1.Node{made, full, broken, going}, nil, now)
	assert.Nil(t, findCondition(status.Conditions, nodesetv1alpha1.NodeSetReplicaFailure), "every Node has its machine")
}

func TestCreateFailureLowersExpectationsAndReports(t *testing.T) {
	f := newFixture(t, validClass("sim"), newSet(4))
	f.kube.PrependReactor("create", "nodes", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewBadRequest("apiserver says no")
	})
	err := f.sync()
	require.Error(t, err)
	assert.Len(t, f.nodeCreates(), 1, "slow start: one failed call, not a storm")
	assert.True(t, f.controller.expectations.satisfied("team-a/web"), "failed creations are not expected")
	failure := findCondition(f.status().Conditions, nodesetv1alpha1.NodeSetReplicaFailure)
	require.NotNil(t, failure)
	assert.Contains(t, failure.Message, "apiserver says no")
}

// deletedSetFixture has the deleted set team-a/web of class sim with its
// two Nodes web-a and web-b.
func deletedSetFixture(t *testing.T) (f *fixture, class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet) {
	t.Helper()
	class = validClass("sim")
	set = newSet(2)
	set.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	nodes := []*corev1.Node{setNode(t, set, class, "web-a", time.Hour, true), setNode(t, set, class, "web-b", time.Hour, true)}
	return newFixture(t, class, set, nodes...), class, set
}

func TestDeletedNodeSetRemovesNodesThenFinalizer(t *testing.T) {
	f, class, set := deletedSetFixture(t)
	require.NoError(t, f.sync())
	assert.ElementsMatch(t, []string{"web-a", "web-b"}, f.nodeDeletes())

	g := newFixture(t, class, set)
	require.NoError(t, g.sync())
	got, err := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, got.Finalizers, FinalizerNodes)
}

// TestADeletedNodeSetCountsItsNodesDown: while a deleted set's Nodes drain
// and go, its status counts them (kubectl get shows the set going down),
// and Progressing says it is being deleted.
func TestADeletedNodeSetCountsItsNodesDown(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	set.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	set.Status = nodesetv1alpha1.NodeSetStatus{ObservedGeneration: 1, Replicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, UpdatedReplicas: 2,
		Conditions: []metav1.Condition{{Type: nodesetv1alpha1.NodeSetProgressing, Status: metav1.ConditionTrue, Reason: ReasonComplete,
			Message: "2 of 2 nodes ready", ObservedGeneration: 1}}}
	staying := setNode(t, set, class, "web-a", time.Hour, true)
	going := setNode(t, set, class, "web-b", time.Hour, true)
	going.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	f := newFixture(t, class, set, staying, going)
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"web-a"}, f.nodeDeletes())
	status := f.status()
	assert.EqualValues(t, 1, status.Replicas)
	assert.EqualValues(t, 1, status.ReadyReplicas)
	assert.EqualValues(t, 2, status.ObservedGeneration)
	progressing := meta.FindStatusCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing)
	require.NotNil(t, progressing)
	assert.Equal(t, ReasonDeleting, progressing.Reason)
	assert.Equal(t, "the NodeSet is being deleted; nodes left: 2, terminating: 1", progressing.Message)
}

// A deleting NodeSet whose earlier writes are not all observed still
// deletes the Nodes that came since (a cloud group's machines, given Nodes
// by the node controller), and does not ask again for the deletions still
// unobserved.
func TestDeletedNodeSetDoesNotWaitForUnobservedWrites(t *testing.T) {
	f, _, _ := deletedSetFixture(t)
	f.controller.expectations.expectDeletions("team-a/web", []string{"web-a", "web-gone"})
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"web-b"}, f.nodeDeletes())
}

func TestComputeStatus(t *testing.T) {
	class := validClass("sim")
	set := newSet(3)
	set.Spec.MinReadySeconds = 3600
	res := accepted(t, class, set)
	longReady := setNode(t, set, class, "a", 4*time.Hour, true)     // ready 2h
	freshReady := setNode(t, set, class, "b", 20*time.Minute, true) // ready 10m
	notReady := setNode(t, set, class, "c", time.Minute, false)
	outdated := setNode(t, set, class, "d", 5*time.Hour, true)
	outdated.Labels[nodesetv1alpha1.LabelTemplateHash] = "old"
	terminating := setNode(t, set, class, "e", 5*time.Hour, true)
	terminating.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))

	status := computeStatus(set, res, []*corev1.Node{longReady, freshReady, notReady, outdated, terminating}, nil, testNow)
	assert.Equal(t, int32(4), status.Replicas, "terminating nodes do not count")
	assert.Equal(t, int32(3), status.ReadyReplicas)
	assert.Equal(t, int32(2), status.AvailableReplicas, "minReadySeconds holds back the fresh node")
	assert.Equal(t, int32(3), status.UpdatedReplicas)
	progressing := findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing)
	require.NotNil(t, progressing)
	assert.Equal(t, ReasonRollingUpdate, progressing.Reason, "an outdated node under RollingUpdate")
	assert.Equal(t, "3 of 3 nodes updated, 1 outdated, 2 available", progressing.Message)
	available := findCondition(status.Conditions, nodesetv1alpha1.NodeSetAvailable)
	require.NotNil(t, available)
	assert.Equal(t, metav1.ConditionFalse, available.Status)

	status = computeStatus(set, res, []*corev1.Node{longReady, freshReady, notReady, outdated}, errors.New("quota"), testNow)
	progressing = findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing)
	assert.Equal(t, ReasonStalled, progressing.Reason)
	assert.Equal(t, metav1.ConditionFalse, progressing.Status)
	assert.Contains(t, progressing.Message, "quota")

	status = computeStatus(set, res, []*corev1.Node{longReady, freshReady, notReady, longReady.DeepCopy(), terminating}, nil, testNow)
	assert.Equal(t, ReasonScalingDown, findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing).Reason)

	set.Spec.Paused = true
	status = computeStatus(set, res, []*corev1.Node{longReady, outdated}, nil, testNow)
	progressing = findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing)
	assert.Equal(t, ReasonPaused, progressing.Reason)
	assert.Equal(t, metav1.ConditionUnknown, progressing.Status)
	set.Spec.Paused = false

	set.Spec.Replicas = ptr.To[int32](2)
	set.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.OnDeleteStrategy}
	status = computeStatus(set, res, []*corev1.Node{longReady, outdated}, nil, testNow)
	progressing = findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing)
	assert.Equal(t, ReasonComplete, progressing.Reason)
	assert.Contains(t, progressing.Message, "1 outdated, replaced when deleted (strategy OnDelete)")
	assert.Equal(t, metav1.ConditionTrue, findCondition(status.Conditions, nodesetv1alpha1.NodeSetAvailable).Status)

	// Complete only once every node has been Ready for minReadySeconds.
	set.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{}
	status = computeStatus(set, res, []*corev1.Node{longReady, freshReady}, nil, testNow)
	progressing = findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing)
	assert.Equal(t, ReasonWaitingForAvailable, progressing.Reason)
	assert.Equal(t, "1 of 2 nodes available (Ready for minReadySeconds, 3600)", progressing.Message)
	later := testNow.Add(time.Hour)
	status = computeStatus(set, res, []*corev1.Node{longReady, freshReady}, nil, later)
	assert.Equal(t, ReasonComplete, findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing).Reason)
}

func TestSlowStartBatch(t *testing.T) {
	var calls atomic.Int32
	ok, err := slowStartBatch(10, 1, func() error { calls.Add(1); return nil })
	require.NoError(t, err)
	assert.Equal(t, 10, ok)
	assert.Equal(t, int32(10), calls.Load())

	calls.Store(0)
	ok, err = slowStartBatch(10, 1, func() error {
		if calls.Add(1) > 3 {
			return errors.New("boom")
		}
		return nil
	})
	require.Error(t, err)
	assert.Equal(t, 3, ok)
	assert.LessOrEqual(t, calls.Load(), int32(7), "batches 1, 2, 4: the failing batch is the last")
}

func TestProgressOnlyStatusWritesAreSpaced(t *testing.T) {
	set := newSet(3)
	f := newFixture(t, validClass("sim"), set)
	now := testNow
	f.controller.now = func() time.Time { return now }
	f.controller.statusInterval = time.Second
	ctx := context.Background()
	statusWrites := func() int {
		n := 0
		for _, a := range f.nodesets.Actions() {
			if a.Matches("update", "nodesets") && a.GetSubresource() == "status" {
				n++
			}
		}
		return n
	}
	current := func() *nodesetv1alpha1.NodeSet {
		s, err := f.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		return s
	}
	status := nodesetv1alpha1.NodeSetStatus{ObservedGeneration: 2, Replicas: 1,
		Conditions: []metav1.Condition{{Type: "Progressing", Status: metav1.ConditionTrue, Reason: "Scaling", Message: "1 of 3"}}}
	require.NoError(t, f.controller.updateStatus(ctx, current(), status))
	assert.Equal(t, 1, statusWrites(), "the first write goes out")

	status.Replicas, status.Conditions[0].Message = 2, "2 of 3"
	require.NoError(t, f.controller.updateStatus(ctx, current(), status))
	assert.Equal(t, 1, statusWrites(), "a count within the interval waits")
	assert.Eventually(t, func() bool { return f.controller.queue.Len() == 1 }, 5*time.Second, 50*time.Millisecond,
		"and the set is synced again when the interval ends")

	now = now.Add(1100 * time.Millisecond)
	require.NoError(t, f.controller.updateStatus(ctx, current(), status))
	assert.Equal(t, 2, statusWrites(), "after the interval it is written")

	status.Conditions[0].Reason = "Complete"
	require.NoError(t, f.controller.updateStatus(ctx, current(), status))
	assert.Equal(t, 3, statusWrites(), "a new reason is written at once")
	status.ObservedGeneration = 3
	require.NoError(t, f.controller.updateStatus(ctx, current(), status))
	assert.Equal(t, 4, statusWrites(), "so is a new generation")
}

func TestGroupUpdateIsProgress(t *testing.T) {
	set := newSet(0)
	set.Spec.Strategy.Type = nodesetv1alpha1.ManagedStrategy
	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "UPDATING", UpdateID: "u-1", UpdateStatus: "InProgress"}
	progressing := syncedCondition(t, set, nodesetv1alpha1.NodeSetProgressing)
	assert.Equal(t, metav1.ConditionTrue, progressing.Status)
	assert.Equal(t, ReasonGroupUpdating, progressing.Reason)
	assert.Equal(t, "cloud group ng is UPDATING; update u-1 InProgress", progressing.Message)
}

func TestVictimAlreadyGoneDoesNotHoldTheSet(t *testing.T) {
	class := validClass("sim")
	set := newSet(1)
	nodes := []*corev1.Node{setNode(t, set, class, "web-old", 2*time.Hour, true), setNode(t, set, class, "web-new", time.Hour, true)}
	f := newFixture(t, class, set, nodes...)
	// Deleted by someone else; the informer has not said so yet.
	require.NoError(t, f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("nodes"), "", "web-new"))
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"web-new"}, f.nodeDeletes())
	assert.True(t, f.controller.expectations.satisfied("team-a/web"),
		"a deletion answered NotFound is not waited for: its watch event may have come and gone")
}

// syncedCondition syncs set (of an eks-asg class) once and returns the
// condition of type it then has.
func syncedCondition(t *testing.T, set *nodesetv1alpha1.NodeSet, conditionType string) *metav1.Condition {
	t.Helper()
	f := newFixture(t, asgClass(), set)
	require.NoError(t, f.sync())
	got, err := f.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	condition := meta.FindStatusCondition(got.Status.Conditions, conditionType)
	require.NotNil(t, condition)
	return condition
}

func TestNodeEventsOfASetAreBatched(t *testing.T) {
	class := validClass("sim")
	set := newSet(3)
	f := newFixture(t, class, set)
	f.controller.nodeEventBatch = time.Second
	for i := range 20 {
		f.controller.nodeAdded(setNode(t, set, class, fmt.Sprintf("web-%d", i), time.Minute, true))
	}
	assert.Zero(t, f.controller.queue.Len(), "nothing synced before the batch period")
	require.Eventually(t, func() bool { return f.controller.queue.Len() > 0 }, 5*time.Second, 50*time.Millisecond)
	assert.Equal(t, 1, f.controller.queue.Len(), "20 Node events, one sync")
	f.controller.queue.ShutDown()
}

// TestALargeSetIsSyncedLessOften: a sync goes over all of a set's Nodes, so
// a large set's Node events wait longer for their sync, in proportion to
// its size, and its syncs cost the same per Node and second.
func TestALargeSetIsSyncedLessOften(t *testing.T) {
	class, set := validClass("sim"), newSet(1)
	f := newFixture(t, class, set, setNode(t, set, class, "web-a", time.Hour, true))
	f.controller.nodeEventBatch = 500 * time.Millisecond
	assert.Equal(t, 500*time.Millisecond, f.controller.batchFor("team-a/web"), "never synced: the flag's period")
	require.NoError(t, f.sync())
	assert.Equal(t, 1, f.controller.sizes["team-a/web"], "a sync counts the set's Nodes")
	f.controller.sizes["team-a/web"] = 1000
	assert.Equal(t, 500*time.Millisecond, f.controller.batchFor("team-a/web"))
	f.controller.sizes["team-a/web"] = 10000
	assert.Equal(t, 2*time.Second, f.controller.batchFor("team-a/web"))
	f.controller.queue.ShutDown()
}

func TestTheLastAwaitedNodeEventSyncsAtOnce(t *testing.T) {
	class := validClass("sim")
	set := newSet(3)
	f := newFixture(t, class, set)
	f.controller.nodeEventBatch = time.Hour
	f.controller.expectations.expectCreations("team-a/web", 2)
	f.controller.nodeAdded(setNode(t, set, class, "web-a", time.Minute, false))
	assert.Zero(t, f.controller.queue.Len(), "one creation still awaited: the event waits for the batch")
	f.controller.nodeAdded(setNode(t, set, class, "web-b", time.Minute, false))
	assert.Equal(t, 1, f.controller.queue.Len(), "the last awaited creation: the next batch is decided at once")
	f.controller.queue.ShutDown()
}

// arrivingIndexer is a Node cache that learns of late, a Node the informer
// delivers right after the first lookup of a set's Nodes has answered.
type arrivingIndexer struct {
	cache.Indexer
	late    *corev1.Node
	deliver func(any)
	lists   int
}

func (l *arrivingIndexer) ByIndex(index, key string) ([]any, error) {
	nodes, err := l.Indexer.ByIndex(index, key)
	l.lists++
	if l.lists == 1 {
		l.deliver(l.late)
		return nodes, err
	}
	return append(nodes, l.late), err
}

// TestNodeObservedDuringTheSyncIsNotMadeTwice: the informer delivers the
// Node a set was waiting for while the sync lists the set's Nodes. The sync
// still waits for it instead of making a second one.
func TestNodeObservedDuringTheSyncIsNotMadeTwice(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	f := newFixture(t, class, set, setNode(t, set, class, "web-a", time.Hour, true))
	f.controller.expectations.expectCreations("team-a/web", 1)
	f.controller.nodeIndexer = &arrivingIndexer{
		Indexer: f.controller.nodeIndexer,
		late:    setNode(t, set, class, "web-b", 0, false),
		deliver: f.controller.nodeAdded,
	}
	require.NoError(t, f.sync())
	assert.Empty(t, f.nodeCreates(), "web-b was on its way; a third Node would be one too many")
	assert.True(t, f.controller.expectations.satisfied("team-a/web"), "web-b was observed")
}

// TestNodeWritesInFlightAreBounded: however many Nodes a scale-down names,
// at most MaxNodeWritesInFlight requests wait at the API server at once.
func TestNodeWritesInFlightAreBounded(t *testing.T) {
	f := newFixture(t, validClass("sim"), newSet(0))
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 * MaxNodeWritesInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = f.controller.writeNode(context.Background(), func() error {
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				<-release
				inFlight.Add(-1)
				return nil
			})
		}()
	}
	require.Eventually(t, func() bool { return inFlight.Load() == MaxNodeWritesInFlight }, 10*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	assert.Equal(t, int32(MaxNodeWritesInFlight), most.Load())
}

// TestObservedGenerationWaitsForTheDecision: while earlier writes are not
// observed, a sync decides nothing, and status.observedGeneration does not
// claim the new generation was acted on; the sync that decides advances it.
func TestObservedGenerationWaitsForTheDecision(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	set.Status.ObservedGeneration = 1
	f := newFixture(t, class, set)
	f.controller.expectations.expectCreations("team-a/web", 1)
	require.NoError(t, f.sync())
	assert.Empty(t, f.nodeCreates(), "waiting for the creation in flight")
	assert.EqualValues(t, 1, f.status().ObservedGeneration, "generation 2 not acted on yet")

	f.controller.expectations.creationObserved("team-a/web")
	require.NoError(t, f.sync())
	assert.NotEmpty(t, f.nodeCreates())
	assert.EqualValues(t, 2, f.status().ObservedGeneration)
}

// TestRefusedCreateSaysTheSameEachTime: the API server names the Node it
// refused by its random name; the status and the Event say it the same way
// on every retry, so a failing set neither rewrites its status each time
// nor floods Events.
func TestRefusedCreateSaysTheSameEachTime(t *testing.T) {
	// A name of 58 to 63 characters (the schema allows 63) is cut in its
	// Nodes' names: the refused Node's random name must be hidden too.
	for name, prefix := range map[string]string{"web": "web-", strings.Repeat("a", 63): strings.Repeat("a", 58)} {
		set := newSet(1)
		set.Name = name
		f := newFixture(t, validClass("sim"), set)
		var refused []string
		f.kube.PrependReactor("create", "nodes", func(a core.Action) (bool, runtime.Object, error) {
			node := a.(core.CreateAction).GetObject().(*corev1.Node).Name
			refused = append(refused, node)
			return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
				Reason: metav1.StatusReasonInvalid, Message: fmt.Sprintf("Node %q is invalid: metadata.labels: Invalid value", node)}}
		})
		var messages []string
		for range 2 {
			err := f.controller.syncNodeSet(context.Background(), "team-a/"+name)
			require.Error(t, err)
			got, getErr := f.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), name, metav1.GetOptions{})
			require.NoError(t, getErr)
			failure := findCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetReplicaFailure)
			require.NotNil(t, failure)
			for _, node := range refused {
				assert.NotContains(t, err.Error(), node)
				assert.NotContains(t, failure.Message, node)
			}
			messages = append(messages, failure.Message)
		}
		require.Len(t, refused, 2, name)
		assert.NotEqual(t, refused[0], refused[1], "each create names a Node anew")
		assert.Equal(t, messages[0], messages[1], "the ReplicaFailure message changes on every retry (%s)", name)
		assert.Contains(t, messages[0], fmt.Sprintf(`Node "%s<random>" is invalid`, prefix))
	}
}

// TestOwnStatusWritesDoNotQueueTheSet: a status this controller wrote is no
// reason to sync again (a failing set would retry at once, past its
// backoff); a new generation, a resync or the node controller's group
// status is.
func TestOwnStatusWritesDoNotQueueTheSet(t *testing.T) {
	f := newFixture(t, validClass("sim"), newSet(1))
	old := newSet(1)
	old.ResourceVersion = "1"
	statusOnly := old.DeepCopy()
	statusOnly.ResourceVersion = "2"
	statusOnly.Status.Replicas = 1
	statusOnly.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeSetReplicaFailure, Status: metav1.ConditionTrue}}
	f.controller.nodeSetUpdated(old, statusOnly)
	assert.Zero(t, f.controller.queue.Len(), "its own status write")

	for name, cur := range map[string]*nodesetv1alpha1.NodeSet{
		"resync":           old.DeepCopy(),
		"a new generation": func() *nodesetv1alpha1.NodeSet { s := statusOnly.DeepCopy(); s.Generation++; return s }(),
		"group status": func() *nodesetv1alpha1.NodeSet {
			s := statusOnly.DeepCopy()
			s.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "g", Message: "throttled"}
			return s
		}(),
	} {
		f.controller.nodeSetUpdated(old, cur)
		assert.Equal(t, 1, f.controller.queue.Len(), name)
		key, _ := f.controller.queue.Get()
		f.controller.queue.Done(key)
	}
}

// TestFreedCapacityWakesLimitedSets: when a machine of a class is gone, the
// NodeSets of that class waiting for room in its limits sync at once.
// limitedPair is a fixture with the set web held back by its class's
// limits (LimitExceeded) and an Accepted set other of the same class; only
// a wake-up queues anything at once.
func limitedPair(t *testing.T) (f *fixture, class *nodesetv1alpha1.NodeClass, other *nodesetv1alpha1.NodeSet) {
	class = validClass("sim")
	waiting := newSet(3)
	waiting.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: ReasonLimitExceeded}}
	f = newFixture(t, class, waiting)
	other = newSet(1)
	other.Name = "other"
	other.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue, Reason: ReasonAccepted}}
	require.NoError(t, f.controller.nodeSetIndexer.Add(other))
	f.controller.nodeEventBatch = time.Hour
	return f, class, other
}

func TestFreedCapacityWakesLimitedSets(t *testing.T) {
	f, class, other := limitedPair(t)
	f.controller.nodeDeleted(setNode(t, other, class, "other-a", time.Hour, true))
	require.Equal(t, 1, runWakes(f.controller), "the class is looked at by the wake worker")
	require.Equal(t, 1, f.controller.queue.Len())
	key, _ := f.controller.queue.Get()
	assert.Equal(t, "team-a/web", key, "the set over its limit, at once")
}

// TestClassEditKeepsTheSetAccepted: while the node controller validates a
// new generation of a valid class, its NodeSets keep their Accepted
// condition with no Event and nothing is created; past the grace period an
// edit nobody validates is DriverNotServed.
func TestClassEditKeepsTheSetAccepted(t *testing.T) {
	class := validClass("sim")
	set := newSet(3)
	set.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue, Reason: ReasonAccepted,
		Message: "accepted before the edit"}}
	class.Generation = 2 // the Valid condition is of generation 1
	f := newFixture(t, class, set)
	now := testNow
	f.controller.now = func() time.Time { return now }

	require.NoError(t, f.sync())
	assert.Empty(t, f.nodeCreates(), "the edit is not validated yet")
	accepted := findCondition(f.status().Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, accepted)
	assert.Equal(t, metav1.ConditionTrue, accepted.Status, "no flip while the class is validated")
	assert.Empty(t, f.recorder.Events, "no NotAccepted Event")

	now = now.Add(revalidationGrace)
	require.NoError(t, f.sync())
	accepted = findCondition(f.status().Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, accepted)
	assert.Equal(t, ReasonNodeClassNotValidated, accepted.Reason, "an edit not validated in time is reported")

	now = now.Add(DefaultDriverClaimGrace)
	require.NoError(t, f.sync())
	accepted = findCondition(f.status().Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, accepted)
	assert.Equal(t, ReasonDriverNotServed, accepted.Reason, "an edit nobody can validate is reported")
}

// TestDriverClaimsTellWaitingFromNotServed: a class no node controller has
// validated is NodeClassNotValidated while a node controller claims its
// driver with a claim it renews, and for the grace before any does;
// DriverNotServed when no claim came within the grace or the claim went
// unrenewed for its duration. A set that already says DriverNotServed is
// not given the grace again (a restart of the controller).
func TestDriverClaimsTellWaitingFromNotServed(t *testing.T) {
	class := validClass("sim")
	class.Status.Conditions = nil
	f := newFixture(t, class, newSet(2))
	now := testNow
	f.controller.now = func() time.Time { return now }
	judged := func(reason, message string) {
		t.Helper()
		require.NoError(t, f.sync())
		assert.Empty(t, f.nodeCreates())
		accepted := findCondition(f.status().Conditions, nodesetv1alpha1.NodeSetAccepted)
		require.NotNil(t, accepted)
		assert.Equal(t, reason, accepted.Reason, accepted.Message)
		assert.Contains(t, accepted.Message, message)
	}
	f.controller.claims.synced = func() bool { return false }
	judged(ReasonNodeClassNotValidated, `the node controllers' claims on their drivers (Leases in nodeset-system) are not read yet`)
	now = now.Add(DefaultDriverClaimGrace)
	judged(ReasonNodeClassNotValidated, "are not read yet") // no verdict from claims not read (the Role may not allow it yet)
	f.controller.claims.synced = func() bool { return true }
	now = testNow
	judged(ReasonNodeClassNotValidated, `no node controller has claimed driver "simulated" yet (Lease nodeset-system/nodeset-driver-simulated)`)
	now = now.Add(DefaultDriverClaimGrace - time.Second)
	judged(ReasonNodeClassNotValidated, "no node controller has claimed")
	now = now.Add(time.Second)
	judged(ReasonDriverNotServed, `no node controller serves driver "simulated", so nothing validates NodeClass "sim": no node controller has claimed driver "simulated" (Lease nodeset-system/nodeset-driver-simulated) for 2m0s`)

	claim := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "nodeset-driver-simulated", Namespace: "nodeset-system", ResourceVersion: "1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-controller"), LeaseDurationSeconds: ptr.To[int32](120)}}
	require.NoError(t, f.claims.Add(claim))
	judged(ReasonNodeClassNotValidated, `node-controller serves driver "simulated" (Lease nodeset-system/nodeset-driver-simulated)`)
	now = now.Add(119 * time.Second)
	judged(ReasonNodeClassNotValidated, "node-controller serves")
	now = now.Add(time.Second)
	judged(ReasonDriverNotServed, `node-controller claimed driver "simulated" (Lease nodeset-system/nodeset-driver-simulated) and has not renewed its claim for 2m0s`)
	renewed := claim.DeepCopy()
	renewed.ResourceVersion = "2"
	require.NoError(t, f.claims.Update(renewed))
	judged(ReasonNodeClassNotValidated, "node-controller serves")

	set := newSet(2)
	set.Status.ObservedClassGeneration = class.Generation
	set.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: ReasonDriverNotServed, Message: "before a restart"}}
	f = newFixture(t, class, set)
	judged(ReasonDriverNotServed, "no node controller has claimed")

	// After a restart, an unrenewed claim the set already says is
	// unrenewed stays so until it changes.
	f = newFixture(t, class, set)
	now = testNow
	f.controller.now = func() time.Time { return now }
	require.NoError(t, f.claims.Add(claim))
	judged(ReasonDriverNotServed, "has not renewed its claim for 2m0s")
	renewed = claim.DeepCopy()
	renewed.ResourceVersion = "3"
	require.NoError(t, f.claims.Update(renewed))
	judged(ReasonNodeClassNotValidated, "node-controller serves")
}

// TestAScaleRightAfterCreateIsJudged: kubectl scale past the class's
// limits right after kubectl create reaches the webhook before its cache
// has the NodeSet; the webhook asks the API server for it and refuses the
// scale, as it would a moment later.
func TestAScaleRightAfterCreateIsJudged(t *testing.T) {
	class := validClass("sim")
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](3)}
	set := newSet(2)
	f := newFixture(t, class, set)
	require.NoError(t, f.controller.nodeSetIndexer.Delete(set), "not in the cache yet")
	reason, message := f.controller.AdmitScale("team-a", "web", 5)
	assert.Equal(t, ReasonLimitExceeded, reason)
	assert.Contains(t, message, "spec.limits.maxNodesPerNamespace of 3")
	reason, _ = f.controller.AdmitScale("team-a", "web", 3)
	assert.Empty(t, reason, "within the limit")
}

// arrivingLister is a Node lister whose informer delivers late Nodes right
// after the first List has read the cache.
type arrivingLister struct {
	corelisters.NodeLister
	indexer cache.Indexer
	late    []*corev1.Node
	deliver func(any)
}

func (l *arrivingLister) List(selector labels.Selector) ([]*corev1.Node, error) {
	nodes, err := l.NodeLister.List(selector)
	for _, node := range l.late {
		// As an informer does: the cache first, then the handler.
		_ = l.indexer.Add(node)
		l.deliver(node)
	}
	l.late = nil
	return nodes, err
}

// TestLimitCountsNodesObservedWhileCounting: another set's Nodes reach the
// cache while a limited set counts the class's usage. Each is counted once,
// as a Node in the cache or as a creation not yet observed, never as
// neither: the limit holds.
func TestLimitCountsNodesObservedWhileCounting(t *testing.T) {
	class := validClass("sim")
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](4)}
	set := newSet(3)
	f := newFixture(t, class, set)
	other := newSet(3)
	other.Name, other.UID = "other", "other-uid"
	require.NoError(t, f.controller.nodeSetIndexer.Add(other))
	f.controller.expectations.expectCreations("team-a/other", 3)
	lister := &arrivingLister{NodeLister: f.controller.nodeLister, indexer: f.controller.nodeIndexer, deliver: f.controller.nodeAdded}
	for _, name := range []string{"other-a", "other-b", "other-c"} {
		lister.late = append(lister.late, setNode(t, other, class, name, 0, false))
	}
	f.controller.nodeLister = lister
	require.NoError(t, f.sync())
	assert.Len(t, f.nodeCreates(), 1, "3 of the limit's 4 are the other set's")
}

// TestObservedCreationWakesLimitedSets: a Node that arrives while a limited
// set counts may be counted twice (in the cache and as an unobserved
// creation). The set it held back is synced again when the informer
// delivers it, so the limit's room is not lost until something is deleted.
func TestObservedCreationWakesLimitedSets(t *testing.T) {
	f, class, other := limitedPair(t)
	f.controller.expectations.expectCreations("team-a/other", 1)
	f.controller.nodeAdded(setNode(t, other, class, "other-a", 0, false))
	runWakes(f.controller)
	var keys []string
	for f.controller.queue.Len() > 0 {
		key, _ := f.controller.queue.Get()
		keys = append(keys, key)
		f.controller.queue.Done(key)
	}
	assert.Contains(t, keys, "team-a/web", "the set over its limit, at once")
}

// TestALoweredLimitIsToldWithoutACreation: a machine driver's set that has
// all its Nodes, of a class whose limit was lowered below them, says it
// asks for more than the limit allows, as a group driver's set does. The
// lowered limit deletes nothing.
func TestALoweredLimitIsToldWithoutACreation(t *testing.T) {
	class := validClass("sim")
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](2)}
	set := newSet(3)
	f := newFixture(t, class, set,
		setNode(t, set, class, "web-a", time.Hour, true), setNode(t, set, class, "web-b", time.Hour, true), setNode(t, set, class, "web-c", time.Hour, true))
	require.NoError(t, f.sync())
	assert.Empty(t, f.nodeCreates())
	assert.Empty(t, f.nodeDeletes(), "a lowered limit deletes nothing")
	accepted := findCondition(f.status().Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, accepted)
	assert.Equal(t, ReasonLimitExceeded, accepted.Reason)
	assert.Contains(t, accepted.Message, "spec.limits.maxNodesPerNamespace of 2")
}

// A kubelet's own Node labelled by hand with all of a set's labels holds
// no nodeset.dev/termination finalizer: it is no replica of the set, so
// neither a scale-down (Newest would pick it) nor the count of replicas
// takes it, and without a finalizer a deletion would take it undrained.
func TestAHandLabelledNodeIsNoReplica(t *testing.T) {
	class := validClass("sim")
	set := newSet(1)
	own := setNode(t, set, class, "web-own", 2*time.Hour, true)
	kubelets := setNode(t, set, class, "kubelets-own", time.Minute, true)
	kubelets.Finalizers = nil
	f := newFixture(t, class, set, own, kubelets)
	require.NoError(t, f.sync())
	assert.Empty(t, f.nodeDeletes(), "the hand-labelled Node is not deleted")
	assert.Empty(t, f.nodeCreates())
	assert.Equal(t, int32(1), f.status().Replicas, "the hand-labelled Node is not counted")

	// A set whose only labelled Node is not its own makes its replica.
	lone := newSet(1)
	foreign := setNode(t, lone, class, "kubelets-lone", time.Minute, true)
	foreign.Finalizers = nil
	f = newFixture(t, class, lone, foreign)
	require.NoError(t, f.sync())
	assert.Empty(t, f.nodeDeletes())
	assert.Len(t, f.nodeCreates(), 1)
}

// TestAClaimChangeSyncsTheSetsOfItsDriver: any event of a driver's claim
// (taken, renewed: the end of a lapse, passed on, given up) syncs the
// NodeSets of the driver's classes that wait for validation; not those of a
// class with a verdict, nor for another driver's claim or another Lease.
func TestAClaimChangeSyncsTheSetsOfItsDriver(t *testing.T) {
	unvalidated := validClass("sim")
	unvalidated.Status.Conditions = nil
	f := newFixture(t, unvalidated, newSet(2))
	queued := func() []string {
		var keys []string
		for f.controller.queue.Len() > 0 {
			key, _ := f.controller.queue.Get()
			f.controller.queue.Done(key)
			keys = append(keys, key)
		}
		return keys
	}
	lease := func(name, holder, rv string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "nodeset-system", ResourceVersion: rv},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	}
	claim := lease("nodeset-driver-simulated", "node-controller", "1")
	f.controller.claimChanged(nil, lease("nodeset-driver-eks-asg", "node-controller", "1"))
	f.controller.claimChanged(nil, lease("nodeset-controller", "nodeset-controller-0", "1"))
	assert.Empty(t, queued(), "another driver's claim, a leader Lease")
	f.controller.claimChanged(nil, claim)
	assert.Equal(t, []string{"team-a/web"}, queued(), "a claim taken")
	f.controller.claimChanged(claim, lease("nodeset-driver-simulated", "node-controller", "2"))
	assert.Equal(t, []string{"team-a/web"}, queued(), "a renewal, which may end a lapse")
	f.controller.claimChanged(claim, lease("nodeset-driver-simulated", "example-node-controller", "3"))
	assert.Equal(t, []string{"team-a/web"}, queued(), "a claim passed on")
	f.controller.claimChanged(cache.DeletedFinalStateUnknown{Obj: claim}, nil)
	assert.Equal(t, []string{"team-a/web"}, queued(), "a claim given up")

	f = newFixture(t, validClass("sim"), newSet(2))
	f.controller.claimChanged(nil, claim)
	assert.Empty(t, queued(), "a class with a verdict: its sets do not look at the claims")
}
