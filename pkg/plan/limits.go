package plan

import (
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// Usage is what counts against a NodeClass's limits: machines, not wishes.
// A machine counts from the moment it is asked for until it is gone.
type Usage struct {
	// Class counts the machines of the whole class.
	Class int64
	// Namespace counts those of the NodeSets of one namespace.
	Namespace int64
}

// Pending are machines asked for and not yet seen as Nodes, by the key
// ("namespace/name") of the NodeSet that asked: Node creations in flight,
// the instances of a cloud group that have no Node yet.
type Pending map[string]int64

// CountUsage is the one count of a class's limits, seen from namespace:
// every Node of the class (classNodes), terminating ones included since
// their machines still exist, plus the pending machines of its NodeSets.
// The Nodes and pending machines of the NodeSet with key except ("" for
// none) are left out, so that its own demand can be weighed against the
// rest. A Node of no NodeSet (a static node) counts for the class only. A
// Node nodeset never took (nodeutil.Foreign: a kubelet's own, labelled
// with the class or a set) counts for none.
func CountUsage(classNodes []*corev1.Node, pending Pending, namespace, except string) Usage {
	return CountClass(classNodes, pending).Usage(namespace, except)
}

// ClassCount is a class's machines counted once (CountClass): the whole
// class's, each namespace's and each NodeSet's, from which the Usage seen
// from any namespace without any one NodeSet follows at no further cost.
// A NodeGroups answer weighs every NodeSet of a class against the rest;
// counting the class's Nodes again for each would cost sets × Nodes.
type ClassCount struct {
	// Class counts the machines of the whole class.
	Class      int64
	namespaces map[string]int64
	sets       map[string]int64
}

// CountClass counts, in one pass, the class's Nodes and pending machines
// as CountUsage counts them.
func CountClass(classNodes []*corev1.Node, pending Pending) ClassCount {
	c := ClassCount{namespaces: map[string]int64{}, sets: map[string]int64{}}
	for _, n := range classNodes {
		if nodeutil.Foreign(n) {
			continue // no machine of nodeset's, whatever its labels say
		}
		c.Class++
		if ns, name, ok := nodeutil.NodeSetOf(n.Labels); ok {
			c.namespaces[ns]++
			c.sets[ns+"/"+name]++
		}
	}
	for key, count := range pending {
		if count <= 0 {
			continue
		}
		ns, _, _ := strings.Cut(key, "/")
		c.Class = saturatingAdd(c.Class, count)
		c.namespaces[ns] = saturatingAdd(c.namespaces[ns], count)
		c.sets[key] = saturatingAdd(c.sets[key], count)
	}
	return c
}

// Machines are the machines of the NodeSet with key: its Nodes and its
// pending machines.
func (c ClassCount) Machines(key string) int64 { return c.sets[key] }

// Usage is what counts against the class's limits seen from namespace,
// leaving out the NodeSet with key except ("" for none), as CountUsage
// says. A count that reached math.MaxInt64 stays there.
func (c ClassCount) Usage(namespace, except string) Usage {
	used := Usage{Class: c.Class, Namespace: c.namespaces[namespace]}
	if own := c.sets[except]; except != "" && own > 0 {
		used.Class = saturatingSub(used.Class, own)
		if ns, _, _ := strings.Cut(except, "/"); ns == namespace {
			used.Namespace = saturatingSub(used.Namespace, own)
		}
	}
	return used
}

// saturatingSub is a-b for counts made with saturatingAdd: a count that
// saturated does not come down, since what it held is not known.
func saturatingSub(a, b int64) int64 {
	if a == math.MaxInt64 {
		return a
	}
	return a - b
}

// Limit is a class limit that binds: the field, its value and what is in use.
type Limit struct {
	// Class is the NodeClass's name.
	Class string
	// Field is the spec path of the limit.
	Field string
	// Max is the limit's value.
	Max int64
	// Used is what counts against it.
	Used int64
	// Namespace is set for the per-namespace limit.
	Namespace string
}

// String says which limit binds and how much of it is used.
func (l *Limit) String() string {
	if l.Namespace != "" {
		return fmt.Sprintf("NodeClass %q allows at most %d nodes per namespace (%s) and namespace %q has %d",
			l.Class, l.Max, l.Field, l.Namespace, l.Used)
	}
	return fmt.Sprintf("NodeClass %q allows at most %d nodes (%s) and has %d", l.Class, l.Max, l.Field, l.Used)
}

// Refusal is the message refusing want nodes to a NodeSet, where Used
// counts everything of the class but that NodeSet.
func (l *Limit) Refusal(want int64) string {
	if l.Namespace != "" {
		return fmt.Sprintf("spec.replicas: %d nodes would exceed NodeClass %q's %s of %d: namespace %q has %d other nodes of the class",
			want, l.Class, l.Field, l.Max, l.Namespace, l.Used)
	}
	return fmt.Sprintf("spec.replicas: %d nodes would exceed NodeClass %q's %s of %d: it has %d other nodes",
		want, l.Class, l.Field, l.Max, l.Used)
}

// Room is how many more machines the class's limits allow beside used, in
// namespace, and the limit that binds (nil when the class is unlimited).
func Room(class *nodesetv1alpha1.NodeClass, namespace string, used Usage) (int64, *Limit) {
	room, binding := int64(math.MaxInt64), (*Limit)(nil)
	limits := class.Spec.Limits
	if limits == nil {
		return room, nil
	}
	if l := limits.MaxNodes; l != nil && int64(*l)-used.Class < room {
		room = int64(*l) - used.Class
		binding = &Limit{Class: class.Name, Field: "spec.limits.maxNodes", Max: int64(*l), Used: used.Class}
	}
	if l := limits.MaxNodesPerNamespace; l != nil && int64(*l)-used.Namespace < room {
		room = int64(*l) - used.Namespace
		binding = &Limit{Class: class.Name, Field: "spec.limits.maxNodesPerNamespace", Max: int64(*l), Used: used.Namespace, Namespace: namespace}
	}
	return max(room, 0), binding
}

// Limited reports whether the class has a limit at all.
func Limited(class *nodesetv1alpha1.NodeClass) bool {
	l := class.Spec.Limits
	return l != nil && (l.MaxNodes != nil || l.MaxNodesPerNamespace != nil)
}

// Fits checks whether a NodeSet may have want machines beside others, the
// usage of everything else of its class (CountUsage with the set as
// except). It returns "" when it may, else the refusal naming the field.
func Fits(class *nodesetv1alpha1.NodeClass, namespace string, others Usage, want int64) string {
	room, binding := Room(class, namespace, others)
	if want <= room || binding == nil {
		return ""
	}
	return binding.Refusal(want)
}

func saturatingAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// UnseenGroupMachines are, for each NodeSet of class whose cloud group
// reports a desired size (status.group.desiredSize), the machines of that
// size that have no Node among classNodes yet: instances booting, or
// about to be launched. A kubelet's own Node that claims the set
// (nodeutil.Foreign) is not one of them: an instance whose kubelet
// registered first counts as unseen until its Node is adopted.
func UnseenGroupMachines(sets []*nodesetv1alpha1.NodeSet, class string, classNodes []*corev1.Node) Pending {
	seen := map[string]int64{}
	for _, n := range classNodes {
		if ns, name, ok := nodeutil.NodeSetOf(n.Labels); ok && !nodeutil.Foreign(n) {
			seen[ns+"/"+name]++
		}
	}
	out := Pending{}
	for _, set := range sets {
		if set.Spec.NodeClassName != class || set.Status.Group == nil || set.Status.Group.DesiredSize == nil {
			continue
		}
		key := set.Namespace + "/" + set.Name
		if unseen := int64(*set.Status.Group.DesiredSize) - seen[key]; unseen > 0 {
			out[key] = unseen
		}
	}
	return out
}
