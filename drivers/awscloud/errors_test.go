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
	} {
		err := Classify("creating", &smithy.GenericAPIError{Code: code, Message: "m"})
		assert.ErrorIs(t, err, want, code)
	}
	err := Classify("creating", &smithy.GenericAPIError{Code: "InternalFailure"})
	for _, e := range []error{drivers.ErrThrottled, drivers.ErrOutOfCapacity, drivers.ErrInvalidConfiguration} {
		assert.NotErrorIs(t, err, e, "a transient error is only an error")
	}
}
