package resolve

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestNodeAnnotationsLeaveRoom: the class's and the set's template
// annotations land together on every Node, whose annotations are at most
// 256 KiB; they may fill it only up to NodeAnnotationBudget, or nodeset's
// own writes on the Node (its providerID with when the machine was made,
// the drain) are refused and the Node never registers nor leaves. Each
// part within the schema's bound is no proof the whole fits.
func TestNodeAnnotationsLeaveRoom(t *testing.T) {
	filler := func(size int) map[string]string {
		return map[string]string{"example.com/filler": strings.Repeat("x", size-len("example.com/filler"))}
	}
	class := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "general"},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			NodeTemplate: nodesetv1alpha1.NodeTemplate{Annotations: map[string]string{"example.com/pool": "general"}}}}
	set := func(annotations map[string]string) *nodesetv1alpha1.NodeSet {
		return &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "general", Template: nodesetv1alpha1.NodeTemplate{Annotations: annotations}}}
	}
	classPart := len("example.com/pool") + len("general")
	tests := []struct {
		name string
		set  *nodesetv1alpha1.NodeSet
		want []string // substrings of the one problem expected, none for none
	}{
		{"a few annotations", set(map[string]string{"example.com/owner": "team-a"}), nil},
		{"up to the budget with the class's", set(filler(NodeAnnotationBudget - classPart)), nil},
		{"one byte past the budget with the class's", set(filler(NodeAnnotationBudget - classPart + 1)),
			[]string{"spec.template.annotations", "NodeClass general", "262144", "32768"}},
		{"at the schema's bound", set(filler(262144)), []string{"spec.template.annotations"}},
		{"filling the Node but for a byte", set(filler(262144 - classPart - len("nodeset.dev/driver") - len("simulated") - 1)),
			[]string{"spec.template.annotations"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems := NodeAnnotationErrors(class, tt.set)
			_, err := ProvisioningSpec(nil, class, tt.set)
			if tt.want == nil {
				assert.Empty(t, problems)
				assert.NoError(t, err)
				return
			}
			if assert.Len(t, problems, 1) {
				for _, want := range tt.want {
					assert.Contains(t, problems[0], want)
				}
			}
			assert.Error(t, err, "no machine is made for such a set")
		})
	}
}
