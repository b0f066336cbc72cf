package awscloud

import (
	"testing"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
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
