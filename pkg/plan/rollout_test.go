package plan

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// fleet simulates a NodeSet's Nodes through a rollout: each round the plan
// is applied, then created Nodes become Ready and deleted ones go away (a
// drain and deprovision finish), in separate steps so every intermediate
// state is checked.
type fleet struct {
	nodes []*corev1.Node
	seq   int
	step  int
}

func (f *fleet) add(hash string, ready bool) {
	f.seq++
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: fmt.Sprintf("n%03d", f.seq), UID: types.UID(fmt.Sprint(f.seq)),
		CreationTimestamp: metav1.NewTime(testNow.Add(-time.Duration(f.seq) * time.Second)),
		Labels:            map[string]string{nodesetv1alpha1.LabelTemplateHash: hash},
	}}
	if ready {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(testNow.Add(-24 * time.Hour))}}
	}
	f.nodes = append(f.nodes, n)
}

func (f *fleet) apply(p Plan, hash string) {
	for range p.Create {
		f.add(hash, false)
	}
	for _, victim := range p.Remove {
		victim.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	}
}

// settle makes one step of progress outside the controller: drains finish
// (terminating Nodes go) and new Nodes become Ready; with split, only one of
// the two happens per call, alternately, so that states where new Nodes are
// Ready while old ones still drain are checked too.
func (f *fleet) settle(split bool) {
	f.step++
	if !split || f.step%2 == 0 {
		kept := f.nodes[:0]
		for _, n := range f.nodes {
			if n.DeletionTimestamp == nil {
				kept = append(kept, n)
			}
		}
		f.nodes = kept
		if split {
			return
		}
	}
	for _, n := range f.nodes {
		if len(n.Status.Conditions) == 0 {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(testNow.Add(-24 * time.Hour))}}
		}
	}
}

func (f *fleet) counts(hash string) (total, availableActive, current int) {
	for _, n := range f.nodes {
		total++
		if n.DeletionTimestamp != nil {
			continue
		}
		if Available(n, 0, testNow) {
			availableActive++
		}
		if n.Labels[nodesetv1alpha1.LabelTemplateHash] == hash {
			current++
		}
	}
	return
}

func rollingSet(replicas int32, surge, unavailable intstr.IntOrString) *nodesetv1alpha1.NodeSet {
	set := newSet(replicas)
	set.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.RollingUpdateStrategy,
		RollingUpdate: &nodesetv1alpha1.RollingUpdateNodeSet{MaxSurge: &surge, MaxUnavailable: &unavailable}}
	return set
}

func TestRollingUpdateKeepsItsBounds(t *testing.T) {
	tests := []struct {
		surge, unavailable     intstr.IntOrString
		maxTotal, minAvailable int
		rounds                 int
	}{
		{intstr.FromInt32(1), intstr.FromInt32(0), 7, 6, 12},
		{intstr.FromInt32(0), intstr.FromInt32(1), 6, 5, 12},
		{intstr.FromInt32(1), intstr.FromInt32(2), 7, 4, 4},
		{intstr.FromInt32(3), intstr.FromInt32(0), 9, 6, 4},
		{intstr.FromString("25%"), intstr.FromString("25%"), 8, 5, 4}, // surge rounds up, unavailable down
		{intstr.FromString("10%"), intstr.FromString("10%"), 7, 6, 12},
	}
	for _, split := range []bool{false, true} {
		for _, tt := range tests {
			if split {
				tt.rounds = 0 // not pinned: only the bounds matter
			}
			testRollout(t, split, tt.surge, tt.unavailable, tt.maxTotal, tt.minAvailable, tt.rounds)
		}
	}
}

func testRollout(t *testing.T, split bool, surge, unavailable intstr.IntOrString, maxTotal, minAvailable, wantRounds int) {
	tt := struct {
		surge, unavailable     intstr.IntOrString
		maxTotal, minAvailable int
		rounds                 int
	}{surge, unavailable, maxTotal, minAvailable, wantRounds}
	{
		t.Run(fmt.Sprintf("surge=%s,unavailable=%s,split=%v", tt.surge.String(), tt.unavailable.String(), split), func(t *testing.T) {
			set := rollingSet(6, tt.surge, tt.unavailable)
			f := &fleet{}
			for range 6 {
				f.add("old", true)
			}
			rounds := 0
			for ; rounds < 50; rounds++ {
				p := Decide(set, "new", f.nodes, testNow)
				f.apply(p, "new")
				total, available, _ := f.counts("new")
				require.LessOrEqual(t, total, tt.maxTotal, "round %d: more than replicas+maxSurge nodes", rounds)
				require.GreaterOrEqual(t, available, tt.minAvailable, "round %d: fewer than replicas-maxUnavailable available", rounds)
				f.settle(split)
				if total, available, current := f.counts("new"); total == 6 && current == 6 && available == 6 {
					break
				}
			}
			t.Logf("%d rounds", rounds+1)
			if tt.rounds > 0 {
				assert.Equal(t, tt.rounds, rounds+1, "rounds taken (create, then remove once the new nodes are Ready)")
			}
			total, available, current := f.counts("new")
			assert.Equal(t, [3]int{6, 6, 6}, [3]int{total, available, current}, "every node replaced")
			assert.Empty(t, Decide(set, "new", f.nodes, testNow).Remove, "a finished rollout is stable")
		})
	}
}

