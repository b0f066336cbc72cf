package awscloud

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/redact"
)

// Redact removes every value of credentials (the class's Secret), and
// whatever has the form of a credential (the SDK's default chain's, in no
// Secret: redact.Shapes), from *err:
// AWS answers can quote what a request carried (an access key id in an
// authorization error, a session token), and the drivers' errors become
// conditions, Events and log lines. The error keeps the driver errors it
// wraps (errors.Is). Drivers defer it in each method that returns text from
// AWS.
func Redact(credentials map[string][]byte, err *error) {
	*err = redact.ShapesOf(redact.Error(credentials, *err))
}

// IsCode reports whether err is an AWS API error with this code.
func IsCode(err error, code string) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == code
}

// Classify wraps an AWS error in the driver error the controllers act on:
// throttling, capacity, and configuration or permission errors; others are
// transient.
func Classify(what string, err error) error {
	if err == nil {
		return nil
	}
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return fmt.Errorf("%s: %w", what, err)
	}
	// The API's code and message, without the SDK's wrapping (request ids).
	said := apiErr.ErrorCode() + ": " + apiErr.ErrorMessage()
	switch code := apiErr.ErrorCode(); {
	case code == "Throttling" || code == "ThrottlingException" || code == "RequestLimitExceeded":
		return fmt.Errorf("%s: %w: %s", what, drivers.ErrThrottled, said)
	case code == "InsufficientInstanceCapacity" || code == "InsufficientCapacity" || code == "LimitExceeded":
		return fmt.Errorf("%s: %w: %s", what, drivers.ErrOutOfCapacity, said)
	case code == "ValidationError" || strings.HasPrefix(code, "InvalidParameter") || strings.HasPrefix(code, "InvalidAMIID") || strings.HasPrefix(code, "InvalidInstanceType") ||
		strings.HasPrefix(code, "InvalidSubnet") || strings.HasPrefix(code, "InvalidGroup") || code == "UnauthorizedOperation" ||
		code == "AccessDenied" || code == "AccessDeniedException" || refusedCredentials(code):
		return fmt.Errorf("%s: %w: %s", what, drivers.ErrInvalidConfiguration, said)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// refusedCredentials reports whether an API error code says AWS refused the
// credentials the call was signed with (unknown, badly signed, or an
// expired session token), in each protocol's words: EKS and SQS (JSON),
// Auto Scaling and STS (query), EC2.
func refusedCredentials(code string) bool {
	switch code {
	case "UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException", // JSON
		"InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken", // query
		"AuthFailure", "RequestExpired": // EC2
		return true
	}
	return false
}
