package eksasg

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// ensureLaunchTemplate creates the template, or a new default version of it
// when the configuration changed (the version's description is the template
// hash).
func (d *Driver) ensureLaunchTemplate(ctx context.Context, ec2c awscloud.EC2, group drivers.Group, s *nodesetv1alpha1.EKSAutoscalingGroup) error {
	s, err := d.withCluster(ctx, group.Class.Credentials, s)
	if err != nil {
		return err
	}
	data, err := launchTemplateData(group, s, d.tags(group.Owner, group.TemplateHash, nil))
	if err != nil {
		return err
	}
	versions, err := ec2c.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{
		LaunchTemplateName: aws.String(group.Name), Versions: []string{"$Latest"}})
	switch {
	case launchTemplateNotFound(err):
		tags := d.tags(group.Owner, "", s.Tags)
		_, err := ec2c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
			LaunchTemplateName: aws.String(group.Name),
			VersionDescription: aws.String(group.TemplateHash),
			LaunchTemplateData: data,
			TagSpecifications:  []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeLaunchTemplate, Tags: ec2Tags(tags)}},
		})
		if awscloud.IsCode(err, "InvalidLaunchTemplateName.AlreadyExistsException") {
			return nil
		}
		return awscloud.Classify("creating launch template "+group.Name, err)
	case err != nil:
		return awscloud.Classify("describing launch template "+group.Name, err)
	}
	if len(versions.LaunchTemplateVersions) > 0 && aws.ToString(versions.LaunchTemplateVersions[0].VersionDescription) == group.TemplateHash {
		return nil
	}
	_, err = ec2c.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{
		LaunchTemplateName: aws.String(group.Name),
		VersionDescription: aws.String(group.TemplateHash),
		LaunchTemplateData: data,
	})
	return awscloud.Classify("creating a launch template version of "+group.Name, err)
}

func launchTemplateData(group drivers.Group, s *nodesetv1alpha1.EKSAutoscalingGroup, owner map[string]string) (*ec2types.RequestLaunchTemplateData, error) {
	userData, err := UserData(s, group.Labels, group.Taints)
	if err != nil {
		return nil, err
	}
	instanceTags := map[string]string{"kubernetes.io/cluster/" + s.ClusterName: "owned"}
	for k, v := range owner {
		instanceTags[k] = v
	}
	data := &ec2types.RequestLaunchTemplateData{
		ImageId:          aws.String(s.ImageID),
		SecurityGroupIds: s.SecurityGroupIDs,
		UserData:         aws.String(userData),
		TagSpecifications: []ec2types.LaunchTemplateTagSpecificationRequest{{
			ResourceType: ec2types.ResourceTypeInstance,
			Tags:         ec2Tags(instanceTags),
		}},
	}
	if s.InstanceType != "" {
		data.InstanceType = ec2types.InstanceType(s.InstanceType)
	}
	if s.InstanceProfile != "" {
		profile := &ec2types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: aws.String(s.InstanceProfile)}
		if strings.HasPrefix(s.InstanceProfile, "arn:") {
			profile = &ec2types.LaunchTemplateIamInstanceProfileSpecificationRequest{Arn: aws.String(s.InstanceProfile)}
		}
		data.IamInstanceProfile = profile
	}
	if s.KeyName != "" {
		data.KeyName = aws.String(s.KeyName)
	}
	for _, b := range s.BlockDevices {
		data.BlockDeviceMappings = append(data.BlockDeviceMappings, ec2types.LaunchTemplateBlockDeviceMappingRequest{
			DeviceName: aws.String(b.DeviceName),
			Ebs: &ec2types.LaunchTemplateEbsBlockDeviceRequest{
				VolumeSize: b.VolumeSize, VolumeType: ec2types.VolumeType(b.VolumeType), Iops: b.IOPS, Throughput: b.Throughput,
				Encrypted: b.Encrypted, KmsKeyId: optional(b.KMSKeyID), DeleteOnTermination: b.DeleteOnTermination,
			},
		})
	}
	if m := s.MetadataOptions; m != nil {
		// The schema's default in every metadataOptions written; a class
		// without the section merged with a NodeSet's hop limit has none,
		// and EC2's own default would leave IMDSv1 open.
		tokens := cmp.Or(m.HTTPTokens, string(ec2types.LaunchTemplateHttpTokensStateRequired))
		data.MetadataOptions = &ec2types.LaunchTemplateInstanceMetadataOptionsRequest{
			HttpTokens:              ec2types.LaunchTemplateHttpTokensState(tokens),
			HttpPutResponseHopLimit: m.HTTPPutResponseHopLimit,
			HttpEndpoint:            ec2types.LaunchTemplateInstanceMetadataEndpointState(m.HTTPEndpoint),
		}
	}
	return data, nil
}

