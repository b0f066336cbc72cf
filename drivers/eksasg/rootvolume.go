package eksasg

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// imageRoot is an image's root device and the size of the volume it makes
// there unless a launch names another (0 when the image does not say).
type imageRoot struct {
	device string
	gib    int32
}

// imageRoots caches images' roots by region and image id: an AMI's block
// device mappings never change.
var imageRoots sync.Map

// rememberImage keeps the root of an image described in region, so that
// rootVolume needs no call for it.
func rememberImage(region string, image ec2types.Image) imageRoot {
	root := imageRoot{device: aws.ToString(image.RootDeviceName)}
	for _, m := range image.BlockDeviceMappings {
		if aws.ToString(m.DeviceName) == root.device && m.Ebs != nil {
			root.gib = aws.ToInt32(m.Ebs.VolumeSize)
		}
	}
	imageRoots.Store(region+"/"+aws.ToString(image.ImageId), root)
	return root
}

// rootVolume is the size in GiB of the root volume of the class's
// instances: its block device for the image's root device, else the
// image's own; 0 when neither says. The image is described once per
// process (ValidateCloud describes it first); one that does not exist is
// an invalid configuration.
func rootVolume(ctx context.Context, ec2c awscloud.EC2, s *nodesetv1alpha1.EKSAutoscalingGroup) (int32, error) {
	cached, ok := imageRoots.Load(s.Region + "/" + s.ImageID)
	root, _ := cached.(imageRoot)
	if !ok {
		out, err := ec2c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{s.ImageID}})
		if err != nil {
			return 0, awscloud.Classify("spec.eksAutoscalingGroup.imageID "+s.ImageID, err)
		}
		if len(out.Images) == 0 {
			return 0, drivers.InvalidConfiguration("spec.eksAutoscalingGroup.imageID", "%s does not exist in %s", s.ImageID, s.Region)
		}
		root = rememberImage(s.Region, out.Images[0])
	}
	size := root.gib
	for _, b := range s.BlockDevices {
		if b.DeviceName == root.device && b.VolumeSize != nil {
			size = *b.VolumeSize
		}
	}
	return size, nil
}
