package nodeset

import (
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/plan"
)

// classCounts keeps each class's last ClassCount for as long as nothing it
// was counted from has changed. A class edit, or the periodic resync,
// syncs every NodeSet of the class, and each sync of a limited class
// weighs its set against the class: counted afresh each time, that is
// sets × (Nodes + sets) for one edit. Kept, it is counted once per change
// of what it counts.
//
// What a count is made of, and what marks it out of date:
//   - the class's Nodes in the cache: the Node handlers (nodeCounted);
//   - its NodeSets (their keys, seals and status.group): the NodeSet
//     handlers (setCounted);
//   - the creations not yet observed: the expectations' version, bumped
//     by each change of them, and the earliest expiry of those counted.
//
// Only a class whose Add the controller has seen is kept (version > 0):
// every change of such a class's Nodes and sets goes by its handlers.
type classCounts struct {
	mu       sync.Mutex
	seq      uint64
	versions map[string]uint64 // by class name; a value is never reused
	kept     map[string]keptCount
	// made counts the full counts made, over all classes.
	made atomic.Int64
}

type keptCount struct {
	version      uint64 // of the class, read before the count
	expectations uint64 // of the expectations the count read
	until        time.Time
	count        plan.ClassCount
}

func newClassCounts() *classCounts {
	return &classCounts{versions: map[string]uint64{}, kept: map[string]keptCount{}}
}

// track starts keeping the counts of a class, or marks its kept count out
// of date.
func (k *classCounts) track(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	k.versions[name] = k.seq
	delete(k.kept, name)
}

// changed marks the kept counts of the named classes out of date; a class
// not tracked is left so (a Node may name any class).
func (k *classCounts) changed(names ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, name := range names {
		if _, ok := k.versions[name]; ok {
			k.seq++
			k.versions[name] = k.seq
			delete(k.kept, name)
		}
	}
}

// untrack forgets a deleted class.
func (k *classCounts) untrack(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.versions, name)
	delete(k.kept, name)
}

// ClassCount is plan.CountClass over this controller's view of a class
// (countClass), counted once for as long as nothing it counts changes
// (classCounts).
func (c *Controller) ClassCount(class *nodesetv1alpha1.NodeClass) (plan.ClassCount, error) {
	k := c.classCounts
	k.mu.Lock()
	version := k.versions[class.Name]
	kept, ok := k.kept[class.Name]
	k.mu.Unlock()
	if ok && kept.version == version && kept.expectations == c.expectations.currentVersion() &&
		(kept.until.IsZero() || c.now().Before(kept.until)) {
		return kept.count, nil
	}
	count, seen, err := c.countClass(class)
	if err != nil {
		return plan.ClassCount{}, err
	}
	k.made.Add(1)
	if version == 0 {
		return count, nil
	}
	k.mu.Lock()
	if k.versions[class.Name] == version {
		// Not changed while it was counted: kept. Changed, the change may
		// be missing from it.
		k.kept[class.Name] = keptCount{version: version, expectations: seen.version, until: seen.until, count: count}
	}
	k.mu.Unlock()
	return count, nil
}

// nodeCounted marks out of date the counts of the classes a Node's change
// may change: those its old and new labels name, and those of the NodeSets
// whose seal a relabelled Node carries (strayedNodes). old or cur is nil
// for a Node added or deleted; an update that changes nothing counted
// (a heartbeat, a condition) changes no count.
func (c *Controller) nodeCounted(old, cur *corev1.Node) {
	if old != nil && cur != nil && countedAlike(old, cur) {
		return
	}
	var names []string
	for _, node := range []*corev1.Node{old, cur} {
		if node == nil {
			continue
		}
		names = append(names, node.Labels[nodesetv1alpha1.LabelNodeClass])
		if nodeutil.Tampered(node.Labels) {
			owners, _ := c.nodeSetIndexer.ByIndex(bySealIndex, node.Labels[nodesetv1alpha1.LabelSeal])
			for _, obj := range owners {
				names = append(names, obj.(*nodesetv1alpha1.NodeSet).Spec.NodeClassName)
			}
		}
	}
	c.classCounts.changed(names...)
}

