package eksasg

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestCapacityEphemeralStorageForScaleFromZero: the template node has the
// ephemeral storage a real node's kubelet reports, so that a pod that
// requests ephemeral-storage scales a NodeSet up from zero: the root
// volume's size (the class's block device for the image's root device,
// else the image's own), and as allocatable what the EKS AMI's kubelet
// leaves of it (1Gi reserved, nodefs.available<10% evicted).
func TestCapacityEphemeralStorageForScaleFromZero(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	images, err := w.ec2.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{w.image}})
	require.NoError(t, err)
	require.Len(t, images.Images, 1)
	rootDevice := aws.ToString(images.Images[0].RootDeviceName)
	var imageGiB int64
	for _, m := range images.Images[0].BlockDeviceMappings {
		if aws.ToString(m.DeviceName) == rootDevice && m.Ebs != nil {
			imageGiB = int64(aws.ToInt32(m.Ebs.VolumeSize))
		}
	}
	require.NotZero(t, imageGiB, "moto's image maps its root device")
	for _, tc := range []struct {
		name    string
		devices []nodesetv1alpha1.BlockDevice
		gib     int64
	}{
		{"the image's root volume", nil, imageGiB},
		{"the class's root volume", []nodesetv1alpha1.BlockDevice{{DeviceName: rootDevice, VolumeSize: aws.Int32(100)}}, 100},
		{"a data volume is not the root", []nodesetv1alpha1.BlockDevice{{DeviceName: "/dev/xvdz", VolumeSize: aws.Int32(500)}}, imageGiB},
		{"a root volume of the image's size", []nodesetv1alpha1.BlockDevice{{DeviceName: rootDevice, VolumeType: "gp3"}}, imageGiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := w.class()
			section := *class.Spec.EKSAutoscalingGroup
			section.BlockDevices = tc.devices
			class.Spec.EKSAutoscalingGroup = &section
			capacity, err := d.Capacity(ctx, class)
			require.NoError(t, err)
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
