package eksmanaged

import (
	"context"
	"errors"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// defaultDiskSize is the root volume (GiB) EKS gives a Linux node group
// without diskSize or launch template.
const defaultDiskSize = 20

// eksRootDevice is the root device of the EKS-optimized Amazon Linux AMIs.
const eksRootDevice = "/dev/xvda"

// rootVolume is the size in GiB of the root volume that holds the
// kubelet's files on a node of the node group, and whether nodeset knows
// it: only for EKS's Amazon Linux AMIs (amiType AL2_*, AL2023_*, or none),
// whose kubelet awscloud.WithEphemeralStorage describes, from diskSize
// (EKS's default without it) or from the launch template's volume for
// their root device. Bottlerocket keeps pods' files on a data volume,
// Windows and a launch template's own AMI (CUSTOM) reserve what their
// configuration says, and without a volume in the launch template the
// size is the AMI release's, which EKS picks: none is known. A launch
// template that cannot be read is left out too (logged), unless AWS did
// not answer.
func rootVolume(ctx context.Context, ec2c awscloud.EC2, credentials map[string][]byte, s *nodesetv1alpha1.EKSManagedNodeGroup) (int32, bool, error) {
	if s.AMIType != "" && !strings.HasPrefix(s.AMIType, "AL2_") && !strings.HasPrefix(s.AMIType, "AL2023_") {
		return 0, false, nil
	}
	lt := s.LaunchTemplate
	if lt == nil {
		if s.DiskSize != nil {
			return *s.DiskSize, true, nil
		}
		return defaultDiskSize, true, nil
	}
	version := lt.Version
	if version == "" {
		version = "$Default" // what EKS launches from
	}
	input := &ec2.DescribeLaunchTemplateVersionsInput{Versions: []string{version}}
	if lt.ID != "" {
		input.LaunchTemplateId = aws.String(lt.ID)
	} else {
		input.LaunchTemplateName = aws.String(lt.Name)
	}
	out, err := ec2c.DescribeLaunchTemplateVersions(ctx, input)
	if err != nil {
		missing := strings.HasPrefix(awsCode(err), "InvalidLaunchTemplate")
		if err = awscloud.Classify("describing launch template "+lt.ID+lt.Name, err); !missing && !errors.Is(err, drivers.ErrInvalidConfiguration) {
			return 0, false, err
		}
		// Missing, or not ours to read (ec2:DescribeLaunchTemplateVersions
		// not allowed): EKS says what is wrong with it, if anything.
		awscloud.Redact(credentials, &err)
		klog.FromContext(ctx).Info("No ephemeral storage in the template node: the launch template cannot be read", "err", err)
		return 0, false, nil
	}
	for _, v := range out.LaunchTemplateVersions {
		data := v.LaunchTemplateData
		if data == nil || aws.ToString(data.ImageId) != "" {
			return 0, false, nil
		}
		for _, m := range data.BlockDeviceMappings {
			if aws.ToString(m.DeviceName) == eksRootDevice && m.Ebs != nil && m.Ebs.VolumeSize != nil {
				return *m.Ebs.VolumeSize, true, nil
			}
		}
	}
	return 0, false, nil
}

// awsCode is the code of an AWS API error, "" for other errors.
func awsCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}
