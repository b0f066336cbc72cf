package awscloud

import (
	"testing"

	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"

	"nodeset.dev/nodeset/drivers"
)

func TestClassify(t *testing.T) {
	for code, want := range map[string]error{
		"Throttling":                   drivers.ErrThrottled,
		"RequestLimitExceeded":         drivers.ErrThrottled,
		"InsufficientInstanceCapacity": drivers.ErrOutOfCapacity,
		"ValidationError":              drivers.ErrInvalidConfiguration,
		"InvalidAMIID.NotFound":        drivers.ErrInvalidConfiguration,
		"InvalidInstanceType":          drivers.ErrInvalidConfiguration,
		// Credentials AWS refuses, in each protocol's words: EKS and SQS
		// (JSON) say UnrecognizedClientException, InvalidSignatureException
		// and ExpiredTokenException; Auto Scaling and STS (query) say
		// InvalidClientTokenId and ExpiredToken; EC2 says AuthFailure and,
		// for an expired session token, RequestExpired.
		"UnrecognizedClientException": drivers.ErrInvalidConfiguration,
		"InvalidSignatureException":   drivers.ErrInvalidConfiguration,
		"ExpiredTokenException":       drivers.ErrInvalidConfiguration,
		"ExpiredToken":                drivers.ErrInvalidConfiguration,
		"InvalidClientTokenId":        drivers.ErrInvalidConfiguration,
		"RequestExpired":              drivers.ErrInvalidConfiguration,
		"AccessDeniedException":       drivers.ErrInvalidConfiguration,
	} {
		err := Classify("creating", &smithy.GenericAPIError{Code: code, Message: "m"})
		assert.ErrorIs(t, err, want, code)
	}
	err := Classify("creating", &smithy.GenericAPIError{Code: "InternalFailure"})
	for _, e := range []error{drivers.ErrThrottled, drivers.ErrOutOfCapacity, drivers.ErrInvalidConfiguration} {
		assert.NotErrorIs(t, err, e, "a transient error is only an error")
	}
}

func TestRedact(t *testing.T) {
	creds := map[string][]byte{CredentialAccessKeyID: []byte("AKIAPLANTED000000001"), CredentialSecretAccessKey: []byte("planted-secret-key-value")}
	err := Classify("creating", &smithy.GenericAPIError{Code: "AuthFailure",
		Message: "Credential=AKIAPLANTED000000001/20250101/us-east-1/ec2/aws4_request secret planted-secret-key-value"})
	Redact(creds, &err)
	assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration, "the driver error is kept")
	assert.Equal(t, "creating: invalid configuration: AuthFailure: Credential=[redacted:aws_access_key_id]/20250101/us-east-1/ec2/aws4_request secret [redacted:aws_secret_access_key]", err.Error())
	var none error
	Redact(creds, &none)
	assert.NoError(t, none)
}
