package plan

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

var testNow = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func newSet(replicas int32) *nodesetv1alpha1.NodeSet {
	return &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", UID: "set-uid"},
		Spec: nodesetv1alpha1.NodeSetSpec{
			NodeClassName: "sim",
			Replicas:      ptr.To(replicas),
			Strategy:      nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.RollingUpdateStrategy},
			DeletePolicy:  nodesetv1alpha1.DeletePolicyNewest,
		},
	}
}

// node is a Node of NodeSet namespace/set of class sim with template hash,
// created age ago, held by nodeset's finalizer.
func node(name, namespace, set, hash string, age time.Duration, ready bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, UID: types.UID(name + "-uid"),
		CreationTimestamp: metav1.NewTime(testNow.Add(-age)), Finalizers: []string{nodesetv1alpha1.FinalizerTermination},
		Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: "sim", nodesetv1alpha1.LabelTemplateHash: hash,
			nodesetv1alpha1.LabelNodeSetNamespace: namespace, nodesetv1alpha1.LabelNodeSet: set},
	}}
	if ready {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(testNow.Add(-age / 2))}}
	}
	return n
}

func terminating(n *corev1.Node) *corev1.Node {
	n.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	return n
}

func TestReplicasDefaultsToOne(t *testing.T) {
	set := newSet(3)
	assert.EqualValues(t, 3, Replicas(set))
	set.Spec.Replicas = nil
	assert.EqualValues(t, 1, Replicas(set), "an unset spec.replicas is 1, as for a ReplicaSet")
}

func TestDeleteList(t *testing.T) {
	set := newSet(1)
	assert.Empty(t, DeleteList(set))
	set.Annotations = map[string]string{nodesetv1alpha1.AnnotationDeleteNodes: " a, ,b,a"}
	assert.Equal(t, map[string]bool{"a": true, "b": true}, DeleteList(set))
}

func TestVictims(t *testing.T) {
	old := node("a-old", "team-a", "web", "h", 3*time.Hour, true)
	mid := node("b-mid", "team-a", "web", "h", 2*time.Hour, true)
	young := node("c-new", "team-a", "web", "h", time.Hour, true)
	outdated := node("d-outdated", "team-a", "web", "stale", 30*time.Minute, true)
	unready := node("e-unready", "team-a", "web", "h", 4*time.Hour, false)
	marked := node("f-marked", "team-a", "web", "h", 5*time.Hour, true)
	marked.Annotations = map[string]string{nodesetv1alpha1.AnnotationDeleteNode: "true"}
	booting := node("g-booting", "team-a", "web", "h", time.Minute, false)
	booting.Spec.ProviderID = "sim:///g-booting"
	waiting := node("h-waiting", "team-a", "web", "h", 2*time.Minute, false)
	tests := []struct {
		name   string
		policy nodesetv1alpha1.DeletePolicy
		nodes  []*corev1.Node
		count  int
		want   []string
	}{
		{"newest first", nodesetv1alpha1.DeletePolicyNewest, []*corev1.Node{old, mid, young}, 2, []string{"c-new", "b-mid"}},
		{"oldest first", nodesetv1alpha1.DeletePolicyOldest, []*corev1.Node{young, mid, old}, 2, []string{"a-old", "b-mid"}},
		{"outdated before up-to-date", nodesetv1alpha1.DeletePolicyOldest, []*corev1.Node{old, outdated}, 1, []string{"d-outdated"}},
		{"marked, then unready, then outdated", nodesetv1alpha1.DeletePolicyNewest, []*corev1.Node{young, outdated, unready, marked}, 3,
			[]string{"f-marked", "e-unready", "d-outdated"}},
		// cluster-autoscaler lowers the target size only by instances that
		// have no machine yet; a machine booting is not one of them.
		{"no machine, then booting, whatever their age", nodesetv1alpha1.DeletePolicyNewest, []*corev1.Node{old, booting, waiting}, 2,
			[]string{"h-waiting", "g-booting"}},
		{"random takes count", nodesetv1alpha1.DeletePolicyRandom, []*corev1.Node{old, mid, young}, 2, nil},
		{"count above size", nodesetv1alpha1.DeletePolicyNewest, []*corev1.Node{old}, 3, []string{"a-old"}},
		{"zero", nodesetv1alpha1.DeletePolicyNewest, []*corev1.Node{old}, 0, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names := []string{}
			for _, n := range Victims(tt.nodes, tt.count, tt.policy, "h", 0, testNow) {
				names = append(names, n.Name)
			}
			if tt.want == nil {
				assert.Len(t, names, tt.count)
				return
			}
			assert.Equal(t, tt.want, names)
		})
	}
}

