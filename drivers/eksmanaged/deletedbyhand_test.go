package eksmanaged

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
)

// deletedByHandEKS is EKS when someone deletes the node group between the
// driver's DescribeNodegroup and its update: the update finds it gone.
type deletedByHandEKS struct {
	*fakeEKS
}

func (e deletedByHandEKS) gone(name string) error {
	e.call(name)
	delete(e.groups, "ng")
	return &smithy.GenericAPIError{Code: "ResourceNotFoundException", Message: "No node group found for name: ng.", Fault: smithy.FaultClient}
}

func (e deletedByHandEKS) UpdateNodegroupConfig(context.Context, *eks.UpdateNodegroupConfigInput, ...func(*eks.Options)) (*eks.UpdateNodegroupConfigOutput, error) {
	return nil, e.gone("UpdateNodegroupConfig")
}

func (e deletedByHandEKS) UpdateNodegroupVersion(context.Context, *eks.UpdateNodegroupVersionInput, ...func(*eks.Options)) (*eks.UpdateNodegroupVersionOutput, error) {
	return nil, e.gone("UpdateNodegroupVersion")
}

// TestANodeGroupDeletedByHandIsNoRefusedTemplate: a node group deleted by
// hand after the driver described it answers its update
// ResourceNotFoundException. That is no refusal of the NodeSet's template
// (which would be recorded as refused, with ReplicaFailure, and tried
// again only a minute later), nor a failed termination once the instance
// is gone with it: the next sync finds the node group gone and makes it
// again.
func TestANodeGroupDeletedByHandIsNoRefusedTemplate(t *testing.T) {
	ctx := context.Background()
	w, fake, _ := managedWorld(t)
	d := New(Options{Cluster: "e2e", Clients: func(context.Context, string, map[string][]byte) (API, error) {
		return API{EKS: deletedByHandEKS{fake}, AutoScaling: w.api.AutoScaling, EC2: w.api.EC2}, nil
	}})
	status, err := d.DescribeGroup(ctx, w.class(), "ng")
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	ng := *fake.groups["ng"]

	for what, group := range map[string]drivers.Group{
		"UpdateNodegroupConfig": {Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 3, MaxReplicas: 5, TemplateHash: "h2"},
		"UpdateNodegroupVersion": {Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 2, MaxReplicas: 5, TemplateHash: "h2",
			ManagedRollout: true},
	} {
		copied := ng
		fake.groups["ng"], fake.calls = &copied, nil
		_, err := d.EnsureGroup(ctx, group)
		require.Error(t, err, what)
		assert.NotErrorIs(t, err, drivers.ErrInvalidConfiguration, "%s: a node group gone is no refusal of the template", what)
		assert.ErrorContains(t, err, "ResourceNotFoundException", what)
		require.Contains(t, fake.calls, what, "the test reached the update")
	}

	copied := ng
	fake.groups["ng"], fake.calls = &copied, nil
	require.NoError(t, d.TerminateMachine(ctx, w.class(), "ng", status.Machines[0].ProviderID),
		"the instance is terminated; its node group, gone, has nothing to lower")
	require.Contains(t, fake.calls, "UpdateNodegroupConfig", "the test reached the lowering")
	assert.Nil(t, fake.groups["ng"])
}
