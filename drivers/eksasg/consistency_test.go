package eksasg

import (
	"context"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// justLaunched stands in front of moto for what moto does not model: EC2's
// eventual consistency. Auto Scaling lists an instance it has just launched
// before EC2's DescribeInstances knows its id, and DescribeInstances
// refuses a whole call naming an id it does not know
// (InvalidInstanceID.NotFound).
type justLaunched struct {
	awscloud.AutoScaling
	mu    sync.Mutex
	group string
	id    string
}

func (j *justLaunched) DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	out, err := j.AutoScaling.DescribeAutoScalingGroups(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range out.AutoScalingGroups {
		g := &out.AutoScalingGroups[i]
		if aws.ToString(g.AutoScalingGroupName) == j.group && j.id != "" {
			g.Instances = append(g.Instances, asgtypes.Instance{InstanceId: aws.String(j.id), AvailabilityZone: aws.String("us-east-1a"),
				InstanceType: aws.String("t3.large"), LifecycleState: asgtypes.LifecycleStatePending, HealthStatus: aws.String("Healthy"),
				LaunchTemplate: g.LaunchTemplate})
			g.DesiredCapacity = aws.Int32(aws.ToInt32(g.DesiredCapacity) + 1)
		}
	}
	return out, nil
}

// TestAnInstanceEC2DoesNotKnowYetFailsNoGroup: an instance Auto Scaling
// lists and EC2 does not describe yet (its launch a moment ago) is in its
// group's status, without a name until EC2 knows it, and neither its own
// group nor the other groups of the region fail for it. Before, the one
// DescribeInstances of the region's look failed with
// InvalidInstanceID.NotFound, and with it every NodeSet of the region.
func TestAnInstanceEC2DoesNotKnowYetFailsNoGroup(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	real := awscloud.SDKClients(w.endpoint)
	ahead := &justLaunched{}
	d := New(Options{Cluster: "prod", Clients: func(ctx context.Context, r string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
		asg, ec2c, err := real(ctx, r, creds)
		ahead.AutoScaling = asg
		return ahead, ec2c, err
	}})
	group := func(name string) drivers.Group {
		return drivers.Group{Name: GroupName("prod", "team-a", name), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: name, UID: types.UID("uid-" + name)},
			Class: w.class(), Replicas: 1, MaxReplicas: 3, TemplateHash: "h1"}
	}
	for _, name := range []string{"web", "db"} {
		_, err := d.EnsureGroup(ctx, group(name))
		require.NoError(t, err)
	}

	ahead.mu.Lock()
	ahead.group, ahead.id = group("web").Name, "i-0123456789abcdef0"
	ahead.mu.Unlock()
	d.invalidate(region, testCredentials)
	for _, name := range []string{"web", "db"} {
		status, err := d.EnsureGroup(ctx, group(name)) // from the region's shared look
		require.NoError(t, err, "%s: an instance EC2 does not know yet fails no group", name)
		want := 1
		if name == "web" {
			want = 2
		}
		require.Len(t, status.Machines, want, name)
		for _, m := range status.Machines {
			if m.ProviderID == "aws:///us-east-1a/i-0123456789abcdef0" {
				assert.Empty(t, m.Name, "no name until EC2 describes it: its Node waits")
				assert.Equal(t, drivers.MachinePending, m.State)
			} else {
				assert.NotEmpty(t, m.Name, "%s: the instances EC2 knows keep their names", name)
			}
		}
	}
	status, err := d.DescribeGroup(ctx, w.class(), group("web").Name)
	require.NoError(t, err, "a fresh look at the one group does not fail either")
	assert.Len(t, status.Machines, 2)
}
