package plan

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// TestRolloutBoundsHoldInEverySequence drives a rolling-update NodeSet
// through random sequences of edits (scale, pause and resume, template
// changes) and of what happens to its Nodes (becoming Ready or NotReady,
// deleted by someone else, drains finishing), with a sync after each.
// Every sync: a creation never takes the set above replicas + maxSurge
// Nodes (terminating ones count), and a removal of an available Node never
// takes the available Nodes below replicas - maxUnavailable (nor lower
// than they already were). Once the edits stop and the set is resumed it
// reaches replicas Nodes of the current template; when the new Nodes never
// come up, it still ends within replicas + maxSurge Nodes.
func TestRolloutBoundsHoldInEverySequence(t *testing.T) {
	surges := []intstr.IntOrString{intstr.FromInt32(0), intstr.FromInt32(1), intstr.FromInt32(2), intstr.FromString("25%"), intstr.FromString("100%")}
	unavailables := []intstr.IntOrString{intstr.FromInt32(0), intstr.FromInt32(1), intstr.FromString("50%")}
	for seed := uint64(1); seed <= 400; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		surge, unavailable := surges[rng.IntN(len(surges))], unavailables[rng.IntN(len(unavailables))]
		set := rollingSet(int32(rng.IntN(6)), surge, unavailable)
		set.Spec.DeletePolicy = []nodesetv1alpha1.DeletePolicy{nodesetv1alpha1.DeletePolicyNewest, nodesetv1alpha1.DeletePolicyOldest, nodesetv1alpha1.DeletePolicyRandom}[rng.IntN(3)]
		minReady := time.Duration(0)
		if rng.IntN(3) == 0 {
			set.Spec.MinReadySeconds = 60
			minReady = time.Minute
		}
		f := &fleet{}
		version := 0
		hash := func() string { return fmt.Sprintf("h%d", version) }
		var history []string
		sync := func(badImage bool) {
			t.Helper()
			p := Decide(set, hash(), f.nodes, testNow)
			replicas := int(Replicas(set))
			maxSurge, maxUnavailable := Bounds(set, replicas)
			if p.Create > 0 && len(f.nodes)+p.Create > replicas+maxSurge {
				t.Fatalf("seed %d: %d Nodes and %d created, above replicas %d + maxSurge %d\n%v\n%s", seed, len(f.nodes), p.Create, replicas, maxSurge, history, f.describe())
			}
			// In a rolling update a Node is available once Ready for
			// minReadySeconds; outside one (a ReplicaSet's scale-down,
			// which ranks by readiness, not by how long) once Ready.
			available := func(n *corev1.Node) bool { return nodeutil.IsReady(n) }
			if Rolling(set, hash(), Staying(f.nodes)) {
				available = func(n *corev1.Node) bool { return Available(n, minReady, testNow) }
			}
			before := 0
			for _, n := range Active(f.nodes) {
				if available(n) {
					before++
				}
			}
			after := before
			for _, n := range p.Remove {
				if n.DeletionTimestamp == nil && available(n) {
					after--
				}
			}
			if after < before && after < replicas-maxUnavailable {
				t.Fatalf("seed %d: removals take available Nodes from %d to %d, below replicas %d - maxUnavailable %d\n%v\n%s", seed, before, after, replicas, maxUnavailable, history, f.describe())
			}
			for range p.Create {
				f.add(hash(), false)
				if badImage {
					f.nodes[len(f.nodes)-1].Labels["bad"] = "true"
				}
			}
			for _, n := range p.Remove {
				n.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
			}
		}
		for step := 0; step < 40; step++ {
			var what string
			switch rng.IntN(10) {
			case 0:
				set.Spec.Replicas = ptr.To(int32(rng.IntN(6)))
				what = fmt.Sprintf("scale %d", *set.Spec.Replicas)
			case 1:
				set.Spec.Paused = !set.Spec.Paused
				what = fmt.Sprintf("paused %v", set.Spec.Paused)
			case 2:
				version++
				what = "template " + hash()
			case 3, 4:
				if n := f.pick(rng); n != nil {
					setReady(n, true)
					what = "ready " + n.Name
				}
			case 5:
				if n := f.pick(rng); n != nil {
					setReady(n, false)
					what = "notready " + n.Name
				}
			case 6:
				if n := f.pick(rng); n != nil && n.DeletionTimestamp == nil {
					n.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
					what = "deleted " + n.Name
				}
			case 7:
				f.dropTerminating()
				what = "drains done"
			case 8:
				if n := f.pick(rng); n != nil {
					n.Annotations = map[string]string{nodesetv1alpha1.AnnotationReplace: testNow.Format(time.RFC3339)}
					what = "replace " + n.Name
				}
			case 9:
				if n := f.pick(rng); n != nil {
					setReady(n, true)
					n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(testNow)
					what = "ready just now " + n.Name
				}
			}
			history = append(history, what)
			sync(false)
		}

		// The edits stop; the rollout resumes. Either the Nodes come up,
		// or the new ones never do.
		set.Spec.Paused = false
		badImage := rng.IntN(2) == 0
		if badImage {
			version++
		}
		history = append(history, fmt.Sprintf("resume, bad image %v", badImage))
		for round := 0; round < 60; round++ {
			sync(badImage)
			f.dropTerminating()
			for _, n := range f.nodes {
				if n.Annotations[nodesetv1alpha1.AnnotationReplace] != "" {
					// The node controller deletes it once replaced.
					n.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
				}
				if n.Labels["bad"] == "" {
					setReady(n, true)
				}
			}
		}
		replicas := int(Replicas(set))
		maxSurge, _ := Bounds(set, replicas)
		total, _, current := f.counts(hash())
		if badImage && total > replicas+maxSurge {
			t.Fatalf("seed %d: %d Nodes with the new ones never Ready, above replicas %d + maxSurge %d\n%v\n%s", seed, total, replicas, maxSurge, history, f.describe())
		}
		if !badImage && (total != replicas || current != replicas) {
			t.Fatalf("seed %d: %d Nodes, %d of the current template, want %d\n%v\n%s", seed, total, current, replicas, history, f.describe())
		}
	}
}

// pick is one of the fleet's Nodes, nil when it has none.
func (f *fleet) pick(rng *rand.Rand) *corev1.Node {
	if len(f.nodes) == 0 {
		return nil
	}
	return f.nodes[rng.IntN(len(f.nodes))]
}

// describe is the fleet's Nodes, one a line.
func (f *fleet) describe() string {
	var s string
	for _, n := range f.nodes {
		s += fmt.Sprintf("%s %s ready=%v deleting=%v\n", n.Name, n.Labels[nodesetv1alpha1.LabelTemplateHash], nodeutil.IsReady(n), n.DeletionTimestamp != nil)
	}
	return s
}

func setReady(n *corev1.Node, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status,
		LastTransitionTime: metav1.NewTime(testNow.Add(-24 * time.Hour))}}
}
