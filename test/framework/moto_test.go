package framework

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestMotoTakesAGroupsTerminationsOneAtATime terminates every instance of
// an Auto Scaling group at once, each call lowering the desired capacity,
// as the node controller does for a NodeSet scaled to 0: the group must end
// with desired capacity 0 and no instance running, in the group or out of
// it. moto_server answers each call on its own thread, and its Auto Scaling
// model reads a group's desired capacity and instances, then writes them
// back: calls that overlap lose decrements, launch replacements and drop
// instances from their group while they run on. hack/moto-launcher.py
// answers one call at a time. Here moto pauses 20 ms between that read and
// that write, as a loaded machine does now and then, so that without the
// launcher's fix every group's terminations overlap there.
func TestMotoTakesAGroupsTerminationsOneAtATime(t *testing.T) {
	endpoint := startMoto(t, []byte(`import time
from moto.autoscaling import models as _models
_detaching = _models.DetachInstanceActivity.__init__
def _detaching_slowly(self, instance):
    time.sleep(0.02)
    _detaching(self, instance)
_models.DetachInstanceActivity.__init__ = _detaching_slowly
`))
	ctx := context.Background()
	asgc, ec2c, err := awscloud.SDKClients(endpoint)(ctx, "us-east-1", map[string][]byte{
		awscloud.CredentialAccessKeyID: []byte("AKIDMOTO"), awscloud.CredentialSecretAccessKey: []byte("secret")})
	require.NoError(t, err)
	network := NewMotoNetwork(t, ec2c.(*ec2.Client), "us-east-1")
	_, err = ec2c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String("one-at-a-time"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String(network.Image), InstanceType: ec2types.InstanceTypeT3Small}})
	require.NoError(t, err)

	const groups, size = 5, 5
	for g := range groups {
		name := fmt.Sprintf("group-%d", g)
		_, err := asgc.CreateAutoScalingGroup(ctx, &autoscaling.CreateAutoScalingGroupInput{AutoScalingGroupName: aws.String(name),
			LaunchTemplate: &asgtypes.LaunchTemplateSpecification{LaunchTemplateName: aws.String("one-at-a-time")},
			MinSize:        aws.Int32(0), MaxSize: aws.Int32(size), DesiredCapacity: aws.Int32(size), VPCZoneIdentifier: aws.String(network.Subnet)})
		require.NoError(t, err)
		described, err := asgc.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
		require.NoError(t, err)
		require.Len(t, described.AutoScalingGroups[0].Instances, size)
		var wg sync.WaitGroup
		for _, i := range described.AutoScalingGroups[0].Instances {
			wg.Go(func() {
				_, err := asgc.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
					InstanceId: i.InstanceId, ShouldDecrementDesiredCapacity: aws.Bool(true)})
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		described, err = asgc.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
		require.NoError(t, err)
		running, err := ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{
			Name: aws.String("instance-state-name"), Values: []string{"pending", "running"}}}})
		require.NoError(t, err)
		require.Equal(t, int32(0), aws.ToInt32(described.AutoScalingGroups[0].DesiredCapacity), "%s: desired capacity", name)
		require.Empty(t, described.AutoScalingGroups[0].Instances, "%s: instances in the group", name)
		require.Empty(t, running.Reservations, "%s: instances running", name)
	}
}

// TestMotoTracebacksAreCutFromItsLog: what a failed AWS test logs of moto's
// log is its last tracebacks, not its request lines.
func TestMotoTracebacksAreCutFromItsLog(t *testing.T) {
	log := strings.Join([]string{
		`127.0.0.1 - - [28/Nov/2026 10:00:00] "POST / HTTP/1.1" 200 -`,
		"Traceback (most recent call last):",
		`  File "models.py", line 1, in first`,
		"KeyError: 'a'",
		`127.0.0.1 - - [28/Nov/2026 10:00:01] "POST / HTTP/1.1" 500 -`,
		"Traceback (most recent call last):",
		`  File "models.py", line 1915, in terminate_instance`,
		"    instance_state = next(",
		"StopIteration",
		`127.0.0.1 - - [28/Nov/2026 10:00:02] "POST / HTTP/1.1" 500 -`,
	}, "\n")
	require.Equal(t, "Traceback (most recent call last):\n  File \"models.py\", line 1915, in terminate_instance\n    instance_state = next(\nStopIteration",
		motoTracebacks([]byte(log), 1))
	require.Equal(t, 2, strings.Count(motoTracebacks([]byte(log), 3), "Traceback"))
	require.Empty(t, motoTracebacks([]byte(`127.0.0.1 - - "POST / HTTP/1.1" 200 -`), 3))
}
