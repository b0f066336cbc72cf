package autoscaler

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/plan"
)

// maxSize is the most nodes the set may grow to: maxReplicas, or less
// when its class's limits leave less room beside everything else of the
// class (room), but never less than it has asked for already or than
// minReplicas. cluster-autoscaler cannot see the limits: it caps a
// scale-up at a group's max size and skips a group that is at it. binding
// names the limit when it lowers the answer. views holds, by class name,
// each class's count (classView), made once for all the sets of one
// NodeGroups answer.
func (s *Server) maxSize(set *nodesetv1alpha1.NodeSet, sets []*nodesetv1alpha1.NodeSet, views map[string]classView) (size int32, binding string) {
	size = set.Spec.Autoscaling.MaxReplicas
	class, err := s.classes.Get(set.Spec.NodeClassName)
	if err != nil || !plan.Limited(class) {
		return size, ""
	}
	view, ok := views[class.Name]
	if !ok {
		if view, err = s.view(class, sets); err != nil {
			return size, ""
		}
		views[class.Name] = view
	}
	room, limit := view.room(class, set)
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
	view, err := s.view(class, sets)
	if err != nil {
		return 0, status.Errorf(codes.Unavailable, "counting the nodes of NodeClass %s: %v", class.Name, err)
	}
	room, limit := view.room(class, set)
	if target <= room || limit == nil {
		return target, nil
	}
	if room <= int64(plan.Replicas(set)) {
		return 0, status.Errorf(codes.ResourceExhausted, "node group %s: %s", GroupID(set), limit.Refusal(target))
	}
	return room, nil
}

// classView is a class's machines, counted once (the nodeset controller's
// count, plan.ClassCount), and the growth of its NodeSets: by NodeSet key,
// how many nodes each was told to grow to and has no machine for yet. A
// scale-up written a moment ago has no Node yet, and the controller makes
// the Nodes of whichever NodeSet it syncs first, so each set's room leaves
// out the others' growth as well as their machines.
type classView struct {
	count  plan.ClassCount
	coming map[string]int64
}

// view counts the class once, with the growth of its NodeSets among sets.
// Only the NodeSets the controller makes Nodes for grow so (Accepted, or
// not judged yet): one over the limits (LimitExceeded) counts with its
// machines, or a set asking for more than the limits allow would hold
// back every other set's scale-up.
func (s *Server) view(class *nodesetv1alpha1.NodeClass, sets []*nodesetv1alpha1.NodeSet) (classView, error) {
	count, err := s.count(class)
	if err != nil {
		return classView{}, err
	}
	view := classView{count: count, coming: map[string]int64{}}
	for _, other := range sets {
		if other.Spec.NodeClassName != class.Name || other.DeletionTimestamp != nil || !managed(other) {
			continue
		}
		id := GroupID(other)
		if c := int64(plan.Replicas(other)) - count.Machines(id); c > 0 {
			view.coming[id] = c
		}
	}
	return view, nil
}

// room is how many nodes set may have beside everything else of its
// class, and the limit that binds (nil for none): the machines of the
// class but set's own, and the growth of the class's other NodeSets.
func (v classView) room(class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet) (int64, *plan.Limit) {
	key := GroupID(set)
	used := v.count.Usage(set.Namespace, key)
	for id, c := range v.coming {
		if id == key {
			continue
		}
		used.Class += c
		if namespace, _, _ := strings.Cut(id, "/"); namespace == set.Namespace {
			used.Namespace += c
		}
	}
	return plan.Room(class, set.Namespace, used)
}

// managed reports whether the NodeSetController makes the set's Nodes up
// to spec.replicas: it is Accepted, or not judged yet.
func managed(set *nodesetv1alpha1.NodeSet) bool {
	accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	return accepted == nil || accepted.Status == metav1.ConditionTrue
}