func TestDeleteListedNodesGoFirst(t *testing.T) {
	set := newSet(2)
	a, b := node("a", "team-a", "web", "h", time.Hour, true), node("b", "team-a", "web", "h", 2*time.Hour, true)
	set.Annotations = map[string]string{nodesetv1alpha1.AnnotationDeleteNodes: "b"}
	p := Decide(set, "h", []*corev1.Node{a, b}, testNow)
	assert.Equal(t, []*corev1.Node{b}, p.Remove, "a listed Node goes even when the set has its replicas")
	assert.Equal(t, 1, p.Create, "and is replaced, the rest being planned without it")
}

func TestGroupSizeSurgesDuringARollout(t *testing.T) {
	set := newSet(2)
	current := node("ip-a", "team-a", "web", "new", time.Hour, true)
	outdated := node("ip-b", "team-a", "web", "old", time.Hour, true)
	assert.EqualValues(t, 2, GroupSize(set, "new", []*corev1.Node{current, current.DeepCopy()}), "nothing to replace")
	assert.EqualValues(t, 3, GroupSize(set, "new", []*corev1.Node{current, outdated}), "replicas + maxSurge while outdated Nodes remain")
	set.Spec.Strategy.RollingUpdate = &nodesetv1alpha1.RollingUpdateNodeSet{MaxSurge: ptr.To(intstr.FromInt32(5))}
	assert.EqualValues(t, 3, GroupSize(set, "new", []*corev1.Node{current, outdated}), "never more surge than outdated Nodes")
	set.Spec.Strategy.Type = nodesetv1alpha1.OnDeleteStrategy
	assert.EqualValues(t, 2, GroupSize(set, "new", []*corev1.Node{current, outdated}), "OnDelete replaces nothing")
}

func TestRollingOutReadsTheRecordedHash(t *testing.T) {
	set := newSet(2)
	nodes := []*corev1.Node{node("a", "team-a", "web", "old", time.Hour, true), node("b", "team-a", "web", "new", time.Hour, true)}
	assert.False(t, RollingOut(set, nodes), "no hash recorded yet")
	set.Status.TemplateHash = "new"
	assert.True(t, RollingOut(set, nodes))
	terminating(nodes[0])
	assert.False(t, RollingOut(set, nodes), "an outdated Node being deleted is not a rollout any more")
}

func limitedClass(maxNodes, perNamespace *int32) *nodesetv1alpha1.NodeClass {
	return &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "sim"},
		Spec: nodesetv1alpha1.NodeClassSpec{Limits: &nodesetv1alpha1.NodeClassLimits{MaxNodes: maxNodes, MaxNodesPerNamespace: perNamespace}}}
}

func TestCountUsage(t *testing.T) {
	static := node("static", "", "", "h", time.Hour, true)
	static.Labels = map[string]string{nodesetv1alpha1.LabelNodeClass: "sim"}
	nodes := []*corev1.Node{
		node("web-1", "team-a", "web", "h", time.Hour, true),
		terminating(node("web-2", "team-a", "web", "h", time.Hour, true)),
		node("api-1", "team-a", "api", "h", time.Hour, true),
		node("db-1", "team-b", "db", "h", time.Hour, true),
		static,
	}
	pending := Pending{"team-a/web": 2, "team-b/db": 3, "team-a/gone": -1}
	tests := []struct {
		name              string
		namespace, except string
		want              Usage
	}{
		{"everything, terminating and static Nodes and pending machines included", "team-a", "", Usage{Class: 10, Namespace: 5}},
		{"without the set itself", "team-a", "team-a/web", Usage{Class: 6, Namespace: 1}},
		{"from another namespace", "team-b", "team-b/db", Usage{Class: 6, Namespace: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, CountUsage(nodes, pending, tt.namespace, tt.except))
		})
	}
}

