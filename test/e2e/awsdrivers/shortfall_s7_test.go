package awsdrivers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestAScaleDownDuringAShortageLaunchesNothingLater: a NodeSet of 3 whose
// zone has capacity for one instance is scaled down to 1 while short.
// There is no Node to remove; the group's desired capacity goes down to 1,
// the NodeSet is no longer a ReplicaFailure, and when the capacity comes
// back no instance is launched only to be drained and terminated.
func TestAScaleDownDuringAShortageLaunchesNothingLater(t *testing.T) {
	ctx := context.Background()
	ns := "team-shortfall"
	e, zone, group, get := startShortSet(t, ns)
	var last string

	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To[int32](1) })
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		c, set := get()
		g := set.Status.Group
		last = fmt.Sprintf("ReplicaFailure %+v, group %+v", c, g)
		return c == nil && g != nil && g.DesiredSize != nil && *g.DesiredSize == 1 && g.Message == "", nil
	})
	require.NoError(t, err, "the group is lowered to what the set asks for: %s", last)

	zone.release(t, e.asg)
	e.settled(ns, "web", group, 1, 1, 60*time.Second)
	out, err := e.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + awscloud.TagNamespace), Values: []string{ns}}}})
	require.NoError(t, err)
	launched := 0
	for _, r := range out.Reservations {
		launched += len(r.Instances)
	}
	assert.Equal(t, 1, launched, "no instance launched once the capacity was back: nobody wanted it")
}
