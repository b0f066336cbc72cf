package eksasg

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestWhatAWSRefusesLaterIsTheClassesVerdict: tags AWS refuses (a key of
// its reserved aws: prefix, in any case; a key or value longer than AWS
// allows) and a root volume smaller than the image's snapshot make every
// group creation or every launch fail, NodeSet by NodeSet. Each is the
// class's verdict instead, naming the field, before any NodeSet uses it.
func TestWhatAWSRefusesLaterIsTheClassesVerdict(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	require.NoError(t, d.Validate(ctx, w.class()))
	require.NoError(t, d.ValidateCloud(ctx, w.class()))
	for _, tt := range []struct {
		name   string
		mutate func(*nodesetv1alpha1.EKSAutoscalingGroup)
		want   string
	}{
		{"a reserved tag key", func(s *nodesetv1alpha1.EKSAutoscalingGroup) {
			s.Tags = map[string]string{"team": "a", "aws:cost-center": "1"}
		},
			`spec.eksAutoscalingGroup.tags[aws:cost-center]: the aws: prefix is reserved for AWS`},
		{"a reserved tag key in capitals", func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.Tags = map[string]string{"AWS:team": "a"} },
			`spec.eksAutoscalingGroup.tags[AWS:team]: the aws: prefix is reserved for AWS`},
		{"a tag key of the driver's own", func(s *nodesetv1alpha1.EKSAutoscalingGroup) {
			s.Tags = map[string]string{"nodeset.dev/former-regions": "us-west-2"}
		},
			`spec.eksAutoscalingGroup.tags[nodeset.dev/former-regions]: keys under nodeset.dev/ are the driver's own`},
		{"a tag key too long", func(s *nodesetv1alpha1.EKSAutoscalingGroup) {
			s.Tags = map[string]string{strings.Repeat("k", 129): "a"}
		},
			`spec.eksAutoscalingGroup.tags[` + strings.Repeat("k", 129) + `]: a tag key has at most 128 characters`},
		{"a tag value too long", func(s *nodesetv1alpha1.EKSAutoscalingGroup) {
			s.Tags = map[string]string{"team": strings.Repeat("v", 257)}
		},
			`spec.eksAutoscalingGroup.tags[team]: a tag value has at most 256 characters`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			class := w.class()
			section := *class.Spec.EKSAutoscalingGroup
			class.Spec.EKSAutoscalingGroup = &section
			tt.mutate(&section)
			err := d.Validate(ctx, class)
			require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
			assert.ErrorContains(t, err, tt.want)
		})
	}

	t.Run("a root volume smaller than the image's snapshot", func(t *testing.T) {
		image, err := w.ec2ImageRoot(ctx)
		require.NoError(t, err)
		class := w.class()
		section := *class.Spec.EKSAutoscalingGroup
		class.Spec.EKSAutoscalingGroup = &section
		section.BlockDevices = []nodesetv1alpha1.BlockDevice{{DeviceName: "/dev/xvdb", VolumeSize: ptr.To[int32](1)},
			{DeviceName: image.device, VolumeSize: ptr.To(image.size - 1), VolumeType: "gp3"}}
		require.NoError(t, d.Validate(ctx, class))
		err = d.ValidateCloud(ctx, class)
		require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
		assert.ErrorContains(t, err, "spec.eksAutoscalingGroup.blockDevices[1].volumeSize")
		assert.ErrorContains(t, err, "smaller than")

		section.BlockDevices[1].VolumeSize = ptr.To(image.size)
		require.NoError(t, d.ValidateCloud(ctx, class), "as large as the snapshot is enough")
		section.BlockDevices[1].VolumeSize = nil
		require.NoError(t, d.ValidateCloud(ctx, class), "no size is the snapshot's size")
	})
}

// TestInstanceTypesOfAnotherArchitectureThanTheImageAreRefused: one image
// runs on one architecture. An instance type of the other (a Graviton
// m6g.large beside an x86_64 AMI, in instanceType or among a
// mixed-instances policy's types, where spot allocation may pick it any
// time) makes each of its launches fail ("The architecture 'arm64' of the
// specified instance type does not match the architecture 'x86_64' of the
// specified AMI"), as a volume smaller than the snapshot does. It is the
// class's verdict, naming the type, before any NodeSet uses it.
func TestInstanceTypesOfAnotherArchitectureThanTheImageAreRefused(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	out, err := w.ec2.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{w.image}})
	require.NoError(t, err)
	require.Len(t, out.Images, 1)
	require.Equal(t, ec2types.ArchitectureValuesX8664, out.Images[0].Architecture, "the test's image")

	class := w.class()
	section := *class.Spec.EKSAutoscalingGroup
	class.Spec.EKSAutoscalingGroup = &section
	section.InstanceType = "m6g.large"
	err = d.ValidateCloud(ctx, class)
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.ErrorContains(t, err, `spec.eksAutoscalingGroup.instanceType: "m6g.large" runs arm64, and image `+w.image+" is x86_64")

	section.InstanceType = ""
	section.MixedInstances = &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m6i.large", "m6g.large", "m5.large"}}
	err = d.ValidateCloud(ctx, class)
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.ErrorContains(t, err, `spec.eksAutoscalingGroup.mixedInstances.instanceTypes: "m6g.large" runs arm64, and image `+w.image+" is x86_64")

	section.MixedInstances = &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m6i.large", "m5.large", "t2.large"}}
	require.NoError(t, d.ValidateCloud(ctx, class), "x86_64 types for an x86_64 image (t2's list i386 too)")
}