// AWS's defaults of the on-demand settings of a mixed-instances policy,
// and of its spot allocation strategy (the API's, for a group made without
// one; the console proposes price-capacity-optimized).
const (
	defaultOnDemandBase       = 0
	defaultOnDemandPercentage = 100
	defaultSpotAllocation     = "lowest-price"
)

// spotAllocation is strategy, or AWS's default when it is "".
func spotAllocation(strategy string) string {
	if strategy == "" {
		return defaultSpotAllocation
	}
	return strategy
}

// orDefault is *v, or def when v is nil.
func orDefault(v *int32, def int32) int32 {
	if v == nil {
		return def
	}
	return *v
}

// mixedInstances is the group's mixed-instances policy. The on-demand
// settings and the spot allocation strategy are always sent, with AWS's
// defaults for those the class leaves out: Auto Scaling keeps a value an
// update leaves out, so a setting removed from the class would otherwise
// stay on the group.
func mixedInstances(spec *asgtypes.LaunchTemplateSpecification, m *nodesetv1alpha1.MixedInstancesPolicy) *asgtypes.MixedInstancesPolicy {
	policy := &asgtypes.MixedInstancesPolicy{
		LaunchTemplate: &asgtypes.LaunchTemplate{LaunchTemplateSpecification: spec},
		InstancesDistribution: &asgtypes.InstancesDistribution{
			OnDemandBaseCapacity:                aws.Int32(orDefault(m.OnDemandBaseCapacity, defaultOnDemandBase)),
			OnDemandPercentageAboveBaseCapacity: aws.Int32(orDefault(m.OnDemandPercentageAboveBaseCapacity, defaultOnDemandPercentage)),
			SpotAllocationStrategy:              aws.String(spotAllocation(m.SpotAllocationStrategy)),
			SpotMaxPrice:                        optional(m.SpotMaxPrice),
		},
	}
	for _, t := range m.InstanceTypes {
		policy.LaunchTemplate.Overrides = append(policy.LaunchTemplate.Overrides, asgtypes.LaunchTemplateOverrides{InstanceType: aws.String(t)})
	}
	return policy
}

// UserData is the base64 user data that joins an instance to its EKS
// cluster: a nodeadm NodeConfig (the default) or a bootstrap.sh call. The
// Node's labels and taints go to the kubelet too, so that they hold from the
// first moment; the controller applies them on the Node regardless.
func UserData(s *nodesetv1alpha1.EKSAutoscalingGroup, labels map[string]string, taints []corev1.Taint) (string, error) {
	b := s.Bootstrap
	if b == nil {
		b = &nodesetv1alpha1.EKSBootstrap{}
	}
	if b.APIServerEndpoint == "" || b.CertificateAuthority == "" {
		return "", drivers.InvalidConfiguration("spec.eksAutoscalingGroup.bootstrap",
			"apiServerEndpoint and certificateAuthority are required when the node controller cannot look them up from EKS")
	}
	var nodeLabels []string
	for _, k := range sortedKeys(labels) {
		if kubeletMaySet(k) {
			nodeLabels = append(nodeLabels, k+"="+labels[k])
		}
	}
	var nodeTaints []string
	for _, t := range taints {
		nodeTaints = append(nodeTaints, t.Key+"="+t.Value+":"+string(t.Effect))
	}
	sort.Strings(nodeTaints)
	flags := append([]string{}, b.KubeletExtraArgs...)
	if len(nodeLabels) > 0 {
		flags = append(flags, "--node-labels="+strings.Join(nodeLabels, ","))
	}
	if len(nodeTaints) > 0 {
		flags = append(flags, "--register-with-taints="+strings.Join(nodeTaints, ","))
	}
	var out strings.Builder
	if b.Format == nodesetv1alpha1.BootstrapScript {
		out.WriteString("#!/bin/bash\nset -o errexit -o nounset -o pipefail\n")
		for _, c := range b.PreBootstrapCommands {
			out.WriteString(c + "\n")
		}
		fmt.Fprintf(&out, "/etc/eks/bootstrap.sh %s --apiserver-endpoint %s --b64-cluster-ca %s", shellQuote(s.ClusterName),
			shellQuote(b.APIServerEndpoint), shellQuote(b.CertificateAuthority))
		if b.ServiceCIDR != "" {
			fmt.Fprintf(&out, " --service-ipv4-cidr %s", shellQuote(b.ServiceCIDR))
		}
		if len(flags) > 0 {
			fmt.Fprintf(&out, " --kubelet-extra-args %s", shellQuote(strings.Join(flags, " ")))
		}
		out.WriteString("\n")
		return encodeUserData(out.String())
	}
	const boundary = "NODESET"
	fmt.Fprintf(&out, "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=%q\n\n", boundary)
	if len(b.PreBootstrapCommands) > 0 {
		fmt.Fprintf(&out, "--%s\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\n%s\n\n", boundary, strings.Join(b.PreBootstrapCommands, "\n"))
	}
	fmt.Fprintf(&out, "--%s\nContent-Type: application/node.eks.aws\n\n", boundary)
	fmt.Fprintf(&out, "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: %q\n    apiServerEndpoint: %q\n    certificateAuthority: %q\n",
		s.ClusterName, b.APIServerEndpoint, b.CertificateAuthority)
	if b.ServiceCIDR != "" {
		fmt.Fprintf(&out, "    cidr: %q\n", b.ServiceCIDR)
	}
	if len(flags) > 0 {
		out.WriteString("  kubelet:\n    flags:\n")
		for _, f := range flags {
			fmt.Fprintf(&out, "    - %q\n", f)
		}
	}
	fmt.Fprintf(&out, "\n--%s--\n", boundary)
	return encodeUserData(out.String())
}

