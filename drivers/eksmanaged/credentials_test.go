package eksmanaged

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// refusingEKS answers every call as EKS answers a request signed with
// credentials it refuses (moto takes any).
type refusingEKS struct {
	EKS
	code, message string
}

func (r refusingEKS) DescribeCluster(context.Context, *eks.DescribeClusterInput, ...func(*eks.Options)) (*eks.DescribeClusterOutput, error) {
	return nil, &smithy.GenericAPIError{Code: r.code, Message: r.message, Fault: smithy.FaultClient}
}

// TestCredentialsEKSRefusesAreTheClassesVerdict: an access key EKS does not
// know, a secret that does not sign, and an expired session token are
// answered by EKS with codes of its own (UnrecognizedClientException,
// InvalidSignatureException, ExpiredTokenException). Each is the class's
// Valid=False verdict, as AWS's refusal of the credentials is for eks-asg,
// not a blip to retry as Valid=Unknown; the message never quotes them.
func TestCredentialsEKSRefusesAreTheClassesVerdict(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	keyID := "AKIAPLANTEDKEY000001"
	class := w.class()
	class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "aws-credentials"}
	class.Credentials = map[string][]byte{awscloud.CredentialAccessKeyID: []byte(keyID),
		awscloud.CredentialSecretAccessKey: []byte("planted-secret"), awscloud.CredentialSessionToken: []byte("planted-session-token")}
	for code, message := range map[string]string{
		"UnrecognizedClientException": "The security token included in the request is invalid.",
		"InvalidSignatureException":   "The request signature we calculated does not match the signature you provided. Credential=" + keyID,
		"ExpiredTokenException":       "The security token included in the request is expired",
	} {
		d := New(Options{Cluster: "e2e", Clients: func(context.Context, string, map[string][]byte) (API, error) {
			return API{EKS: refusingEKS{code: code, message: message}, AutoScaling: w.api.AutoScaling, EC2: w.api.EC2}, nil
		}})
		err := d.ValidateCloud(ctx, class)
		require.ErrorIs(t, err, drivers.ErrInvalidConfiguration, code)
		assert.ErrorContains(t, err, code)
		assert.NotContains(t, err.Error(), keyID)
	}
}

// TestInstanceTypesOfAnotherArchitectureAreTheClassesVerdict: EKS refuses
// to make a node group whose instance types do not run the architecture of
// its amiType ("[m6g.large] is not a valid instance type for requested
// amiType AL2023_x86_64_STANDARD"), and without an amiType (and a launch
// template with an AMI of its own) it uses an x86_64 one. Each is the
// class's verdict, naming the type, instead of every NodeSet's failed
// creation.
func TestInstanceTypesOfAnotherArchitectureAreTheClassesVerdict(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver()
	for _, tt := range []struct {
		amiType string
		types   []string
		want    string // "" when valid
	}{
		{"AL2023_x86_64_STANDARD", []string{"m6i.large", "m6g.large"}, `"m6g.large" runs arm64, and amiType AL2023_x86_64_STANDARD is x86_64: EKS refuses the node group`},
		{"AL2023_ARM_64_STANDARD", []string{"m6g.large", "m5.large"}, `"m5.large" runs`},
		{"BOTTLEROCKET_ARM_64", []string{"m6g.large", "c6g.large"}, ""},
		{"", []string{"m5.large", "m6g.large"}, `"m6g.large" runs arm64, and without amiType EKS uses an x86_64 one: EKS refuses the node group (set amiType, such as AL2023_ARM_64_STANDARD)`},
		{"", []string{"m5.large", "t2.large"}, ""},
		{"CUSTOM", []string{"m5.large"}, ""},
	} {
		class := w.class()
		section := *class.Spec.EKSManagedNodeGroup
		class.Spec.EKSManagedNodeGroup = &section
		section.AMIType, section.InstanceTypes = tt.amiType, tt.types
		err := d.ValidateCloud(ctx, class)
		if tt.want == "" {
			assert.NoError(t, err, "%s %v", tt.amiType, tt.types)
			continue
		}
		require.ErrorIs(t, err, drivers.ErrInvalidConfiguration, "%s %v", tt.amiType, tt.types)
		assert.ErrorContains(t, err, "spec.eksManagedNodeGroup.instanceTypes: "+tt.want)
	}
}
