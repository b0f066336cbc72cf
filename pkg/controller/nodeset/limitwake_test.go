package nodeset

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// crowdedClass is a fixture of a class full to its maxNodes with the
// Nodes of team-a/web, many NodeSets of one tenant (namespace hostile)
// waiting for room in it (LimitExceeded), and team-b/app, a set of an
// unlimited class at replicas 0. The informers are not run: deliver plays
// their part for what the syncs wrote.
type crowdedClass struct {
	*fixture
	class   *nodesetv1alpha1.NodeClass
	owner   *nodesetv1alpha1.NodeSet
	waiting []*nodesetv1alpha1.NodeSet
	seen    int // kube actions delivered
	syncs   []string
}

func newCrowdedClass(t *testing.T, waiting int) *crowdedClass {
	class := validClass("sim")
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](4)}
	owner := newSet(4)
	var nodes []*corev1.Node
	for i := range 4 {
		nodes = append(nodes, setNode(t, owner, class, fmt.Sprintf("web-%d", i), time.Hour, true))
	}
	f := &crowdedClass{fixture: newFixture(t, class, owner, nodes...), class: class, owner: owner}
	c := f.controller
	c.recorder = &record.FakeRecorder{} // Events dropped: thousands of sets tell theirs
	c.classCounts.track(class.Name)     // the class's Add, as its informer would deliver it
	free := validClass("free")
	require.NoError(t, f.nodesets.Tracker().Add(free))
	require.NoError(t, c.nodeClassIndexer.Add(free))
	app := newSet(0)
	app.Namespace, app.Name, app.UID, app.Spec.NodeClassName = "team-b", "app", "app-uid", "free"
	f.add(app)
	// The waiting sets are made in an order their names do not follow, so
	// that nothing but their age puts the oldest first.
	for i := range waiting {
		set := newSet(1)
		set.Namespace, set.Name = "hostile", fmt.Sprintf("h-%04d", (i*7919)%waiting)
		set.UID = k8stypes.UID("uid-" + set.Name)
		set.CreationTimestamp = metav1.NewTime(testNow.Add(-time.Duration(waiting-i) * time.Minute))
		f.add(set)
		f.waiting = append(f.waiting, set)
	}
	// Every set as its first sync leaves it.
	for _, set := range append([]*nodesetv1alpha1.NodeSet{app, owner}, f.waiting...) {
		c.queue.Add(set.Namespace + "/" + set.Name)
	}
	f.drain()
	for _, set := range f.waiting {
		got := f.get(set)
		accepted := findCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		require.NotNil(t, accepted)
		require.Equal(t, ReasonLimitExceeded, accepted.Reason, accepted.Message)
	}
	f.syncs = nil
	return f
}

// createdSetsOfClass names the NodeSet of each Node of class created so
// far, in the order of their creation.
func (f *crowdedClass) createdSetsOfClass(class string) []string {
	var created []string
	for _, a := range f.kube.Actions() {
		if a.Matches("create", "nodes") {
			node := a.(core.CreateAction).GetObject().(*corev1.Node)
			if node.Labels[nodesetv1alpha1.LabelNodeClass] == class {
				created = append(created, node.Labels[nodesetv1alpha1.LabelNodeSet])
			}
		}
	}
	return created
}

func (f *crowdedClass) add(set *nodesetv1alpha1.NodeSet) {
	require.NoError(f.t, f.nodesets.Tracker().Add(set))
	require.NoError(f.t, f.controller.nodeSetIndexer.Add(set))
}

func (f *crowdedClass) get(set *nodesetv1alpha1.NodeSet) *nodesetv1alpha1.NodeSet {
	got, err := f.nodesets.NodesetV1alpha1().NodeSets(set.Namespace).Get(context.Background(), set.Name, metav1.GetOptions{})
	require.NoError(f.t, err)
	return got
}

// runWakes runs the wake worker (syncLimitWake) over the classes queued
// for it, reporting how many.
func runWakes(c *Controller) int {
	ran := 0
	for c.wakeQueue.Len() > 0 {
		class, _ := c.wakeQueue.Get()
		_ = c.syncLimitWake(context.Background(), class)
		c.wakeQueue.Done(class)
		c.wakeQueue.Forget(class)
		ran++
	}
	return ran
}

// drain syncs what is queued, and what that queues, until nothing is,
// delivering each write to the caches as the informers would; the wake
// worker runs after each round of syncs.
func (f *crowdedClass) drain() {
	c := f.controller
	for {
		for c.queue.Len() > 0 || runWakes(c) > 0 {
			if c.queue.Len() == 0 {
				continue
			}
			key, _ := c.queue.Get()
			f.syncs = append(f.syncs, key)
			_ = c.syncNodeSet(context.Background(), key)
			c.queue.Done(key)
			c.queue.Forget(key)
		}
		if !f.deliver() {
			return
		}
	}
}

