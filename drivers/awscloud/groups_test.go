package awscloud

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInstanceIDReadsProviderID(t *testing.T) {
	for _, tc := range []struct {
		name, providerID, want string
	}{
		{name: "written by ProviderID", providerID: ProviderID("us-east-1a", "i-0123456789abcdef0"), want: "i-0123456789abcdef0"},
		{name: "no zone", providerID: "aws:////i-0abc", want: "i-0abc"},
		{name: "another provider", providerID: "docker:///m-1"},
		{name: "not an instance id", providerID: "aws:///us-east-1a/vol-0abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := InstanceID(tc.providerID)
			if tc.want == "" {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
