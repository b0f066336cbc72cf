package kubectlplugin

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAllowedIsTheControllersVerdict: the classes listing's ALLOWED column
// says what the controller decides for a new NodeSet of the namespace.
func TestAllowedIsTheControllersVerdict(t *testing.T) {
	forbidden := errors.New(`namespaces "team-a" is forbidden`)
	list := &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{"team-a"}}
	selector := &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromSelector,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}
	invalid := &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromSelector,
		Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}}}
	gold := labels.Set{"tier": "gold"}
	tests := []struct {
		name      string
		allowed   *nodesetv1alpha1.AllowedNamespaces
		deleting  bool
		namespace string
		labels    labels.Set
		nsErr     error
		want      string
	}{
		{name: "no rule", namespace: "team-a", want: "yes"},
		{name: "All", allowed: &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromAll}, namespace: "team-b", want: "yes"},
		{name: "in the list", allowed: list, namespace: "team-a", want: "yes"},
		{name: "not in the list", allowed: list, namespace: "team-b", want: "no"},
		{name: "labels match", allowed: selector, namespace: "team-a", labels: gold, want: "yes"},
		{name: "labels do not match", allowed: selector, namespace: "team-a", labels: labels.Set{"tier": "lead"}, want: "no"},
		{name: "labels unreadable", allowed: selector, namespace: "team-a", nsErr: forbidden, want: "if labels match tier=gold"},
		{name: "invalid selector", allowed: invalid, namespace: "team-a", labels: gold, want: "no (invalid selector)"},
		{name: "unknown from", allowed: &nodesetv1alpha1.AllowedNamespaces{From: "Some"}, namespace: "team-a", want: "no"},
		{name: "being deleted", deleting: true, namespace: "team-a", want: "no (being deleted)"},
		{name: "being deleted, labels unreadable", allowed: selector, deleting: true, namespace: "team-a", nsErr: forbidden, want: "no (being deleted)"},
		{name: "being deleted, not in the list", allowed: list, deleting: true, namespace: "team-b", want: "no"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
			class.Spec.AllowedNamespaces = tt.allowed
			if tt.deleting {
				now := metav1.Now()
				class.DeletionTimestamp = &now
			}
			assert.Equal(t, tt.want, allowed(class, tt.namespace, tt.labels, tt.nsErr))
		})
	}
}