func TestRoomAndFits(t *testing.T) {
	tests := []struct {
		name      string
		class     *nodesetv1alpha1.NodeClass
		used      Usage
		want      int64
		room      int64
		refusalIn string
	}{
		{"unlimited", &nodesetv1alpha1.NodeClass{}, Usage{Class: 1e6, Namespace: 1e6}, math.MaxInt32, math.MaxInt64, ""},
		{"class limit binds", limitedClass(ptr.To[int32](10), ptr.To[int32](8)), Usage{Class: 7, Namespace: 1}, 4, 3,
			`spec.replicas: 4 nodes would exceed NodeClass "sim"'s spec.limits.maxNodes of 10: it has 7 other nodes`},
		{"namespace limit binds", limitedClass(ptr.To[int32](10), ptr.To[int32](3)), Usage{Class: 2, Namespace: 1}, 3, 2,
			`spec.limits.maxNodesPerNamespace of 3: namespace "team-a" has 1 other nodes of the class`},
		{"exactly full fits", limitedClass(ptr.To[int32](10), nil), Usage{Class: 7}, 3, 3, ""},
		{"over the limit already: no room, never negative", limitedClass(ptr.To[int32](2), nil), Usage{Class: 5}, 0, 0, ""},
		{"the largest int32 asked of a full class, in int64", limitedClass(ptr.To[int32](math.MaxInt32), nil), Usage{Class: math.MaxInt32}, math.MaxInt32, 0,
			"spec.limits.maxNodes of 2147483647"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			room, _ := Room(tt.class, "team-a", tt.used)
			assert.Equal(t, tt.room, room)
			refusal := Fits(tt.class, "team-a", tt.used, tt.want)
			if tt.refusalIn == "" {
				assert.Empty(t, refusal)
			} else {
				assert.Contains(t, refusal, tt.refusalIn)
			}
		})
	}
}

func TestCountUsageSaturates(t *testing.T) {
	used := CountUsage(nil, Pending{"a/x": math.MaxInt64, "a/y": math.MaxInt64}, "a", "")
	assert.Equal(t, Usage{Class: math.MaxInt64, Namespace: math.MaxInt64}, used, "pending machines never wrap around")
}

func TestUnseenGroupMachines(t *testing.T) {
	group := func(name string, desired *int32) *nodesetv1alpha1.NodeSet {
		set := newSet(1)
		set.Name = name
		if desired != nil {
			set.Status.Group = &nodesetv1alpha1.GroupStatus{DesiredSize: desired}
		}
		return set
	}
	other := group("other-class", ptr.To[int32](9))
	other.Spec.NodeClassName = "another"
	sets := []*nodesetv1alpha1.NodeSet{group("web", ptr.To[int32](3)), group("api", ptr.To[int32](1)), group("machines", nil), other}
	nodes := []*corev1.Node{node("web-1", "team-a", "web", "h", time.Hour, true), node("api-1", "team-a", "api", "h", time.Hour, true),
		node("api-2", "team-a", "api", "h", time.Hour, true)}
	assert.Equal(t, Pending{"team-a/web": 2}, UnseenGroupMachines(sets, "sim", nodes),
		"2 of web's 3 instances have no Node; api has more Nodes than its size; sets without a group and other classes add nothing")
	// A kubelet's own Node that claims web by its labels is none of its
	// instances' Nodes: the instance it runs on, if web's, is still unseen.
	nodes = append(nodes, foreign(node("kubelets-own", "team-a", "web", "h", time.Hour, true)))
	assert.Equal(t, Pending{"team-a/web": 2}, UnseenGroupMachines(sets, "sim", nodes))
}

// foreign makes n a Node nodeset never took: a kubelet's own registration,
// labelled as n is, with no seal and not nodeset's finalizer.
func foreign(n *corev1.Node) *corev1.Node {
	n.Finalizers = nil
	n.Status.NodeInfo.KubeletVersion = "v1.37.2"
	return n
}

// TestAForeignNodeCountsTowardNoLimit: a Node a kubelet registered or
// relabelled with a class's and a NodeSet's labels, which nodeset never
// sealed or held, counts toward neither the class nor the namespace it
// names: root on a node of another kind must not use up another tenant's
// share. A Node an admin made for a machine to come, with no host yet,
// and one nodeset holds, count.
func TestAForeignNodeCountsTowardNoLimit(t *testing.T) {
	lone := node("lone", "", "", "h", 0, false)
	lone.Labels = map[string]string{nodesetv1alpha1.LabelNodeClass: "sim"}
	lone.Finalizers = nil
	nodes := []*corev1.Node{
		node("web-1", "team-a", "web", "h", time.Hour, true),
		foreign(node("claims-web", "team-a", "web", "h", time.Hour, true)),
		foreign(node("claims-the-class", "", "", "h", time.Hour, true)),
		lone,
	}
	nodes[2].Labels = map[string]string{nodesetv1alpha1.LabelNodeClass: "sim"}
	withProviderID := foreign(node("with-provider-id", "team-a", "web", "h", time.Hour, false))
	withProviderID.Status.NodeInfo.KubeletVersion = ""
	withProviderID.Spec.ProviderID = "simulated:///elsewhere"
	nodes = append(nodes, withProviderID)
	assert.Equal(t, Usage{Class: 2, Namespace: 1}, CountUsage(nodes, nil, "team-a", ""),
		"web-1 and the lone Node to come; the three with a host of their own, none")
}