// deliver hands the caches the NodeSet statuses and the Nodes written
// since the last call, reporting whether there were any Nodes.
func (f *crowdedClass) deliver() bool {
	c := f.controller
	for _, a := range f.nodesets.Actions() {
		if a.Matches("update", "nodesets") && a.GetSubresource() == "status" {
			set := a.(core.UpdateAction).GetObject().(*nodesetv1alpha1.NodeSet)
			current, err := f.nodesets.NodesetV1alpha1().NodeSets(set.Namespace).Get(context.Background(), set.Name, metav1.GetOptions{})
			require.NoError(f.t, err)
			require.NoError(f.t, c.nodeSetIndexer.Update(current))
		}
	}
	delivered := false
	actions := f.kube.Actions()
	for _, a := range actions[f.seen:] {
		if a.Matches("create", "nodes") {
			node := a.(core.CreateAction).GetObject().(*corev1.Node)
			require.NoError(f.t, c.nodeIndexer.Add(node))
			c.nodeAdded(node)
			delivered = true
		}
	}
	f.seen = len(actions)
	return delivered
}

func (f *crowdedClass) statusWrites() int {
	writes := 0
	for _, a := range f.nodesets.Actions() {
		if a.Matches("update", "nodesets") && a.GetSubresource() == "status" {
			writes++
		}
	}
	return writes
}

// machineGone lowers team-a/web by one and takes one of its Nodes away,
// as its scale-down would; team-b/app is scaled up by one at once.
func (f *crowdedClass) machineGone(round int) {
	c := f.controller
	owner := f.get(f.owner).DeepCopy()
	owner.Spec.Replicas = ptr.To(*owner.Spec.Replicas - 1)
	_, err := f.nodesets.NodesetV1alpha1().NodeSets(owner.Namespace).Update(context.Background(), owner, metav1.UpdateOptions{})
	require.NoError(f.t, err)
	require.NoError(f.t, c.nodeSetIndexer.Update(owner))
	obj, ok, err := c.nodeIndexer.GetByKey(fmt.Sprintf("web-%d", round))
	require.NoError(f.t, err)
	require.True(f.t, ok)
	node := obj.(*corev1.Node)
	require.NoError(f.t, f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("nodes"), "", node.Name))
	require.NoError(f.t, c.nodeIndexer.Delete(node))
	c.nodeDeleted(node)
	c.queue.Add("team-a/web") // its own scale-down's sync

	app := f.get(&nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "app"}}).DeepCopy()
	app.Spec.Replicas = ptr.To(*app.Spec.Replicas + 1)
	app.Generation++
	_, err = f.nodesets.NodesetV1alpha1().NodeSets(app.Namespace).Update(context.Background(), app, metav1.UpdateOptions{})
	require.NoError(f.t, err)
	require.NoError(f.t, c.nodeSetIndexer.Update(app))
	c.queue.Add("team-b/app")
}

// TestAMachineGoneWakesOnlyTheSetsItMakesRoomFor: one tenant holds many
// NodeSets waiting for room in a limited class. Each machine of the class
// that goes makes room for one Node: the set that has waited longest is
// synced for it and gets it, and the others are left alone, so the work
// per machine gone does not grow with the number of waiting sets, and
// another tenant's scale-up in an unrelated class waits for no more than
// a few syncs.
func TestAMachineGoneWakesOnlyTheSetsItMakesRoomFor(t *testing.T) {
	waiting := 300
	if n, err := strconv.Atoi(os.Getenv("NODESET_WAKE_SETS")); err == nil {
		waiting = n
	}
	f := newCrowdedClass(t, waiting)
	for round := range 3 {
		f.nodesets.ClearActions()
		f.syncs = nil
		started := time.Now()
		f.machineGone(round)
		f.drain()
		took := time.Since(started)
		before := len(f.syncs)
		for i, key := range f.syncs {
			if key == "team-b/app" {
				before = i
				break
			}
		}
		t.Logf("%d waiting sets, machine gone %d: %d syncs, %d status writes, %d syncs before team-b/app's, %v",
			waiting, round, len(f.syncs), f.statusWrites(), before, took)
		assert.LessOrEqual(t, len(f.syncs), 5, "syncs for one machine gone")
		assert.LessOrEqual(t, before, 3, "syncs before the unrelated set's scale-up")
		assert.LessOrEqual(t, f.statusWrites(), 6, "status writes for one machine gone")

		// The room went to the set that has waited longest.
		oldest := f.waiting[round]
		created := f.createdSetsOfClass("sim")
		require.Len(t, created, round+1, "one Node of the class per machine gone")
		assert.Equal(t, oldest.Name, created[round], "the oldest waiting set")
	}
}

