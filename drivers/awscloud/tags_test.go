package awscloud

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
)

// TestCheckOwnerNamesNoOtherTenantsSet: the refusal of a group that is
// another's goes to the asking NodeSet's status and Events, which its
// tenant reads. It names the owner only when that is a NodeSet of the
// same cluster and namespace; another namespace's or cluster's NodeSet is
// said to be one, and nothing of it shows.
func TestCheckOwnerNamesNoOtherTenantsSet(t *testing.T) {
	want := drivers.Owner{Cluster: "prod", Namespace: "team-b", Name: "web", UID: "uid-b"}
	tests := []struct {
		name    string
		have    drivers.Owner
		says    string
		unnamed []string
	}{
		{name: "another namespace's set", have: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "payroll", UID: "uid-a"},
			says: "belongs to a NodeSet of another namespace, not to NodeSet team-b/web (UID uid-b) of cluster prod", unnamed: []string{"team-a", "payroll", "uid-a"}},
		{name: "another cluster's set", have: drivers.Owner{Cluster: "staging", Namespace: "team-b", Name: "web", UID: "uid-s"},
			says: "belongs to a NodeSet of another cluster", unnamed: []string{"staging", "uid-s"}},
		{name: "the set's predecessor", have: drivers.Owner{Cluster: "prod", Namespace: "team-b", Name: "web", UID: "uid-old"},
			says: "belongs to NodeSet team-b/web (UID uid-old) of cluster prod, not to NodeSet team-b/web (UID uid-b)"},
		{name: "another set of the namespace", have: drivers.Owner{Cluster: "prod", Namespace: "team-b", Name: "api", UID: "uid-api"},
			says: "belongs to NodeSet team-b/api (UID uid-api) of cluster prod"},
		{name: "a group made by hand", have: drivers.Owner{}, says: "nodeset did not make it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckOwner("node group", "nodeset-prod-team-b-web", tt.have, want)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.says)
			for _, s := range tt.unnamed {
				assert.NotContains(t, err.Error(), s)
			}
		})
	}
	assert.NoError(t, CheckOwner("node group", "nodeset-prod-team-b-web", want, want))
}
