package awscloud

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"nodeset.dev/nodeset/drivers"
)

// capacities caches instance types' capacities by region and type: they
// do not change.
var capacities sync.Map

// InstanceTypeCapacity is what a node of the instance type offers; an
// unknown type is an invalid configuration of field. Answers are cached for
// the life of the process.
func InstanceTypeCapacity(ctx context.Context, ec2c EC2, field, region, instanceType string) (drivers.Capacity, error) {
	key := region + "/" + instanceType
	if cached, ok := capacities.Load(key); ok {
		return copyCapacity(cached.(drivers.Capacity)), nil
	}
	capacity, err := describeInstanceType(ctx, ec2c, field, region, instanceType)
	if err != nil {
		return drivers.Capacity{}, err
	}
	capacities.Store(key, capacity)
	return copyCapacity(capacity), nil
}

// copyCapacity is a copy the caller may change.
func copyCapacity(c drivers.Capacity) drivers.Capacity {
	return drivers.Capacity{Resources: c.Resources.DeepCopy(), Allocatable: c.Allocatable.DeepCopy(),
		Labels: maps.Clone(c.Labels), Taints: slices.Clone(c.Taints)}
}

func describeInstanceType(ctx context.Context, ec2c EC2, field, region, instanceType string) (drivers.Capacity, error) {
	out, err := ec2c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []ec2types.InstanceType{ec2types.InstanceType(instanceType)}})
	if err != nil {
		return drivers.Capacity{}, Classify("describing instance type "+instanceType, err)
	}
	if len(out.InstanceTypes) == 0 {
		return drivers.Capacity{}, drivers.InvalidConfiguration(field, "%q is not an EC2 instance type in %s", instanceType, region)
	}
	return capacityOf(out.InstanceTypes[0]), nil
}