// maxUserData is EC2's limit on an instance's user data, in raw form,
// before base64.
const maxUserData = 16 << 10

// encodeUserData refuses user data EC2 would refuse (with a message that
// echoes the whole encoded text back), naming what makes it up instead.
func encodeUserData(raw string) (string, error) {
	if len(raw) > maxUserData {
		return "", drivers.InvalidConfiguration("spec.eksAutoscalingGroup.bootstrap",
			"the instances' user data would be %d bytes, and EC2 takes at most %d (before base64): it holds the bootstrap's certificateAuthority, "+
				"kubeletExtraArgs and preBootstrapCommands, and the Node's labels and taints; make them shorter", len(raw), maxUserData)
	}
	return base64.StdEncoding.EncodeToString([]byte(raw)), nil
}

// kubeletLabels are the keys of the kubernetes.io and k8s.io domains a
// kubelet accepts in --node-labels, besides those under
// kubeletLabelDomains; with any other key of those domains it refuses to
// start.
var kubeletLabels = map[string]bool{
	"kubernetes.io/hostname": true, "kubernetes.io/os": true, "kubernetes.io/arch": true,
	"beta.kubernetes.io/os": true, "beta.kubernetes.io/arch": true, "beta.kubernetes.io/instance-type": true,
	"node.kubernetes.io/instance-type": true, "topology.kubernetes.io/zone": true, "topology.kubernetes.io/region": true,
	"failure-domain.beta.kubernetes.io/zone": true, "failure-domain.beta.kubernetes.io/region": true,
}

var kubeletLabelDomains = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}

// kubeletMaySet reports whether the kubelet accepts a label key in
// --node-labels. The others (node-role.kubernetes.io/worker, ...) nodeset
// puts on the Node itself.
func kubeletMaySet(key string) bool {
	if !strings.Contains(key, "/") || kubeletLabels[key] || (!nodeutil.InDomain(key, "kubernetes.io") && !nodeutil.InDomain(key, "k8s.io")) {
		return true
	}
	for _, d := range kubeletLabelDomains {
		if nodeutil.InDomain(key, d) {
			return true
		}
	}
	return false
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'" }

func launchTemplateNotFound(err error) bool {
	return awscloud.IsCode(err, "InvalidLaunchTemplateName.NotFoundException") || awscloud.IsCode(err, "InvalidLaunchTemplateId.NotFound")
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

func ec2Tags(tags map[string]string) []ec2types.Tag {
	out := make([]ec2types.Tag, 0, len(tags))
	for _, k := range sortedKeys(tags) {
		out = append(out, ec2types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	return out
}