// TestADeletedClassInUseIsNotListedForEachSync: while the cache shows
// NodeSets of a deleted class, its protection sync lists no NodeSet of the
// cluster; once it shows none, the API server is asked a page at a time,
// and a set only the API server has (made a moment ago) still holds the
// class.
func TestADeletedClassInUseIsNotListedForEachSync(t *testing.T) {
	class := validClass("sim")
	class.Finalizers = []string{nodesetv1alpha1.FinalizerInUse}
	class.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	set := newSet(1)
	set.CreationTimestamp = metav1.NewTime(testNow.Add(-time.Hour))
	f := newFixture(t, class, set)
	var lists []metav1.ListOptions
	f.nodesets.PrependReactor("list", "nodesets", func(a core.Action) (bool, runtime.Object, error) {
		opts := a.(core.ListActionImpl).ListOptions
		lists = append(lists, opts)
		page := &nodesetv1alpha1.NodeSetList{}
		if opts.Continue == "" {
			late := newSet(1)
			late.Name = "late"
			late.CreationTimestamp = metav1.NewTime(testNow.Add(-time.Minute))
			page.Items = []nodesetv1alpha1.NodeSet{*late}
			page.Continue = "next"
		}
		return true, page, nil
	})
	patched := false
	f.nodesets.PrependReactor("patch", "nodeclasses", func(core.Action) (bool, runtime.Object, error) {
		patched = true
		return true, class, nil
	})

	require.NoError(t, f.controller.syncClassProtection(context.Background(), "sim"))
	assert.Empty(t, lists, "a NodeSet of the class in the cache holds it: nothing to list")
	assert.False(t, patched)
	assert.Contains(t, <-f.recorder.Events, "NodeSet team-a/web")

	require.NoError(t, f.controller.nodeSetIndexer.Delete(set))
	require.NoError(t, f.controller.syncClassProtection(context.Background(), "sim"))
	require.Len(t, lists, 2, "every page")
	for _, opts := range lists {
		assert.Positive(t, opts.Limit, "paginated")
	}
	assert.Equal(t, "next", lists[1].Continue)
	assert.False(t, patched, "the set only the API server has holds the class")
	assert.Contains(t, <-f.recorder.Events, "NodeSet team-a/late")
}

// TestAMachineGoneInOneNamespaceWakesNoSetOfAnotherThatIsFull: with a
// per-namespace limit only, the room a machine leaves is its namespace's:
// a waiting set of another, full namespace is not synced for it.
func TestAMachineGoneInOneNamespaceWakesNoSetOfAnotherThatIsFull(t *testing.T) {
	class := validClass("sim")
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](1)}
	refused := []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: ReasonLimitExceeded}}
	web := newSet(2)
	web.Status.Conditions = refused
	f := newFixture(t, class, web)
	full := newSet(2)
	full.Namespace, full.UID, full.Status.Conditions = "hostile", "hostile-uid", refused
	require.NoError(t, f.controller.nodeSetIndexer.Add(full))
	require.NoError(t, f.controller.nodeIndexer.Add(setNode(t, full, class, "hostile-a", time.Hour, true)))
	f.controller.nodeEventBatch = time.Hour

	f.controller.nodeDeleted(setNode(t, web, class, "web-a", time.Hour, true))
	require.Equal(t, 1, runWakes(f.controller))
	require.Equal(t, 1, f.controller.queue.Len())
	key, _ := f.controller.queue.Get()
	assert.Equal(t, "team-a/web", key, "the set of the namespace with room, alone")
}

// TestLimitExceededWaitsFromWhenTheSetAskedForRoom: the Accepted
// condition's lastTransitionTime orders the sets waiting for room. A set
// refused for another reason turns LimitExceeded without leaving
// Accepted=False, and waits from then, not from that refusal; a set that
// goes on waiting keeps its time.
func TestLimitExceededWaitsFromWhenTheSetAskedForRoom(t *testing.T) {
	set := newSet(1)
	parkedAt := metav1.NewTime(testNow.Add(-24 * time.Hour))
	set.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse,
		Reason: ReasonInvalidTemplate, Message: "a label it may not set", LastTransitionTime: parkedAt}}
	waiting := &resolution{accepted: notAccepted(ReasonLimitExceeded, "no room")}

	status := computeStatus(set, waiting, nil, nil, testNow)
	accepted := findCondition(status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, accepted)
	assert.Equal(t, ReasonLimitExceeded, accepted.Reason)
	assert.True(t, accepted.LastTransitionTime.Time.Equal(testNow), "waits from %s, when it asked for room, not from %s", accepted.LastTransitionTime, parkedAt)

	set.Status = status
	later := computeStatus(set, waiting, nil, nil, testNow.Add(time.Hour))
	accepted = findCondition(later.Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, accepted)
	assert.True(t, accepted.LastTransitionTime.Time.Equal(testNow), "still waiting since %s, got %s", testNow, accepted.LastTransitionTime)
}

