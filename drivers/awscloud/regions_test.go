package awscloud

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestInstanceRegion(t *testing.T) {
	for _, tc := range []struct{ providerID, want string }{
		{"aws:///us-east-1a/i-0123456789abcdef0", "us-east-1"},
		{"aws:///eu-west-2c/i-0123456789abcdef0", "eu-west-2"},
		{"aws:///us-gov-west-1b/i-0123456789abcdef0", "us-gov-west-1"},
		{"aws:///us-west-2-lax-1a/i-0123456789abcdef0", "us-west-2"},
		{"aws:///us-east-1-wl1-bos-wlz-1/i-0123456789abcdef0", "us-east-1"},
		{"aws:///eusc-de-east-1a/i-0123456789abcdef0", "eusc-de-east-1"},
		{"aws:////i-0123456789abcdef0", "fallback"},
		{"docker-machine://fake/node-1", "fallback"},
	} {
		assert.Equal(t, tc.want, InstanceRegion(tc.providerID, "fallback"), tc.providerID)
	}
}
