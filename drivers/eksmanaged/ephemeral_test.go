package eksmanaged

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestCapacityEphemeralStorageForScaleFromZero: the template node of a
// managed node group has the ephemeral storage its kubelet reports, so
// that a pod that requests ephemeral-storage scales a NodeSet up from
// zero: the root volume (diskSize, EKS's 20 GiB without it, or the launch
// template's volume for the EKS AMI's root device), and as allocatable what
// the EKS AMI's kubelet leaves of it (1Gi reserved, nodefs.available<10%
// evicted). Where nodeset cannot know it (an AMI type that keeps pods'
// files elsewhere or reserves otherwise, a launch template with an AMI of
// its own or without the root volume), it is left out.
func TestCapacityEphemeralStorageForScaleFromZero(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver()
	template := func(name string, data *ec2types.RequestLaunchTemplateData) string {
		out, err := w.api.EC2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String(name), LaunchTemplateData: data})
		require.NoError(t, err)
		return aws.ToString(out.LaunchTemplate.LaunchTemplateId)
	}
	rootVolume := func(gib int32) []ec2types.LaunchTemplateBlockDeviceMappingRequest {
		return []ec2types.LaunchTemplateBlockDeviceMappingRequest{{DeviceName: aws.String("/dev/xvda"),
			Ebs: &ec2types.LaunchTemplateEbsBlockDeviceRequest{VolumeSize: aws.Int32(gib), VolumeType: ec2types.VolumeTypeGp3}}}
	}
	withRoot := template("with-root", &ec2types.RequestLaunchTemplateData{BlockDeviceMappings: rootVolume(80)})
	template("own-image", &ec2types.RequestLaunchTemplateData{ImageId: aws.String("ami-12c6146b"), BlockDeviceMappings: rootVolume(80)})
	template("no-volume", &ec2types.RequestLaunchTemplateData{KeyName: aws.String("ops")})
	for _, tc := range []struct {
		name     string
		amiType  string
		diskSize *int32
		template *nodesetv1alpha1.LaunchTemplateReference
		gib      int64 // 0: left out
	}{
		{"diskSize", "", aws.Int32(100), nil, 100},
		{"EKS's default disk size", "AL2023_x86_64_STANDARD", nil, nil, 20},
		{"Amazon Linux 2", "AL2_ARM_64", aws.Int32(50), nil, 50},
		{"the launch template's root volume, by id", "", nil, &nodesetv1alpha1.LaunchTemplateReference{ID: withRoot}, 80},
		{"the launch template's root volume, by name and version", "", nil, &nodesetv1alpha1.LaunchTemplateReference{Name: "with-root", Version: "1"}, 80},
		{"Bottlerocket keeps pods' files on its data volume", "BOTTLEROCKET_x86_64", aws.Int32(100), nil, 0},
		{"Windows", "WINDOWS_CORE_2022_x86_64", aws.Int32(100), nil, 0},
		{"a launch template's own AMI", "CUSTOM", nil, &nodesetv1alpha1.LaunchTemplateReference{Name: "own-image"}, 0},
		{"a launch template without the root volume", "", nil, &nodesetv1alpha1.LaunchTemplateReference{Name: "no-volume"}, 0},
		{"a launch template that is gone: EKS says so", "", nil, &nodesetv1alpha1.LaunchTemplateReference{Name: "gone"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := w.class()
			section := *class.Spec.EKSManagedNodeGroup
			section.AMIType, section.DiskSize, section.LaunchTemplate = tc.amiType, tc.diskSize, tc.template
			class.Spec.EKSManagedNodeGroup = &section
			capacity, err := d.Capacity(ctx, class)
			require.NoError(t, err)
			if tc.gib == 0 {
				assert.NotContains(t, capacity.Resources, corev1.ResourceEphemeralStorage)
				assert.NotContains(t, capacity.Allocatable, corev1.ResourceEphemeralStorage)
				return
			}
			size := tc.gib << 30
			storage := capacity.Resources[corev1.ResourceEphemeralStorage]
			assert.Equal(t, size, storage.Value(), "capacity")
			// The kubelet's arithmetic: 10 % as a float32.
			want := size - 1<<30 - int64(float64(size)*float64(float32(0.1)))
			allocatable := capacity.Allocatable[corev1.ResourceEphemeralStorage]
			assert.Equal(t, want, allocatable.Value(), "allocatable")
		})
	}
}