func TestRollingUpdateReplacesUnhealthyOutdatedNodesFirst(t *testing.T) {
	set := rollingSet(3, intstr.FromInt32(1), intstr.FromInt32(0))
	f := &fleet{}
	f.add("old", true)
	f.add("old", false) // never became Ready
	f.add("old", true)
	p := Decide(set, "new", f.nodes, testNow)
	assert.Equal(t, 1, p.Create)
	require.Len(t, p.Remove, 1, "an unavailable outdated node costs no availability")
	assert.Equal(t, "n002", p.Remove[0].Name)
	assert.True(t, p.Replacing)
}

func TestNewNodesComingUpHoldBackRemovals(t *testing.T) {
	set := rollingSet(3, intstr.FromInt32(1), intstr.FromInt32(1))
	f := &fleet{}
	for range 3 {
		f.add("old", true)
	}
	f.add("new", false)
	p := Decide(set, "new", f.nodes, testNow)
	assert.Zero(t, p.Create, "4 nodes: the surge is used")
	assert.Len(t, p.Remove, 1, "3 available, 2 required: one old node may go")

	f.nodes[3].Labels[nodesetv1alpha1.LabelTemplateHash] = "new"
	f.nodes[0].Status.Conditions = nil // an old node fails meanwhile
	p = Decide(set, "new", f.nodes, testNow)
	require.Len(t, p.Remove, 1, "2 available, 2 required: only the failed old node may go")
	assert.Equal(t, "n001", p.Remove[0].Name)
}

func TestOnDeleteAndPausedReplaceNothing(t *testing.T) {
	for name, mutate := range map[string]func(*nodesetv1alpha1.NodeSet){
		"OnDelete": func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.OnDeleteStrategy}
		},
		"paused": func(s *nodesetv1alpha1.NodeSet) { s.Spec.Paused = true },
	} {
		t.Run(name, func(t *testing.T) {
			set := rollingSet(3, intstr.FromInt32(1), intstr.FromInt32(0))
			mutate(set)
			f := &fleet{}
			for range 3 {
				f.add("old", true)
			}
			assert.Equal(t, Plan{}, Decide(set, "new", f.nodes, testNow))

			// A deleted node is replaced by one of the new template; scaling works.
			f.nodes[0].DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
			assert.Equal(t, 1, Decide(set, "new", f.nodes, testNow).Create)
			set.Spec.Replicas = ptr.To[int32](1)
			p := Decide(set, "new", f.nodes, testNow)
			assert.Len(t, p.Remove, 1)
			assert.False(t, p.Replacing)
		})
	}
}

func TestRollingBounds(t *testing.T) {
	for _, tt := range []struct {
		surge, unavailable *intstr.IntOrString
		replicas           int
		want               [2]int
	}{
		{nil, nil, 5, [2]int{1, 0}},
		{ptr.To(intstr.FromString("50%")), ptr.To(intstr.FromString("50%")), 5, [2]int{3, 2}},
		{ptr.To(intstr.FromString("0%")), ptr.To(intstr.FromString("10%")), 5, [2]int{0, 1}},
		{ptr.To(intstr.FromInt32(0)), ptr.To(intstr.FromInt32(9)), 3, [2]int{0, 3}},
	} {
		set := newSet(int32(tt.replicas))
		set.Spec.Strategy.RollingUpdate = &nodesetv1alpha1.RollingUpdateNodeSet{MaxSurge: tt.surge, MaxUnavailable: tt.unavailable}
		s, u := Bounds(set, tt.replicas)
		assert.Equal(t, tt.want, [2]int{s, u}, "surge %v unavailable %v of %d", tt.surge, tt.unavailable, tt.replicas)
	}
}

