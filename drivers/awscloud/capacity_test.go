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
