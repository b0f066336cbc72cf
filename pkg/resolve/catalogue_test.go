package resolve

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// readCatalogue decodes the NodeClasses and NodeSets of the catalogue that
// docs/tenancy.md explains.
func readCatalogue(t *testing.T) (map[string]*nodesetv1alpha1.NodeClass, map[string]*nodesetv1alpha1.NodeSet) {
	t.Helper()
	f, err := os.Open("../../deploy/examples/60-catalogue.yaml")
	require.NoError(t, err)
	defer f.Close()
	classes, sets := map[string]*nodesetv1alpha1.NodeClass{}, map[string]*nodesetv1alpha1.NodeSet{}
	decoder := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var raw json.RawMessage
		if err := decoder.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		var meta metav1.TypeMeta
		require.NoError(t, json.Unmarshal(raw, &meta))
		data := []byte(raw)
		switch meta.Kind {
		case "NodeClass":
			class := &nodesetv1alpha1.NodeClass{}
			require.NoError(t, json.Unmarshal(data, class))
			classes[class.Name] = class
		case "NodeSet":
			set := &nodesetv1alpha1.NodeSet{}
			require.NoError(t, json.Unmarshal(data, set))
			sets[set.Namespace+"/"+set.Name] = set
		}
	}
	return classes, sets
}

// TestCatalogueExample checks what docs/tenancy.md says of its catalogue:
// team-a's batch NodeSet gets its instance types and team tag while the AMI
// and the cost-center tag stay the class's, and anything else is refused
// with the allowed fields named.
func TestCatalogueExample(t *testing.T) {
	classes, sets := readCatalogue(t)
	require.Len(t, classes, 3)
	batch := sets["team-a/batch"]
	require.NotNil(t, batch)
	spot := classes["batch-spot"]

	effective, err := EffectiveSpec(spot, batch)
	require.NoError(t, err)
	asg := effective.EKSAutoscalingGroup
	assert.Equal(t, []string{"c6i.2xlarge", "c5.2xlarge"}, asg.MixedInstances.InstanceTypes, "lists replace")
	assert.Equal(t, "price-capacity-optimized", asg.MixedInstances.SpotAllocationStrategy, "the rest of the object stays the class's")
	assert.Equal(t, map[string]string{"cost-center": "platform", "team": "team-a"}, asg.Tags, "an overridable map key is the tenant's")
	assert.Equal(t, "ami-0123456789abcdef0", asg.ImageID)

	sneaky := batch.DeepCopy()
	sneaky.Spec.EKSAutoscalingGroup.ImageID = "ami-0fffffffffffffff0"
	sneaky.Spec.EKSAutoscalingGroup.Tags["cost-center"] = "team-a"
	_, err = EffectiveSpec(spot, sneaky)
	var restricted *RestrictedFieldError
	require.ErrorAs(t, err, &restricted)
	assert.ElementsMatch(t, []string{"spec.eksAutoscalingGroup.imageID", "spec.eksAutoscalingGroup.tags.cost-center"}, restricted.Fields)
	assert.Contains(t, err.Error(), "the fields tenants may override are: mixedInstances.instanceTypes, tags.team")

	// The platform team's new AMI reaches the NodeSet's template hash.
	before := TemplateHash(&effective, batch)
	newAMI := spot.DeepCopy()
	newAMI.Spec.EKSAutoscalingGroup.ImageID = "ami-0aaaaaaaaaaaaaaa0"
	after, err := EffectiveSpec(newAMI, batch)
	require.NoError(t, err)
	assert.NotEqual(t, before, TemplateHash(&after, batch))

	// The dedicated class's nodes carry the tenant.
	training := sets["ml-research/training"]
	gpu, err := EffectiveSpec(classes["gpu-dedicated"], training)
	require.NoError(t, err)
	assert.Equal(t, "ml-research", NodeLabels(&gpu, "gpu-dedicated", training, "h")[nodesetv1alpha1.LabelTenant])
	assert.Contains(t, NodeTaints(&gpu, training), corev1.Taint{Key: nodesetv1alpha1.LabelTenant, Value: "ml-research", Effect: corev1.TaintEffectNoSchedule})
}
