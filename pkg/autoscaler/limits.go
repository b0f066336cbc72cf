package autoscaler

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/plan"
)

// maxSize is the most nodes the set may grow to: maxReplicas, or less
// when its class's limits leave less room beside everything else of the
// class (room), but never less than it has asked for already or than
// minReplicas. cluster-autoscaler cannot see the limits: it caps a
// scale-up at a group's max size and skips a group that is at it. binding
// names the limit when it lowers the answer. growth holds, by class name,
// the growth of the class's NodeSets among sets (see growth), counted
// once for all the sets of one NodeGroups answer.
func (s *Server) maxSize(set *nodesetv1alpha1.NodeSet, sets []*nodesetv1alpha1.NodeSet, growth map[string]map[string]int64) (size int32, binding string) {
	size = set.Spec.Autoscaling.MaxReplicas
	class, err := s.classes.Get(set.Spec.NodeClassName)
	if err != nil || !plan.Limited(class) {
		return size, ""
	}
	coming, ok := growth[class.Name]
	if !ok {
		if coming, err = s.growth(class, sets); err != nil {
			return size, ""
		}
		growth[class.Name] = coming
	}
	room, limit, err := s.room(class, set, coming)
	if err != nil {
		return size, ""
	}
	room = max(room, int64(plan.Replicas(set)), int64(set.Spec.Autoscaling.MinReplicas))
	if limit == nil || room >= int64(size) {
		return size, ""
	}
	return int32(room), limit.String()
}

// withinLimits is target, or less when the class's maxNodes or
// maxNodesPerNamespace leave less room beside everything else of the
// class; it refuses when they leave room for no node more than the set
// has asked for already. The other NodeSets are read from the API server,
// not the cache: the scale-up written a moment ago is not in the cache
// yet.
func (s *Server) withinLimits(ctx context.Context, set *nodesetv1alpha1.NodeSet, target int64) (int64, error) {
	class, err := s.classes.Get(set.Spec.NodeClassName)
	if err != nil || !plan.Limited(class) {
		return target, nil
	}
	list, err := s.client.NodesetV1alpha1().NodeSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, status.Errorf(codes.Unavailable, "listing the NodeSets of NodeClass %s: %v", class.Name, err)
	}
	sets := make([]*nodesetv1alpha1.NodeSet, 0, len(list.Items))
	for i := range list.Items {
		sets = append(sets, &list.Items[i])
	}
	coming, err := s.growth(class, sets)
	if err != nil {
		return 0, status.Errorf(codes.Unavailable, "counting the nodes of NodeClass %s: %v", class.Name, err)
	}
	room, limit, err := s.room(class, set, coming)
	if err != nil {
		return 0, status.Errorf(codes.Unavailable, "counting the nodes of NodeClass %s: %v", class.Name, err)
	}
	if target <= room || limit == nil {
		return target, nil
	}
	if room <= int64(plan.Replicas(set)) {
		return 0, status.Errorf(codes.ResourceExhausted, "node group %s: %s", GroupID(set), limit.Refusal(target))
	}
	return room, nil
}

// growth is, by NodeSet key, how many nodes each NodeSet of class among
// sets was told to grow to and has no machine for yet: a scale-up written
// a moment ago has no Node yet, and the controller makes the Nodes of
// whichever NodeSet it syncs first. Only the NodeSets the controller makes
// Nodes for count so (Accepted, or not judged yet): one over the limits
// (LimitExceeded) counts with its machines, or a set asking for more than
// the limits allow would hold back every other set's scale-up.
//
// A set's machines are its Nodes and the creations and cloud instances
// the usage count has that the cache has no Node of yet: the class's
// count less the count without the set. Only the sets with more replicas
// than Nodes can have growth, so the class's Nodes are counted once more
// for each of those, not for every set of the class.
func (s *Server) growth(class *nodesetv1alpha1.NodeClass, sets []*nodesetv1alpha1.NodeSet) (map[string]int64, error) {
	classNodes, err := s.nodes.List(labels.SelectorFromSet(labels.Set{nodesetv1alpha1.LabelNodeClass: class.Name}))
	if err != nil {
		return nil, err
	}
	seen := map[string]int64{}
	for _, n := range classNodes {
		if namespace, name, ok := nodeutil.NodeSetOf(n.Labels); ok {
			seen[namespace+"/"+name]++
		}
	}
	coming := map[string]int64{}
	var all *plan.Usage
	for _, other := range sets {
		id := GroupID(other)
		if other.Spec.NodeClassName != class.Name || other.DeletionTimestamp != nil ||
			int64(plan.Replicas(other)) <= seen[id] || !managed(other) {
			continue
		}
		if all == nil {
			u, err := s.usage(class, "", "")
			if err != nil {
				return nil, err
			}
			all = &u
		}
		without, err := s.usage(class, "", id)
		if err != nil {
			return nil, err
		}
		if c := int64(plan.Replicas(other)) - (all.Class - without.Class); c > 0 {
			coming[id] = c
		}
	}
	return coming, nil
}

// room is how many nodes set may have beside everything else of its
// class, and the limit that binds (nil for none): the machines of the
// class but set's own (usage), and the growth of the class's other
// NodeSets (coming, from growth).
func (s *Server) room(class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet, coming map[string]int64) (int64, *plan.Limit, error) {
	key := GroupID(set)
	used, err := s.usage(class, set.Namespace, key)
	if err != nil {
		return 0, nil, err
	}
	for id, c := range coming {
		if id == key {
			continue
		}
		used.Class += c
		if namespace, _, _ := strings.Cut(id, "/"); namespace == set.Namespace {
			used.Namespace += c
		}
	}
	room, limit := plan.Room(class, set.Namespace, used)
	return room, limit, nil
}

// managed reports whether the NodeSetController makes the set's Nodes up
// to spec.replicas: it is Accepted, or not judged yet.
func managed(set *nodesetv1alpha1.NodeSet) bool {
	accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	return accepted == nil || accepted.Status == metav1.ConditionTrue
}
