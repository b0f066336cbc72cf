package resolve

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestHostileDottedKeyCannotReplaceAClassKey: a class of an out-of-tree
// driver sets the tag "example" and lets tenants set one more tag,
// "example.com/owner". Free-form parameters can nest, so a tenant writes
// the listed key as a path of objects ({"example": {"com/owner": ...}}):
// the same dotted path, which must not replace the class's own "example".
func TestHostileDottedKeyCannotReplaceAClassKey(t *testing.T) {
	class := &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "cloud"},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver:          "example.com/cloud",
			Parameters:      &runtime.RawExtension{Raw: []byte(`{"tags":{"example":"admin","team":"platform"}}`)},
			TenantOverrides: []string{"tags.example.com/owner"},
		},
	}
	set := func(params string) *nodesetv1alpha1.NodeSet {
		return &nodesetv1alpha1.NodeSet{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
			Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "cloud", Parameters: &runtime.RawExtension{Raw: []byte(params)}},
		}
	}
	tags := func(spec nodesetv1alpha1.NodeClassSpec) map[string]any {
		var params struct {
			Tags map[string]any `json:"tags"`
		}
		require.NoError(t, json.Unmarshal(spec.Parameters.Raw, &params))
		return params.Tags
	}

	spec, err := EffectiveSpec(class, set(`{"tags":{"example.com/owner":"team-a"}}`))
	require.NoError(t, err, "the listed key, as the class wrote it")
	assert.Equal(t, map[string]any{"example": "admin", "team": "platform", "example.com/owner": "team-a"}, tags(spec))

	spec, err = EffectiveSpec(class, set(`{"tags":{"example":{"com/owner":"team-a"}}}`))
	var restricted *RestrictedFieldError
	if assert.True(t, errors.As(err, &restricted), "the class's tag example replaced by an object: %v", tags(spec)) {
		assert.Equal(t, []string{"spec.parameters.tags.example"}, restricted.Fields)
	}
}