// TestRoomAWokenSetDoesNotTakeGoesToTheNext: the set that has waited
// longest is woken for the room a machine leaves, but its tenant changed
// it meanwhile into one its class refuses for another reason: it takes
// nothing, and the room goes to the next set waiting at once, not at the
// next machine gone or the resync.
func TestRoomAWokenSetDoesNotTakeGoesToTheNext(t *testing.T) {
	f := newCrowdedClass(t, 3)
	c := f.controller
	refused := f.get(f.waiting[0]).DeepCopy()
	refused.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.ManagedStrategy}
	refused.Generation++
	_, err := f.nodesets.NodesetV1alpha1().NodeSets(refused.Namespace).Update(context.Background(), refused, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, c.nodeSetIndexer.Update(refused)) // its own sync not yet run

	f.machineGone(0)
	f.drain()
	created := f.createdSetsOfClass("sim")
	assert.Equal(t, []string{f.waiting[1].Name}, created, "the room goes to the next set waiting")
	accepted := findCondition(f.get(f.waiting[0]).Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, accepted)
	assert.Equal(t, ReasonStrategyNotSupported, accepted.Reason)
	accepted = findCondition(f.get(f.waiting[2]).Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, accepted)
	assert.Equal(t, ReasonLimitExceeded, accepted.Reason, "no room for the third")
}

// TestMachinesGoneTogetherCountTheClassOnce: several machines of a class
// with many sets waiting go at once (a drain wave). The informer's handler
// counts nothing; the wake worker counts the class once for all of them,
// and wakes as many waiting sets as they left room for.
func TestMachinesGoneTogetherCountTheClassOnce(t *testing.T) {
	f := newCrowdedClass(t, 300)
	c := f.controller
	lister := &countingNodeLister{NodeLister: c.nodeLister}
	c.nodeLister = lister
	for i := range 3 {
		obj, ok, err := c.nodeIndexer.GetByKey(fmt.Sprintf("web-%d", i))
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, c.nodeIndexer.Delete(obj))
		c.nodeDeleted(obj)
	}
	assert.Zero(t, lister.lists.Load(), "Node listings in the informer's handler")
	require.Equal(t, 1, runWakes(c), "one look at the class")
	assert.Equal(t, int64(1), lister.lists.Load(), "Node listings for three machines gone")
	var woken []string
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		c.queue.Done(key)
		if key != "team-a/web" {
			woken = append(woken, key)
		}
	}
	assert.ElementsMatch(t, []string{"hostile/" + f.waiting[0].Name, "hostile/" + f.waiting[1].Name, "hostile/" + f.waiting[2].Name}, woken,
		"the three sets that waited longest")
}

// TestADeletedClassIsNotHeldByANamespaceItRefuses: a NodeSet of a
// namespace the deleted class does not admit (stored while the webhook was
// away) gets nothing of the class and does not hold it, unless it has a
// cloud group the node controller made while the namespace was admitted;
// a namespace that cannot be read holds the class.
func TestADeletedClassIsNotHeldByANamespaceItRefuses(t *testing.T) {
	for _, tt := range []struct {
		name      string
		allowed   nodesetv1alpha1.AllowedNamespaces
		namespace string
		group     bool
		holds     bool
	}{
		{"a namespace the class admits", nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{"team-a"}}, "team-a", false, true},
		{"a namespace the class refuses", nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{"team-b"}}, "team-a", false, false},
		{"a refused namespace's set with a cloud group", nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{"team-b"}}, "team-a", true, true},
		{"a namespace the selector finds no labels of", nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromSelector,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}, "team-unread", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			class := validClass("sim")
			class.Spec.AllowedNamespaces = &tt.allowed
			class.Finalizers = []string{nodesetv1alpha1.FinalizerInUse}
			class.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
			set := newSet(0)
			set.Namespace = tt.namespace
			set.CreationTimestamp = metav1.NewTime(testNow.Add(-time.Hour))
			if tt.group {
				set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "nodeset-prod-team-a-web-0123abcd"}
			}
			f := newFixture(t, class, set)
			patched := false
			f.nodesets.PrependReactor("patch", "nodeclasses", func(core.Action) (bool, runtime.Object, error) {
				patched = true
				return true, class, nil
			})
			require.NoError(t, f.controller.syncClassProtection(context.Background(), "sim"))
			assert.Equal(t, !tt.holds, patched, "the in-use finalizer is removed")
		})
	}
}
