package plan

import (
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// Plan is what one sync does to a NodeSet's Nodes.
type Plan struct {
	// Create is how many Nodes to create with the current template.
	Create int
	// Remove are the Nodes to delete, in order.
	Remove []*corev1.Node
	// Replacing is true when Remove holds outdated Nodes a rollout replaces.
	Replacing bool
}

// RollingUpdate reports whether the set's strategy is RollingUpdate (the default).
func RollingUpdate(set *nodesetv1alpha1.NodeSet) bool {
	return set.Spec.Strategy.Type == "" || set.Spec.Strategy.Type == nodesetv1alpha1.RollingUpdateStrategy
}

// Rolling reports whether the set is in a rolling update: its strategy is
// RollingUpdate, it is not paused and some of its active Nodes are outdated.
func Rolling(set *nodesetv1alpha1.NodeSet, templateHash string, active []*corev1.Node) bool {
	if set.Spec.Paused || !RollingUpdate(set) {
		return false
	}
	for _, n := range active {
		if n.Labels[nodesetv1alpha1.LabelTemplateHash] != templateHash {
			return true
		}
	}
	return false
}

// RollingOut reports whether a rolling update of the set is under way, by
// the template hash its status last recorded: some Node not being deleted
// has another one.
func RollingOut(set *nodesetv1alpha1.NodeSet, nodes []*corev1.Node) bool {
	return set.Status.TemplateHash != "" && Rolling(set, set.Status.TemplateHash, Active(nodes))
}

// Decide returns the creations and deletions that bring the set's Nodes
// (nodes, terminating ones included) towards spec.replicas Nodes of the
// current template.
//
// Nodes on the delete list go first, whatever else happens; the rest is
// planned without them. Outside a rolling update the set is a ReplicaSet:
// create or delete the difference, outdated and unhealthy Nodes going first.
// In a rolling update it is a Deployment with one Node per pod: never more
// than replicas + maxSurge Nodes (a terminating Node counts, its machine
// still exists) and never fewer than replicas - maxUnavailable available
// Nodes that are not terminating; new Nodes beyond replicas go too. A
// paused rolling update keeps the new Nodes its surge made.
func Decide(set *nodesetv1alpha1.NodeSet, templateHash string, nodes []*corev1.Node, now time.Time) Plan {
	listed := DeleteList(set)
	var forced, rest []*corev1.Node
	for _, n := range nodes {
		if n.DeletionTimestamp == nil && listed[n.Name] {
			forced = append(forced, n)
		} else {
			rest = append(rest, n)
		}
	}
	p := decideRest(set, templateHash, rest, now)
	if len(forced) > 0 {
		p.Remove = append(forced, p.Remove...)
	}
	return p
}

func decideRest(set *nodesetv1alpha1.NodeSet, templateHash string, nodes []*corev1.Node, now time.Time) Plan {
	replicas := int(Replicas(set))
	// A Node marked for replacement is going, like a terminating one: its
	// replacement is not a surplus to remove.
	active := Staying(nodes)
	minReady := time.Duration(set.Spec.MinReadySeconds) * time.Second
	if !Rolling(set, templateHash, active) {
		switch diff := len(active) - replicas; {
		case diff < 0:
			create := -diff
			if RollingUpdate(set) {
				// Nodes still draining count toward maxSurge here too: at the
				// tail of a rollout the last outdated Nodes are terminating
				// while the last new ones are still to be made.
				surge, _ := Bounds(set, replicas)
				create = min(create, max(replicas+surge-len(nodes), 0))
			}
			return Plan{Create: create}
		case diff > 0:
			if GroupRollsItsNodes(set) {
				// The surge of the group's own update: the group takes it
				// away itself when the update ends.
				return Plan{}
			}
			if diff -= pausedSurge(set, templateHash, active, replicas); diff <= 0 {
				return Plan{}
			}
			return Plan{Remove: Victims(active, diff, set.Spec.DeletePolicy, templateHash, minReady, now)}
		}
		return Plan{}
	}

	surge, unavailable := Bounds(set, replicas)
	var current, outdated []*corev1.Node
	available := 0
	for _, n := range active {
		if Available(n, minReady, now) {
			available++
		}
		if n.Labels[nodesetv1alpha1.LabelTemplateHash] == templateHash {
			current = append(current, n)
		} else {
			outdated = append(outdated, n)
		}
	}

	p := Plan{Replacing: true}
	if room := replicas + surge - len(nodes); room > 0 {
		p.Create = max(min(room, replicas-len(current)), 0)
	}

	// Remove outdated Nodes while enough stay available: one that is not
	// Ready costs nothing, a Ready one costs one, also before it has been
	// Ready for minReadySeconds (it runs pods, and would be available in a
	// moment); such a Node goes before an available one (Victims), which
	// keeps serving. What a removal costs is what the budget holds: an
	// outdated Node Ready for less than minReadySeconds counts among the
	// available ones, or with maxUnavailable at replicas nothing would go
	// until every outdated Node had been Ready for minReadySeconds. Such
	// Nodes go before the available outdated ones, so each takes back what
	// it added before an available Node is weighed. New Nodes still coming
	// up (or Ready for less than minReadySeconds) are not available, so they
	// hold removals back.
	minAvailable := replicas - unavailable
	candidates := Victims(outdated, len(outdated), set.Spec.DeletePolicy, templateHash, minReady, now)
	for _, n := range candidates {
		if nodeutil.IsReady(n) && !Available(n, minReady, now) {
			available++
		}
	}
	// New Nodes beyond replicas (the set was scaled down mid-rollout) go
	// as well, as a Deployment scales its new ReplicaSet down to replicas:
	// kept until the outdated ones are gone, new Nodes that never come up
	// would hold the set above replicas + maxSurge for good.
	candidates = append(candidates, Victims(current, len(current)-replicas, set.Spec.DeletePolicy, templateHash, minReady, now)...)
	if GroupRollsItsNodes(set) {
		// The group replaces the outdated Nodes itself in its update (one
		// started under Managed): the set's own rollout waits for its end.
		candidates = nil
	}
	for _, n := range candidates {
		if nodeutil.IsReady(n) {
			if available-1 < minAvailable {
				continue
			}
			available--
		}
		p.Remove = append(p.Remove, n)
	}
	return p
}

// GroupRollsItsNodes reports whether the set's cloud group runs its own
// update now (an EKS managed node group's, status.group): the group
// raises itself above replicas, brings its new nodes up, drains and
// terminates its old ones and lowers itself again, by its own rules. The
// Nodes above replicas are that update's surge, not a surplus to remove:
// removed, each would lower the group under the update, which would then
// lower it once more at its end. That is the case of a Managed set whose
// group is UPDATING or whose update is InProgress, and of a set of any
// strategy with an update InProgress: one started while the set was
// Managed goes on after a switch to RollingUpdate or OnDelete, and a
// rolling plan of the set's own would remove what the update brings up.
// (A group UPDATING with no update tracked, under another strategy, is one
// of nodeset's own scaling writes.)
func GroupRollsItsNodes(set *nodesetv1alpha1.NodeSet) bool {
	g := set.Status.Group
	if g != nil && g.UpdateStatus == nodesetv1alpha1.GroupUpdateStatusInProgress {
		return true
	}
	return set.Spec.Strategy.Type == nodesetv1alpha1.ManagedStrategy && GroupUpdating(g)
}

// GroupUpdating reports whether the cloud group runs a change of its own,
// as its status reports it: the group is UPDATING, or an update of it is
// InProgress (an EKS managed node group's).
func GroupUpdating(g *nodesetv1alpha1.GroupStatus) bool {
	return g != nil && (g.State == "UPDATING" || g.UpdateStatus == nodesetv1alpha1.GroupUpdateStatusInProgress)
}

// GroupUpdateFailed reports whether the cloud group's last update, a
// driver-native one (EKS managed node groups), failed or was cancelled.
func GroupUpdateFailed(g *nodesetv1alpha1.GroupStatus) bool {
	return g != nil && g.UpdateID != "" && UpdateFailed(g.UpdateStatus)
}

// UpdateFailed reports whether a cloud group's update state says the
// update failed or was cancelled: it ended, and the group did not take
// what it was to bring.
func UpdateFailed(updateStatus string) bool {
	return updateStatus == nodesetv1alpha1.GroupUpdateStatusFailed || updateStatus == nodesetv1alpha1.GroupUpdateStatusCancelled
}

// GroupRefused reports whether a Managed set's cloud group refused the
// set's current template (status.group.refusedTemplateHash; a refusal of
// an earlier one says nothing of a fix the node controller has not tried
// yet) while the set waits for the group to take it: the group says it is
// at another one, or, for a group that does not say, nodes are outdated.
func GroupRefused(set *nodesetv1alpha1.NodeSet, templateHash string, outdated int32) bool {
	g := set.Status.Group
	if set.Spec.Strategy.Type != nodesetv1alpha1.ManagedStrategy || g == nil || templateHash == "" || g.RefusedTemplateHash != templateHash {
		return false
	}
	if g.TemplateHash != "" {
		return templateHash != "" && g.TemplateHash != templateHash
	}
	return outdated > 0
}

// GroupBehind reports whether a Managed set's cloud group, which takes the
// set's changes itself, says it is at another template than templateHash,
// and no update of it failed (GroupUpdateFailed says that).
func GroupBehind(set *nodesetv1alpha1.NodeSet, templateHash string) bool {
	g := set.Status.Group
	return set.Spec.Strategy.Type == nodesetv1alpha1.ManagedStrategy && g != nil && g.TemplateHash != "" && templateHash != "" &&
		g.TemplateHash != templateHash && !GroupUpdateFailed(g)
}

// pausedSurge is how many Nodes above replicas a paused rolling update
// keeps: the Nodes of the current template its surge made, while outdated
// ones remain. A paused rollout stops where it is, as a paused Deployment
// keeps at most replicas + maxSurge Pods over its ReplicaSets: neither the
// new Node (a canary being looked at) nor an outdated one goes.
func pausedSurge(set *nodesetv1alpha1.NodeSet, templateHash string, active []*corev1.Node, replicas int) int {
	if !set.Spec.Paused || !RollingUpdate(set) || replicas == 0 {
		return 0
	}
	current := 0
	for _, n := range active {
		if n.Labels[nodesetv1alpha1.LabelTemplateHash] == templateHash {
			current++
		}
	}
	if current == len(active) {
		return 0
	}
	surge, _ := Bounds(set, replicas)
	return min(surge, current)
}

// Bounds resolves maxSurge (rounded up) and maxUnavailable (rounded down)
// against replicas, with the defaults 1 and 0. When both come to zero (small
// percentages of few replicas) maxUnavailable is 1, as for Deployments, so
// that a rollout can always move.
func Bounds(set *nodesetv1alpha1.NodeSet, replicas int) (surge, unavailable int) {
	surgeValue, unavailableValue := intstr.FromInt32(1), intstr.FromInt32(0)
	if ru := set.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			surgeValue = *ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			unavailableValue = *ru.MaxUnavailable
		}
	}
	surge, err := intstr.GetScaledValueFromIntOrPercent(&surgeValue, replicas, true)
	if err != nil {
		surge = 1
	}
	unavailable, err = intstr.GetScaledValueFromIntOrPercent(&unavailableValue, replicas, false)
	if err != nil {
		unavailable = 0
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return surge, min(unavailable, replicas)
}