// capacityOf is a node's capacity from its instance type. Pods follow the
// VPC CNI's limit: ENIs × (IPv4 addresses per ENI − 1) + 2.
func capacityOf(t ec2types.InstanceTypeInfo) drivers.Capacity {
	c := drivers.Capacity{Resources: corev1.ResourceList{}, Labels: map[string]string{
		corev1.LabelInstanceTypeStable: string(t.InstanceType),
	}}
	if t.VCpuInfo != nil && t.VCpuInfo.DefaultVCpus != nil {
		c.Resources[corev1.ResourceCPU] = *resource.NewQuantity(int64(*t.VCpuInfo.DefaultVCpus), resource.DecimalSI)
	}
	if t.MemoryInfo != nil && t.MemoryInfo.SizeInMiB != nil {
		c.Resources[corev1.ResourceMemory] = *resource.NewQuantity(*t.MemoryInfo.SizeInMiB*1024*1024, resource.BinarySI)
	}
	if n := t.NetworkInfo; n != nil && n.MaximumNetworkInterfaces != nil && n.Ipv4AddressesPerInterface != nil {
		pods := int64(*n.MaximumNetworkInterfaces)*(int64(*n.Ipv4AddressesPerInterface)-1) + 2
		c.Resources[corev1.ResourcePods] = *resource.NewQuantity(pods, resource.DecimalSI)
	}
	if p := t.ProcessorInfo; p != nil {
		if arch := kubeArch(p.SupportedArchitectures); arch != "" {
			c.Labels[corev1.LabelArchStable] = arch
		}
	}
	for name, n := range gpus(t.GpuInfo) {
		c.Resources[name] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	c.Allocatable = eksAllocatable(c.Resources)
	return c
}

// gpuResources are the extended resources the device plugins of EC2's GPU
// manufacturers report, by the manufacturer EC2 names.
var gpuResources = map[string]corev1.ResourceName{
	"nvidia": "nvidia.com/gpu",
	"amd":    "amd.com/gpu",
	"habana": "habana.ai/gaudi",
}

// gpus are the GPUs of an instance type, by the extended resource their
// device plugin reports them as: a template node without them fits no pod
// that requests one (cluster-autoscaler's AWS provider puts them in its
// template nodes too), and a Node's nodeset.dev/accelerator label comes
// from them.
func gpus(info *ec2types.GpuInfo) map[corev1.ResourceName]int64 {
	if info == nil {
		return nil
	}
	out := map[corev1.ResourceName]int64{}
	for _, g := range info.Gpus {
		if g.Count == nil || *g.Count <= 0 || g.Manufacturer == nil {
			continue
		}
		if name, ok := gpuResources[strings.ToLower(*g.Manufacturer)]; ok {
			out[name] += int64(*g.Count)
		}
	}
	return out
}

// eksAllocatable is what the kubelet of an EKS-optimized AMI leaves pods of
// capacity: it reserves for Kubernetes' own daemons, by the AMI's formulas,
// 11 MiB per pod the node allows plus 255 MiB of memory and a share of
// each core's CPU (6 % of the first, 1 % of the second, 0.5 % of the third
// and fourth, 0.25 % of each above), and evicts pods when less than
// 100 MiB of memory is free. A template node with the whole capacity
// would take a pod that fills the instance as fitting, and
// cluster-autoscaler would add a node the pod does not fit on.
func eksAllocatable(capacity corev1.ResourceList) corev1.ResourceList {
	allocatable := capacity.DeepCopy()
	if cpu, ok := capacity[corev1.ResourceCPU]; ok {
		cores := cpu.Value()
		reserved := 0.0
		for core := int64(1); core <= cores; core++ {
			switch {
			case core == 1:
				reserved += 60
			case core == 2:
				reserved += 10
			case core <= 4:
				reserved += 5
			default:
				reserved += 2.5
			}
		}
		allocatable[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(cpu.MilliValue()-int64(reserved), 0), resource.DecimalSI)
	}
	if memory, ok := capacity[corev1.ResourceMemory]; ok {
		pods := capacity.Pods().Value()
		reserved := (11*pods + 255 + 100) * 1024 * 1024
		allocatable[corev1.ResourceMemory] = *resource.NewQuantity(max(memory.Value()-reserved, 0), resource.BinarySI)
	}
	return allocatable
}

// Ephemeral storage as the kubelet of an EKS-optimized Amazon Linux AMI
// (AL2's bootstrap.sh, AL2023's nodeadm) reports it: its capacity is the
// size of the filesystem of /var/lib/kubelet, the root volume's; it
// reserves 1Gi of it for Kubernetes' daemons (kubeReserved) and evicts
// pods when less than 10 % of it is free (evictionHard nodefs.available),
// which the kubelet takes away from the allocatable as well
// (pkg/kubelet/cm hardEvictionReservation).
const (
	eksReservedEphemeralStorage = 1 << 30
	eksNodefsEvictionPercent    = float32(0.1)
)

// WithEphemeralStorage adds to c the ephemeral storage of a node whose
// kubelet, that of an EKS-optimized Amazon Linux AMI, keeps pods' files on
// a root volume of rootGiB: the volume's size, less for the allocatable
// what the kubelet reserves and its eviction threshold. The filesystem
// takes a little of the volume for itself (under 1 %), which a template
// cannot know.
func WithEphemeralStorage(c *drivers.Capacity, rootGiB int32) {
	capacity := int64(rootGiB) << 30
	// The kubelet's own arithmetic: the percentage is a float32
	// (evictionapi.GetThresholdQuantity).
	evicted := int64(float64(capacity) * float64(eksNodefsEvictionPercent))
	if c.Resources == nil {
		c.Resources = corev1.ResourceList{}
	}
	if c.Allocatable == nil {
		c.Allocatable = c.Resources.DeepCopy()
	}
	c.Resources[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(capacity, resource.BinarySI)
	c.Allocatable[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(max(capacity-eksReservedEphemeralStorage-evicted, 0), resource.BinarySI)
}

// kubeArch is the kubernetes.io/arch label the kubelet of an instance with
// these EC2 architectures reports (its GOARCH): amd64 for x86_64 types,
// which EC2 may list as i386 first, arm64 for Graviton.
func kubeArch(archs []ec2types.ArchitectureType) string {
	for _, a := range archs {
		switch a {
		case ec2types.ArchitectureTypeArm64, ec2types.ArchitectureTypeArm64Mac:
			return "arm64"
		case ec2types.ArchitectureTypeX8664, ec2types.ArchitectureTypeX8664Mac:
			return "amd64"
		}
	}
	if len(archs) > 0 {
		return "amd64" // i386 alone: a 64-bit AMI is the only one EKS runs
	}
	return ""
}

// LabelEBSCSIZone is the zone label the EBS CSI driver's node plugin puts
// on every Node; volumes it provisioned may be bound to it.
const LabelEBSCSIZone = "topology.ebs.csi.aws.com/zone"

// subnetZones caches subnets' zones by region and subnet id: a subnet
// never moves.
var subnetZones sync.Map

// TopologyLabels are the region and zone labels of a node launched into
// one of the subnets. A template node is one node: for subnets in several
// zones it names the lowest-named zone, as cluster-autoscaler's AWS
// provider names its group's first zone. An unknown subnet is an invalid
// configuration of field.
func TopologyLabels(ctx context.Context, ec2c EC2, field, region string, subnets []string) (map[string]string, error) {
	labels := map[string]string{corev1.LabelTopologyRegion: region}
	var zones, unknown []string
	for _, id := range subnets {
		if zone, ok := subnetZones.Load(region + "/" + id); ok {
			zones = append(zones, zone.(string))
		} else {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		out, err := ec2c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: unknown})
		if err != nil {
			return nil, Classify(field+" "+strings.Join(unknown, ","), err)
		}
		if len(out.Subnets) != len(unknown) {
			return nil, drivers.InvalidConfiguration(field, "%d of %d subnets exist in %s", len(out.Subnets), len(unknown), region)
		}
		for _, s := range out.Subnets {
			zone := aws.ToString(s.AvailabilityZone)
			subnetZones.Store(region+"/"+aws.ToString(s.SubnetId), zone)
			zones = append(zones, zone)
		}
	}
	if len(zones) > 0 {
		maps.Copy(labels, InstanceLabels(slices.Min(zones), ""))
	}
	return labels, nil
}

// ValidateInstanceTypes checks that every instance type exists in the
// region, in one call; field names them in the message.
func ValidateInstanceTypes(ctx context.Context, ec2c EC2, field, region string, instanceTypes []string) error {
	_, err := InstanceTypeArchitectures(ctx, ec2c, field, region, instanceTypes)
	return err
}

// InstanceTypeArchitectures are the architectures each instance type runs,
// by type, in one call; a type the region does not have is an invalid
// configuration of field.
func InstanceTypeArchitectures(ctx context.Context, ec2c EC2, field, region string, instanceTypes []string) (map[string][]ec2types.ArchitectureType, error) {
	var want []ec2types.InstanceType
	for _, t := range instanceTypes {
		if t != "" {
			want = append(want, ec2types.InstanceType(t))
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	out, err := ec2c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: want})
	if err != nil {
		return nil, Classify(field+" "+joinTypes(want), err)
	}
	archs := map[string][]ec2types.ArchitectureType{}
	for _, t := range out.InstanceTypes {
		archs[string(t.InstanceType)] = nil
		if t.ProcessorInfo != nil {
			archs[string(t.InstanceType)] = t.ProcessorInfo.SupportedArchitectures
		}
	}
	for _, t := range want {
		if _, ok := archs[string(t)]; !ok {
			return nil, drivers.InvalidConfiguration(field, "%q is not an EC2 instance type in %s", t, region)
		}
	}
	return archs, nil
}

// OtherArchitecture says which architectures instanceType runs when they
// are known and do not include want (an image's, an EKS AMI type's): every
// launch of it from that image fails. It is "" otherwise.
func OtherArchitecture(instanceType string, archs []ec2types.ArchitectureType, want string) string {
	if want == "" || len(archs) == 0 || slices.Contains(archs, ec2types.ArchitectureType(want)) {
		return ""
	}
	var runs []string
	for _, a := range archs {
		runs = append(runs, string(a))
	}
	return fmt.Sprintf("%q runs %s", instanceType, strings.Join(runs, " or "))
}

func joinTypes(types []ec2types.InstanceType) string {
	out := ""
	for i, t := range types {
		if i > 0 {
			out += ","
		}
		out += string(t)
	}
	return out
}
