package plan

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// usageByWalking is the count of CountUsage's doc comment, one walk per
// question: what a class count made once must answer for every namespace
// and every NodeSet left out.
func usageByWalking(classNodes []*corev1.Node, pending Pending, namespace, except string) Usage {
	var used Usage
	for _, n := range classNodes {
		ns, name, ok := nodeutil.NodeSetOf(n.Labels)
		if ok && ns+"/"+name == except {
			continue
		}
		used.Class++
		if ok && ns == namespace {
			used.Namespace++
		}
	}
	for key, count := range pending {
		if key == except || count <= 0 {
			continue
		}
		used.Class += count
		if ns, _, _ := strings.Cut(key, "/"); ns == namespace {
			used.Namespace += count
		}
	}
	return used
}

func TestAClassCountedOnceAnswersEveryNamespaceAndEveryLeftOutSet(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	namespaces := []string{"a", "b", "c"}
	sets := []string{"a/web", "a/db", "b/web", "c/x", "c/web"}
	for round := range 200 {
		var nodes []*corev1.Node
		for i := range r.IntN(40) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i), Labels: map[string]string{}}}
			if r.IntN(5) > 0 { // else a static Node of the class
				ns, name, _ := strings.Cut(sets[r.IntN(len(sets))], "/")
				n.Labels[nodesetv1alpha1.LabelNodeSetNamespace], n.Labels[nodesetv1alpha1.LabelNodeSet] = ns, name
			}
			nodes = append(nodes, n)
		}
		pending := Pending{}
		for _, key := range sets {
			if r.IntN(2) == 0 {
				pending[key] = int64(r.IntN(7) - 2) // none, or a count that is no machine
			}
		}
		count := CountClass(nodes, pending)
		for _, ns := range append(namespaces, "d") {
			for _, except := range append(sets, "", "d/gone") {
				want := usageByWalking(nodes, pending, ns, except)
				require.Equal(t, want, count.Usage(ns, except), "round %d, seen from %s without %q", round, ns, except)
				require.Equal(t, want, CountUsage(nodes, pending, ns, except))
			}
		}
		for _, key := range sets {
			all, without := usageByWalking(nodes, pending, "", ""), usageByWalking(nodes, pending, "", key)
			require.Equal(t, all.Class-without.Class, count.Machines(key), "round %d: the machines of %s", round, key)
		}
	}
}
