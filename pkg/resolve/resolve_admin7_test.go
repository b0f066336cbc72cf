package resolve

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestSchemaDefaultsAreNotTheTenants: the API server writes the schema's
// default of bootstrap.format, metadataOptions.httpTokens and
// interruptions.rebalance into every NodeSet section that sets a field
// beside it, whatever the tenant wrote. Such a value is no override of
// the tenant's: where the class sets another value (an Amazon Linux 2
// class's BootstrapScript, an admin's httpTokens: optional), or leaves the
// object out, a NodeSet that uses an entry the class lists beside it is
// accepted, and the class's value stays. So a class edited from one
// bootstrap format to the other rolls its NodeSets instead of refusing
// those that pass kubelet flags.
func TestSchemaDefaultsAreNotTheTenants(t *testing.T) {
	asg := func(section nodesetv1alpha1.EKSAutoscalingGroup, overrides ...string) *nodesetv1alpha1.NodeClass {
		section.ClusterName, section.Region, section.InstanceType = "prod", "eu-west-1", "m6i.large"
		return &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Spec: nodesetv1alpha1.NodeClassSpec{
			Driver: nodesetv1alpha1.DriverEKSASG, TenantOverrides: overrides,
			DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &section}}}
	}
	set := func(section nodesetv1alpha1.EKSAutoscalingGroup) *nodesetv1alpha1.NodeSet {
		s := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
		s.Spec.EKSAutoscalingGroup = &section
		return s
	}
	// As the API server stores them: the defaults written in.
	kubeletFlags := set(nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
		Format: nodesetv1alpha1.BootstrapNodeConfig, KubeletExtraArgs: []string{"--max-pods=58"}}})
	hopLimit := set(nodesetv1alpha1.EKSAutoscalingGroup{MetadataOptions: &nodesetv1alpha1.InstanceMetadataOptions{
		HTTPTokens: "required", HTTPPutResponseHopLimit: ptr.To[int32](2)}})
	queue := set(nodesetv1alpha1.EKSAutoscalingGroup{Interruptions: &nodesetv1alpha1.EKSInterruptions{
		QueueURL: "https://sqs.eu-west-1.amazonaws.com/111122223333/team-a", Rebalance: nodesetv1alpha1.RebalanceTaint}})

	t.Run("bootstrap.format of the class", func(t *testing.T) {
		class := asg(nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{Format: nodesetv1alpha1.BootstrapScript}},
			"bootstrap.kubeletExtraArgs")
		spec, err := EffectiveSpec(class, kubeletFlags)
		require.NoError(t, err)
		assert.Equal(t, nodesetv1alpha1.BootstrapScript, spec.EKSAutoscalingGroup.Bootstrap.Format, "the class's format")
		assert.Equal(t, []string{"--max-pods=58"}, spec.EKSAutoscalingGroup.Bootstrap.KubeletExtraArgs, "the tenant's flags")

		before := asg(nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{Format: nodesetv1alpha1.BootstrapNodeConfig}},
			"bootstrap.kubeletExtraArgs")
		was, err := EffectiveSpec(before, kubeletFlags)
		require.NoError(t, err)
		assert.NotEqual(t, TemplateHash(&was, kubeletFlags), TemplateHash(&spec, kubeletFlags), "the class's edit rolls the set")
	})
	t.Run("metadataOptions.httpTokens of the class", func(t *testing.T) {
		class := asg(nodesetv1alpha1.EKSAutoscalingGroup{MetadataOptions: &nodesetv1alpha1.InstanceMetadataOptions{HTTPTokens: "optional"}},
			"metadataOptions.httpPutResponseHopLimit")
		spec, err := EffectiveSpec(class, hopLimit)
		require.NoError(t, err)
		assert.Equal(t, "optional", spec.EKSAutoscalingGroup.MetadataOptions.HTTPTokens)
		assert.Equal(t, ptr.To[int32](2), spec.EKSAutoscalingGroup.MetadataOptions.HTTPPutResponseHopLimit)
	})
	t.Run("interruptions the class leaves out", func(t *testing.T) {
		class := asg(nodesetv1alpha1.EKSAutoscalingGroup{}, "interruptions.queueURL")
		spec, err := EffectiveSpec(class, queue)
		require.NoError(t, err)
		assert.Equal(t, queue.Spec.EKSAutoscalingGroup.Interruptions.QueueURL, spec.EKSAutoscalingGroup.Interruptions.QueueURL)
	})
	t.Run("a default the tenant changes is still refused", func(t *testing.T) {
		class := asg(nodesetv1alpha1.EKSAutoscalingGroup{}, "interruptions.queueURL")
		replaceFirst := queue.DeepCopy()
		replaceFirst.Spec.EKSAutoscalingGroup.Interruptions.Rebalance = nodesetv1alpha1.RebalanceReplaceFirst
		_, err := EffectiveSpec(class, replaceFirst)
		var restricted *RestrictedFieldError
		require.ErrorAs(t, err, &restricted)
		assert.Equal(t, []string{"spec.eksAutoscalingGroup.interruptions.rebalance"}, restricted.Fields)
	})
}