// GroupSize is the size the cloud group of a group-driver NodeSet should
// have: spec.replicas, plus maxSurge while a rolling update replaces
// outdated Nodes (never more than there are outdated Nodes left), and for a
// RollingUpdate set never so much that the set's Nodes, terminating ones
// included, would be more than replicas + maxSurge. The node controller
// raises the group to it; the rollout then removes outdated Nodes as the
// new ones become available, each removal lowering the group by one.
func GroupSize(set *nodesetv1alpha1.NodeSet, templateHash string, nodes []*corev1.Node) int32 {
	replicas := int(Replicas(set))
	// A Node marked for replacement keeps its machine until the
	// replacement is Ready: the group holds both. It is going, as Decide
	// sees it: an outdated one is not rolled as well, or a second machine
	// would come up for it, only to be removed as a surplus.
	staying := Staying(nodes)
	active := len(Active(nodes))
	replacing := active - len(staying)
	size := int64(replicas) + int64(replacing)
	if !RollingUpdate(set) {
		return clampInt32(size)
	}
	surge, _ := Bounds(set, replicas)
	if Rolling(set, templateHash, staying) {
		outdated := 0
		for _, n := range staying {
			if n.Labels[nodesetv1alpha1.LabelTemplateHash] != templateHash {
				outdated++
			}
		}
		size += int64(min(surge, outdated))
	}
	// Terminating Nodes count against the surge, as in Decide: a machine
	// terminated with its decrement leaves its Node behind until the Node
	// is released, and a raise in that moment would put a new Node beside
	// it. The raise waits for the Node to go. A size below the group's
	// changes nothing (only terminations lower a group), so a terminating
	// Node whose machine still counts in the group keeps its place.
	room := max(0, int64(replicas)+int64(replacing)+int64(surge)-int64(len(nodes)))
	return clampInt32(min(size, int64(active)+room))
}

// clampInt32 is n, or the most an int32 holds when n is more: a set of
// 2147483647 replicas with a Node being replaced asks for one more, and a
// size that wrapped around would be negative.
func clampInt32(n int64) int32 {
	return int32(min(n, math.MaxInt32))
}
