package autoscaler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestScalePatchCarriesOnlyTheChange: the write of a scale carries the
// replicas and the delete list when they changed, nothing else of the set
// (the rest is its owner's, a GitOps tool's manifest for instance), and
// always the resourceVersion read, so that it fails as an update would
// when the set changed since.
func TestScalePatchCarriesOnlyTheChange(t *testing.T) {
	listed := func(names string) func(*nodesetv1alpha1.NodeSet) {
		return func(set *nodesetv1alpha1.NodeSet) {
			if set.Annotations == nil {
				set.Annotations = map[string]string{}
			}
			set.Annotations[nodesetv1alpha1.AnnotationDeleteNodes] = names
		}
	}
	tests := []struct {
		name   string
		before func(*nodesetv1alpha1.NodeSet)
		mutate func(*nodesetv1alpha1.NodeSet)
		want   string // "" for no write
	}{
		{name: "nothing changed", mutate: func(*nodesetv1alpha1.NodeSet) {}},
		{name: "replicas", mutate: func(set *nodesetv1alpha1.NodeSet) { set.Spec.Replicas = ptr.To[int32](5) },
			want: `{"metadata":{"resourceVersion":"1"},"spec":{"replicas":5}}`},
		{name: "replicas and victims", mutate: func(set *nodesetv1alpha1.NodeSet) {
			listed("web-a,web-b")(set)
			set.Spec.Replicas = ptr.To[int32](1)
		}, want: `{"metadata":{"resourceVersion":"1","annotations":{"nodeset.dev/delete-nodes":"web-a,web-b"}},"spec":{"replicas":1}}`},
		{name: "a victim added to the list", before: listed("web-a"), mutate: func(set *nodesetv1alpha1.NodeSet) {
			listed("web-a,web-b")(set)
			set.Spec.Replicas = ptr.To[int32](1)
		}, want: `{"metadata":{"resourceVersion":"1","annotations":{"nodeset.dev/delete-nodes":"web-a,web-b"}},"spec":{"replicas":1}}`},
		{name: "the list removed", before: listed("web-a"), mutate: func(set *nodesetv1alpha1.NodeSet) {
			delete(set.Annotations, nodesetv1alpha1.AnnotationDeleteNodes)
		}, want: `{"metadata":{"resourceVersion":"1","annotations":{"nodeset.dev/delete-nodes":null}}}`},
		{name: "other changes are not written", mutate: func(set *nodesetv1alpha1.NodeSet) {
			set.Spec.Template.Labels["tier"] = "other"
			set.Labels = map[string]string{"x": "y"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testSet(2)
			before.Annotations = map[string]string{"example.com/owner": "gitops"}
			if tt.before != nil {
				tt.before(before)
			}
			set := before.DeepCopy()
			tt.mutate(set)
			patch, changed := scalePatch(before, set)
			if tt.want == "" {
				assert.False(t, changed, "written: %s", patch)
				return
			}
			require.True(t, changed)
			assert.JSONEq(t, tt.want, string(patch))
		})
	}
}