// TestRolloutTailCountsDrainingNodes: once the last outdated Node is
// terminating the set is no longer "rolling", but its draining Nodes still
// count toward maxSurge.
func TestRolloutTailCountsDrainingNodes(t *testing.T) {
	set := rollingSet(6, intstr.FromInt32(1), intstr.FromInt32(2))
	f := &fleet{}
	for range 4 {
		f.add("new", true)
	}
	for range 3 {
		f.add("old", true)
	}
	for _, n := range f.nodes[4:] {
		n.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	}
	assert.Zero(t, Decide(set, "new", f.nodes, testNow).Create, "7 Nodes exist (3 draining): maxSurge 1 allows no more")
	f.nodes = f.nodes[:6] // two drains finished
	assert.Equal(t, 1, Decide(set, "new", f.nodes, testNow).Create)

	// OnDelete has no surge: a deleted Node is replaced at once.
	set.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.OnDeleteStrategy}
	assert.Equal(t, 2, Decide(set, "new", f.nodes, testNow).Create)
}

// TestAGroupUpdateKeepsItsSurge: while a Managed set's cloud group runs its
// own update, the Nodes it brought up above replicas are its surge: none
// is removed (the old ones are the update's to drain), but a Node on the
// delete list still goes. Outside such an update, or with another
// strategy, a surplus goes as ever.
func TestAGroupUpdateKeepsItsSurge(t *testing.T) {
	surgeOf := func(strategy nodesetv1alpha1.NodeSetStrategyType, group *nodesetv1alpha1.GroupStatus) (*nodesetv1alpha1.NodeSet, *fleet) {
		set := newSet(3)
		set.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: strategy}
		set.Status.Group = group
		f := &fleet{}
		for range 3 {
			f.add("old", true)
		}
		f.add("new", true)
		f.add("new", false)
		return set, f
	}
	for name, group := range map[string]*nodesetv1alpha1.GroupStatus{
		"group UPDATING":      {Name: "g", State: "UPDATING"},
		"update InProgress":   {Name: "g", State: "ACTIVE", UpdateID: "u1", UpdateStatus: "InProgress"},
		"both, as EKS has it": {Name: "g", State: "UPDATING", UpdateID: "u1", UpdateStatus: "InProgress"},
	} {
		t.Run(name, func(t *testing.T) {
			set, f := surgeOf(nodesetv1alpha1.ManagedStrategy, group)
			assert.Equal(t, Plan{}, Decide(set, "new", f.nodes, testNow), "the update's surge stays")
			if group.UpdateStatus == "InProgress" {
				// The update goes on after a switch to another strategy.
				set.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.OnDeleteStrategy}
				assert.Equal(t, Plan{}, Decide(set, "new", f.nodes, testNow), "OnDelete: the surge stays")
				set.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.RollingUpdateStrategy}
				p := Decide(set, "new", f.nodes, testNow)
				assert.Empty(t, p.Remove, "RollingUpdate: neither the surge nor the outdated Nodes go while the group replaces them")
				set.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.ManagedStrategy}
			}

			set.Annotations = map[string]string{nodesetv1alpha1.AnnotationDeleteNodes: f.nodes[1].Name}
			p := Decide(set, "new", f.nodes, testNow)
			require.Len(t, p.Remove, 1, "a Node on the delete list goes all the same")
			assert.Equal(t, f.nodes[1].Name, p.Remove[0].Name)
		})
	}
	for name, tt := range map[string]struct {
		strategy nodesetv1alpha1.NodeSetStrategyType
		group    *nodesetv1alpha1.GroupStatus
	}{
		"Managed, the update done":     {nodesetv1alpha1.ManagedStrategy, &nodesetv1alpha1.GroupStatus{Name: "g", State: "ACTIVE", UpdateID: "u1", UpdateStatus: "Successful"}},
		"Managed, no group yet":        {nodesetv1alpha1.ManagedStrategy, nil},
		"OnDelete, the group UPDATING": {nodesetv1alpha1.OnDeleteStrategy, &nodesetv1alpha1.GroupStatus{Name: "g", State: "UPDATING"}},
		"OnDelete, the update done":    {nodesetv1alpha1.OnDeleteStrategy, &nodesetv1alpha1.GroupStatus{Name: "g", State: "ACTIVE", UpdateID: "u1", UpdateStatus: "Failed"}},
	} {
		t.Run(name, func(t *testing.T) {
			set, f := surgeOf(tt.strategy, tt.group)
			p := Decide(set, "new", f.nodes, testNow)
			require.Len(t, p.Remove, 2, "a surplus of 2")
			assert.Equal(t, f.nodes[4].Name, p.Remove[0].Name, "the Node not Ready goes first")
			assert.Equal(t, "old", p.Remove[1].Labels[nodesetv1alpha1.LabelTemplateHash], "then an outdated one")
		})
	}
}
