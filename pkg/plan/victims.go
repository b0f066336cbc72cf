package plan

import (
	"math/rand/v2"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// Victims picks count Nodes to remove: those marked with the delete-node
// annotation first, then those not Ready with no machine yet (no
// providerID: cluster-autoscaler's unregistered instances, which its
// DecreaseTargetSize counts on going first), then the others not Ready
// (booting or unhealthy), then outdated ones (another template hash), then
// the rest. Within each of
// these, a Node Ready for less than minReady at now (not available yet)
// goes before an available one, as a ReplicaSet removes the pods Ready for
// the shortest time first; the delete policy orders what is left.
func Victims(nodes []*corev1.Node, count int, policy nodesetv1alpha1.DeletePolicy, templateHash string, minReady time.Duration, now time.Time) []*corev1.Node {
	if count <= 0 {
		return nil
	}
	ranked := append([]*corev1.Node(nil), nodes...)
	tiebreak := map[types.UID]uint64{}
	if policy == nodesetv1alpha1.DeletePolicyRandom {
		for _, n := range ranked {
			tiebreak[n.UID] = rand.Uint64()
		}
	}
	rank := func(n *corev1.Node) int {
		switch {
		case n.Annotations[nodesetv1alpha1.AnnotationDeleteNode] != "":
			return 0
		case !nodeutil.IsReady(n) && n.Spec.ProviderID == "":
			return 1
		case !nodeutil.IsReady(n):
			return 2
		case n.Labels[nodesetv1alpha1.LabelTemplateHash] != templateHash:
			return 3
		}
		return 4
	}
	sort.SliceStable(ranked, func(i, j int) bool {
		a, b := ranked[i], ranked[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if aa, ab := Available(a, minReady, now), Available(b, minReady, now); aa != ab {
			return ab
		}
		ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
		switch policy {
		case nodesetv1alpha1.DeletePolicyOldest:
			if !ta.Equal(tb) {
				return ta.Before(tb)
			}
		case nodesetv1alpha1.DeletePolicyRandom:
			return tiebreak[a.UID] < tiebreak[b.UID]
		default: // Newest
			if !ta.Equal(tb) {
				return ta.After(tb)
			}
		}
		return a.Name > b.Name
	})
	return ranked[:min(count, len(ranked))]
}
