package awscloud

import (
	"testing"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestCapacityArchitecture: the architecture label is the one the kubelet
// of such an instance reports (Go's GOARCH), whatever EC2 lists first.
func TestCapacityArchitecture(t *testing.T) {
	for _, tc := range []struct {
		name  string
		archs []ec2types.ArchitectureType
		want  string
	}{
		{"m5.large", []ec2types.ArchitectureType{"x86_64"}, "amd64"},
		{"t2.medium", []ec2types.ArchitectureType{"i386", "x86_64"}, "amd64"},
		{"m7g.large", []ec2types.ArchitectureType{"arm64"}, "arm64"},
		{"mac1.metal", []ec2types.ArchitectureType{"x86_64_mac"}, "amd64"},
		{"mac2.metal", []ec2types.ArchitectureType{"arm64_mac"}, "arm64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := capacityOf(ec2types.InstanceTypeInfo{InstanceType: ec2types.InstanceType(tc.name),
				ProcessorInfo: &ec2types.ProcessorInfo{SupportedArchitectures: tc.archs}})
			assert.Equal(t, tc.want, c.Labels[corev1.LabelArchStable])
			assert.Equal(t, tc.name, c.Labels[corev1.LabelInstanceTypeStable])
		})
	}
}

// TestAllocatableIsWhatTheEKSKubeletLeaves: the template node's allocatable
// is the capacity less what an EKS-optimized AMI's kubelet reserves for
// Kubernetes' daemons and its memory eviction threshold, as the real Node
// reports it.
func TestAllocatableIsWhatTheEKSKubeletLeaves(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cpus        int32
		memoryMiB   int64
		enis, ips   int32
		cpu, memory string
	}{
		// m5.large: 2 vCPUs, 8 GiB, 29 pods: 70m and 11*29+255+100 = 674 MiB.
		{"m5.large", 2, 8192, 3, 10, "1930m", "7518Mi"},
		// m5.4xlarge: 16 vCPUs, 64 GiB, 234 pods: 60+10+2*5+12*2.5 = 110m; 11*234+355 = 2929 MiB.
		{"m5.4xlarge", 16, 65536, 8, 30, "15890m", "62607Mi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := capacityOf(ec2types.InstanceTypeInfo{InstanceType: ec2types.InstanceType(tc.name),
				VCpuInfo:    &ec2types.VCpuInfo{DefaultVCpus: &tc.cpus},
				MemoryInfo:  &ec2types.MemoryInfo{SizeInMiB: &tc.memoryMiB},
				NetworkInfo: &ec2types.NetworkInfo{MaximumNetworkInterfaces: &tc.enis, Ipv4AddressesPerInterface: &tc.ips}})
			wantCPU, wantMemory := resource.MustParse(tc.cpu), resource.MustParse(tc.memory)
			assert.Equal(t, wantCPU.MilliValue(), c.Allocatable.Cpu().MilliValue(), "cpu")
			assert.Equal(t, wantMemory.Value(), c.Allocatable.Memory().Value(), "memory")
			assert.Equal(t, c.Resources.Pods().Value(), c.Allocatable.Pods().Value(), "pods")
		})
	}
}

// TestCapacityCountsGPUs: an instance type with GPUs offers them as the
// extended resource their device plugin reports, as cluster-autoscaler's
// own AWS provider puts them in its template nodes
// (cloudprovider/aws/aws_manager.go buildNodeFromTemplate). Without it a
// NodeSet of g4dn.xlarge at zero is never scaled up for a pod that
// requests a GPU, and its Nodes carry no nodeset.dev/accelerator label.
func TestCapacityCountsGPUs(t *testing.T) {
	for _, tc := range []struct {
		name, manufacturer string
		count              int32
		resource           corev1.ResourceName
	}{
		{"g4dn.xlarge", "NVIDIA", 1, "nvidia.com/gpu"},
		{"p4d.24xlarge", "NVIDIA", 8, "nvidia.com/gpu"},
		{"g4ad.xlarge", "AMD", 1, "amd.com/gpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := capacityOf(ec2types.InstanceTypeInfo{InstanceType: ec2types.InstanceType(tc.name),
				GpuInfo: &ec2types.GpuInfo{Gpus: []ec2types.GpuDeviceInfo{{Count: &tc.count, Manufacturer: &tc.manufacturer}}}})
			want := *resource.NewQuantity(int64(tc.count), resource.DecimalSI)
			got, ok := c.Resources[tc.resource]
			assert.True(t, ok, "capacity has %s", tc.resource)
			assert.Equal(t, want.Value(), got.Value(), "capacity")
			got, ok = c.Allocatable[tc.resource]
			assert.True(t, ok, "allocatable has %s", tc.resource)
			assert.Equal(t, want.Value(), got.Value(), "allocatable")
		})
	}
	c := capacityOf(ec2types.InstanceTypeInfo{InstanceType: "m5.large"})
	for _, r := range []corev1.ResourceName{"nvidia.com/gpu", "amd.com/gpu"} {
		_, ok := c.Resources[r]
		assert.False(t, ok, "m5.large has no %s", r)
	}
}
