package eksasg

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestAMetadataSectionWithoutHTTPTokensRequiresIMDSv2: the schema defaults
// httpTokens to required in every metadataOptions written, but a class
// that leaves metadataOptions out and a NodeSet that sets only its hop
// limit merge to a section without it. The launch template then left
// HttpTokens out, and EC2 took its own default (optional, IMDSv1 open)
// where the API promises required.
func TestAMetadataSectionWithoutHTTPTokensRequiresIMDSv2(t *testing.T) {
	tests := []struct {
		name    string
		options *nodesetv1alpha1.InstanceMetadataOptions
		want    ec2types.LaunchTemplateHttpTokensState
	}{
		{"hop limit only", &nodesetv1alpha1.InstanceMetadataOptions{HTTPPutResponseHopLimit: aws.Int32(2)}, ec2types.LaunchTemplateHttpTokensStateRequired},
		{"optional, said", &nodesetv1alpha1.InstanceMetadataOptions{HTTPTokens: "optional"}, ec2types.LaunchTemplateHttpTokensStateOptional},
		{"required, said", &nodesetv1alpha1.InstanceMetadataOptions{HTTPTokens: "required"}, ec2types.LaunchTemplateHttpTokensStateRequired},
	}
	bootstrap := &nodesetv1alpha1.EKSBootstrap{APIServerEndpoint: "https://prod.example", CertificateAuthority: "Q0E="}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Region: "us-east-1", ImageID: "ami-1", InstanceType: "m6i.large",
				Bootstrap: bootstrap, MetadataOptions: tt.options}
			data, err := launchTemplateData(drivers.Group{Name: "g"}, s, nil)
			require.NoError(t, err)
			require.NotNil(t, data.MetadataOptions)
			assert.Equal(t, tt.want, data.MetadataOptions.HttpTokens)
		})
	}
	s := &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Region: "us-east-1", ImageID: "ami-1", InstanceType: "m6i.large", Bootstrap: bootstrap}
	data, err := launchTemplateData(drivers.Group{Name: "g"}, s, nil)
	require.NoError(t, err)
	assert.Nil(t, data.MetadataOptions, "no section: the image's and the account's defaults, as before")
}
