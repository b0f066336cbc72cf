package eksasg

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// activityReads counts the DescribeScalingActivities calls that reach
// Auto Scaling.
type activityReads struct {
	awscloud.AutoScaling
	mu    *sync.Mutex
	reads *int
}

func (a activityReads) DescribeScalingActivities(ctx context.Context, in *autoscaling.DescribeScalingActivitiesInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.DescribeScalingActivitiesOutput, error) {
	a.mu.Lock()
	*a.reads++
	a.mu.Unlock()
	return a.AutoScaling.DescribeScalingActivities(ctx, in, opts...)
}

// TestAShortGroupsActivitiesAreReadOncePerLook: a group that runs short
// and asks for more than its NodeSet needs has its scaling activities
// read for two things, its lowering (lowerUnlaunched) and its status
// message (withLaunchFailure); one read serves both, once per
// PollInterval, whether the group is lowered (a launch failed) or not (a
// launch on its way).
func TestAShortGroupsActivitiesAreReadOncePerLook(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	real := awscloud.SDKClients(w.endpoint)
	for _, tc := range []struct {
		name      string
		launching bool
		desired   int32
		message   string
	}{
		{"lowered: the launch failed", false, 2, "1 of 2 instances run"},
		{"not lowered: a launch on its way", true, 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			var mu sync.Mutex
			reads := 0
			short := &shortOfCapacity{capacity: 1, wanted: map[string]int32{}}
			d := New(Options{Cluster: "prod", PollInterval: time.Minute, Now: func() time.Time { return now },
				Clients: func(ctx context.Context, r string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
					asg, ec2c, err := real(ctx, r, creds)
					short.AutoScaling = asg
					var wrapped awscloud.AutoScaling = short
					if tc.launching {
						wrapped = launching{short}
					}
					return activityReads{wrapped, &mu, &reads}, ec2c, err
				}})
			name := "web"
			if tc.launching {
				name = "jobs"
			}
			group := drivers.Group{Name: GroupName("prod", "team-a", name), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: name},
				Class: w.class(), Replicas: 3, MaxReplicas: 3, TemplateHash: "h1"}
			status, err := d.EnsureGroup(ctx, group)
			require.NoError(t, err)
			require.Len(t, status.Machines, 1)

			group.Replicas = 2
			for look := range 3 {
				now = now.Add(time.Minute) // every look stale
				mu.Lock()
				reads = 0
				mu.Unlock()
				status, err = d.EnsureGroup(ctx, group)
				require.NoError(t, err)
				assert.EqualValues(t, tc.desired, status.DesiredSize, "look %d", look)
				if tc.message != "" {
					assert.Contains(t, status.Message, tc.message, "look %d", look)
				}
				mu.Lock()
				assert.Equal(t, 1, reads, "look %d: one read of the activities serves the lowering and the message", look)
				mu.Unlock()
			}
		})
	}
}
