package resolve

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

func TestCatalogueConflicts(t *testing.T) {
	class := func(name string, template map[string]string, section map[string]string) *nodesetv1alpha1.NodeClass {
		c := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
		c.Spec.NodeTemplate.Labels = template
		if section != nil {
			c.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{Labels: section}
		}
		return c
	}
	general := class("general", map[string]string{"example.com/pool": "general"}, nil)
	gpu := class("gpu", map[string]string{"example.com/pool": "gpu"}, map[string]string{"example.com/accelerator": "a100"})
	alsoGeneral := class("also-general", map[string]string{"example.com/pool": "general"}, nil)
	catalogue := []*nodesetv1alpha1.NodeClass{general, gpu, alsoGeneral}
	tests := []struct {
		name     string
		class    *nodesetv1alpha1.NodeClass
		template map[string]string
		section  map[string]string
		want     []string // substrings of the one problem expected, nil for none
	}{
		{name: "another class's pool", class: general, template: map[string]string{"example.com/pool": "gpu"},
			want: []string{`spec.template.labels["example.com/pool"] "gpu"`, "NodeClass gpu stamps it", "NodeClass general may not"}},
		{name: "another class's section label", class: general, template: map[string]string{"example.com/accelerator": "a100"},
			want: []string{`spec.template.labels["example.com/accelerator"]`, "NodeClass gpu"}},
		{name: "through the set's own section", class: general, section: map[string]string{"example.com/pool": "gpu"},
			want: []string{`spec.simulated.labels["example.com/pool"]`, "NodeClass gpu"}},
		{name: "the own class's value, which another class stamps too", class: general, template: map[string]string{"example.com/pool": "general"}},
		{name: "a value no class stamps", class: general, template: map[string]string{"example.com/pool": "batch", "example.com/accelerator": "none"}},
		{name: "a key no class stamps", class: gpu, template: map[string]string{"team": "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
			set.Spec.Template.Labels = tt.template
			if tt.section != nil {
				set.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{Labels: tt.section}
			}
			problems := CatalogueConflicts(catalogue, tt.class, set)
			if tt.want == nil {
				assert.Empty(t, problems)
				return
			}
			if assert.Len(t, problems, 1) {
				for _, want := range tt.want {
					assert.Contains(t, problems[0], want)
				}
			}
		})
	}
}

func TestReservedAnnotation(t *testing.T) {
	for key, reserved := range map[string]bool{
		"example.com/owner": false,
		"cluster-autoscaler.kubernetes.io/scale-down-disabled":   false,
		"csi.volume.kubernetes.io/nodeid":                        true,
		"node.alpha.kubernetes.io/ttl":                           true,
		"volumes.kubernetes.io/controller-managed-attach-detach": true,
		"kubeadm.alpha.kubernetes.io/cri-socket":                 true,
		"x.k8s.io/y":                                             true,
		"simulated.nodeset.dev/unreachable":                      true,
		"nodeset.dev/delete-node":                                true,
		"nodeset.dev/restartedAt":                                false, // kubectl nodeset rollout restart
		"notkubernetes.io/x":                                     false,
		"description":                                            false,
	} {
		assert.Equal(t, reserved, reservedAnnotation(key) != "", key)
	}
}