// countedAlike reports whether two versions of a Node count alike for a
// class: same class, set and seal labels, and both nodeset's or neither
// (nodeutil.Foreign).
func countedAlike(a, b *corev1.Node) bool {
	for _, label := range []string{nodesetv1alpha1.LabelNodeClass, nodesetv1alpha1.LabelNodeSet,
		nodesetv1alpha1.LabelNodeSetNamespace, nodesetv1alpha1.LabelSeal} {
		av, aok := a.Labels[label]
		bv, bok := b.Labels[label]
		if av != bv || aok != bok {
			return false
		}
	}
	return nodeutil.Foreign(a) == nodeutil.Foreign(b)
}

// setCounted marks out of date the counts of the classes a NodeSet's
// change may change: its old and new class when it is added, deleted or
// moved, or when its cloud group's report (status.group) changed. A status
// the nodeset controller wrote itself changes no count.
func (c *Controller) setCounted(old, cur any) {
	o, _ := nodeutil.EventObject[*nodesetv1alpha1.NodeSet](old)
	n, _ := nodeutil.EventObject[*nodesetv1alpha1.NodeSet](cur)
	switch {
	case o == nil && n == nil:
	case o == nil:
		c.classCounts.changed(n.Spec.NodeClassName)
	case n == nil:
		c.classCounts.changed(o.Spec.NodeClassName)
	case o.Spec.NodeClassName != n.Spec.NodeClassName:
		c.classCounts.changed(o.Spec.NodeClassName, n.Spec.NodeClassName)
	case !equality.Semantic.DeepEqual(o.Status.Group, n.Status.Group):
		c.classCounts.changed(n.Spec.NodeClassName)
	}
}

// countClass is plan.CountClass over this controller's view of a class:
// its Nodes in the cache, the creations made and not yet observed, and the
// instances of its cloud groups that have no Node yet; and what it read of
// the expectations.
//
// The unobserved creations are read before the cache: the informer adds a
// Node to the cache before its handler lowers the expectations, so a Node
// arriving between the two reads is in both. It is counted once: the
// creations are read with the names of their Nodes, and those the cache
// shows are taken out of them. Read the other way round, a Node arriving
// between the reads would not be counted at all.
func (c *Controller) countClass(class *nodesetv1alpha1.NodeClass) (plan.ClassCount, unobservedRead, error) {
	unobserved, named, seen := c.expectations.unobservedCreations(func(key string) bool { return c.classOf(key) == class.Name })
	nodes, err := c.nodeLister.List(nodeutil.ClassSelector(class.Name))
	if err != nil {
		return plan.ClassCount{}, seen, err
	}
	if len(named) > 0 {
		// The names are few (creations in flight), the Nodes many: the
		// Nodes are looked up among the names, not the other way round.
		keyOf := map[string]string{}
		for key, names := range named {
			for _, name := range names {
				keyOf[name] = key
			}
		}
		for _, n := range nodes {
			if key, ok := keyOf[n.Name]; ok && unobserved[key] > 0 {
				unobserved[key]--
			}
		}
	}
	objs, err := c.nodeSetIndexer.ByIndex(byClassIndex, class.Name)
	if err != nil {
		return plan.ClassCount{}, seen, err
	}
	sets := make([]*nodesetv1alpha1.NodeSet, 0, len(objs))
	for _, obj := range objs {
		sets = append(sets, obj.(*nodesetv1alpha1.NodeSet))
	}
	pending := plan.UnseenGroupMachines(sets, class.Name, nodes)
	for key, count := range unobserved {
		pending[key] += count
	}
	// The set's Nodes that their kubelets relabelled (to another class, or
	// another set) are still its machines: they count as the set's until
	// their labels are back.
	for _, set := range sets {
		strayed, err := c.strayedNodes(set)
		if err != nil {
			return plan.ClassCount{}, seen, err
		}
		if len(strayed) > 0 && (set.Status.Group == nil || set.Status.Group.DesiredSize == nil) {
			pending[set.Namespace+"/"+set.Name] += int64(len(strayed))
		}
	}
	return plan.CountClass(nodes, pending), seen, nil
}
