package eksmanaged

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestANodeGroupOfAnotherOwnerIsNeverTakenOver: a node group's name comes
// from the cluster, namespace and name, so a NodeSet can be handed the name
// of a node group that is not its own (the NodeSet made again under its old
// name while its old node group is still there, names cut to one prefix
// whose hashes collide, another node controller's, one made by hand).
// EnsureGroup refuses it and changes nothing in it.
func TestANodeGroupOfAnotherOwnerIsNeverTakenOver(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver()
	class := w.class()
	owner := drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "web", UID: "uid-1"}
	name := d.GroupName(owner)
	_, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: class, Replicas: 1, MaxReplicas: 5, TemplateHash: "h1"})
	require.NoError(t, err)

	handmade := d.GroupName(drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "handmade"})
	_, err = w.api.EKS.CreateNodegroup(ctx, &eks.CreateNodegroupInput{ClusterName: aws.String("prod"), NodegroupName: aws.String(handmade),
		NodeRole: aws.String("arn:aws:iam::123456789012:role/node"), Subnets: []string{w.subnet},
		ScalingConfig: &ekstypes.NodegroupScalingConfig{MinSize: aws.Int32(1), MaxSize: aws.Int32(1), DesiredSize: aws.Int32(1)}})
	require.NoError(t, err)

	staging := New(Options{Cluster: "staging", Clients: func(context.Context, string, map[string][]byte) (API, error) { return w.api, nil }})
	for _, tc := range []struct {
		name   string
		driver *Driver
		group  string
		owner  drivers.Owner
	}{
		{"the NodeSet made again (another UID)", d, name, drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "web", UID: "uid-2"}},
		{"another namespace handed the same name", d, name, drivers.Owner{Cluster: "e2e", Namespace: "team-b", Name: "web", UID: "uid-3"}},
		{"another cluster's node controller", staging, name, drivers.Owner{Cluster: "staging", Namespace: "team-a", Name: "web", UID: "uid-1"}},
		{"a node group nodeset did not make", d, handmade, drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "handmade", UID: "uid-4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := nodegroup(t, w.api.EKS, tc.group)
			status, err := tc.driver.EnsureGroup(ctx, drivers.Group{Name: tc.group, Owner: tc.owner, Class: class,
				Replicas: 4, MaxReplicas: 5, TemplateHash: "h2", Labels: map[string]string{"tier": "intruder"}})
			assert.Error(t, err, "the node group belongs to someone else")
			assert.Empty(t, status.Machines)
			after := nodegroup(t, w.api.EKS, tc.group)
			assert.Equal(t, aws.ToInt32(before.ScalingConfig.DesiredSize), aws.ToInt32(after.ScalingConfig.DesiredSize), "its size is not raised")
			assert.Equal(t, before.Labels, after.Labels)
			assert.Equal(t, awscloud.OwnerFromTagMap(before.Tags), awscloud.OwnerFromTagMap(after.Tags))
			assert.Equal(t, before.Tags[awscloud.TagTemplateHash], after.Tags[awscloud.TagTemplateHash])
		})
	}

	status, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: class, Replicas: 1, MaxReplicas: 5, TemplateHash: "h1"})
	require.NoError(t, err, "its own NodeSet still runs it")
	assert.EqualValues(t, 1, status.DesiredSize)
}

// TestTokensAreTheNodeSets: the idempotency token of a create names the
// NodeSet's UID, so a NodeSet made again under the same name and template
// is a new request to EKS, not a retry of its predecessor's.
func TestTokensAreTheNodeSets(t *testing.T) {
	group := drivers.Group{Name: strings.Repeat("g", 100), TemplateHash: "abcdef1234",
		Owner: drivers.Owner{Namespace: "team-a", Name: "web", UID: "6f1c3b9e-0d4e-4c8f-9a51-2b7d8e0f1a23"}}
	first := token(group)
	assert.LessOrEqual(t, len(first), 64, "EKS's limit")
	assert.Equal(t, first, token(group), "the same for a retry")
	group.Owner.UID = "0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d"
	assert.NotEqual(t, first, token(group), "another for the NodeSet made again")
}
