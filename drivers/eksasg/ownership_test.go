package eksasg

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestAGroupOfAnotherOwnerIsNeverTakenOver: the group name is derived from
// the cluster, namespace and name, so another NodeSet can be handed the name
// of a group that is not its own: a NodeSet deleted with its finalizer
// removed by hand and made again (a new UID: the orphan collection deletes
// the old UID's group, with whatever runs in it), names cut to the same
// prefix with a hash that collides, another node controller's group, or a
// group someone made by hand. EnsureGroup refuses such a group and changes
// nothing in it: not its size, not its launch template.
func TestAGroupOfAnotherOwnerIsNeverTakenOver(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	class := w.class()
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
	name := GroupName("prod", "team-a", "web")
	_, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: class, Replicas: 1, MaxReplicas: 5, TemplateHash: "h1"})
	require.NoError(t, err)

	// A group of the same name that nodeset did not make.
	handmade := GroupName("prod", "team-a", "handmade")
	_, err = w.ec2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String(handmade),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String(w.image), InstanceType: ec2types.InstanceTypeT3Large}})
	require.NoError(t, err)
	_, err = w.asg.CreateAutoScalingGroup(ctx, &autoscaling.CreateAutoScalingGroupInput{AutoScalingGroupName: aws.String(handmade),
		MinSize: aws.Int32(1), MaxSize: aws.Int32(1), DesiredCapacity: aws.Int32(1), VPCZoneIdentifier: aws.String(w.subnet),
		LaunchTemplate: &asgtypes.LaunchTemplateSpecification{LaunchTemplateName: aws.String(handmade), Version: aws.String("$Latest")}})
	require.NoError(t, err)

	for _, tc := range []struct {
		name   string
		driver *Driver
		group  string
		owner  drivers.Owner
		hash   string
	}{
		{"the NodeSet made again (another UID), same template", d, name, drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-2"}, "h1"},
		{"the NodeSet made again (another UID), another template", d, name, drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-2"}, "h2"},
		{"another namespace handed the same name", d, name, drivers.Owner{Cluster: "prod", Namespace: "team-b", Name: "web", UID: "uid-3"}, "h1"},
		{"another cluster's node controller", w.driver("staging"), name, drivers.Owner{Cluster: "staging", Namespace: "team-a", Name: "web", UID: "uid-1"}, "h3"},
		{"a group nodeset did not make", d, handmade, drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "handmade", UID: "uid-4"}, "h4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := w.describe(t, tc.group)
			versions := w.templateVersions(t, tc.group)
			_, err := tc.driver.EnsureGroup(ctx, drivers.Group{Name: tc.group, Owner: tc.owner, Class: class,
				Replicas: 4, MaxReplicas: 5, TemplateHash: tc.hash, Labels: map[string]string{"tier": "intruder"}})
			require.Error(t, err, "the group belongs to someone else")
			assert.Contains(t, err.Error(), tc.group)
			after := w.describe(t, tc.group)
			assert.Equal(t, aws.ToInt32(before.DesiredCapacity), aws.ToInt32(after.DesiredCapacity), "its size is not raised")
			assert.Equal(t, aws.ToInt32(before.MaxSize), aws.ToInt32(after.MaxSize))
			assert.Equal(t, awscloud.OwnerFromTags(before.Tags), awscloud.OwnerFromTags(after.Tags))
			assert.Equal(t, versions, w.templateVersions(t, tc.group), "its launch template gets no version")

			// A request that would change nothing is refused as well: the
			// group's instances are never reported as the caller's.
			_, err = tc.driver.EnsureGroup(ctx, drivers.Group{Name: tc.group, Owner: tc.owner, Class: class,
				Replicas: 0, MaxReplicas: 5, TemplateHash: "h1"})
			require.Error(t, err)
		})
	}

	status, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: class, Replicas: 1, MaxReplicas: 5, TemplateHash: "h1"})
	require.NoError(t, err, "its own NodeSet still runs it")
	assert.EqualValues(t, 1, status.DesiredSize)
}

func (w *world) describe(t *testing.T, name string) *asgtypes.AutoScalingGroup {
	t.Helper()
	g, err := awscloud.FindGroup(context.Background(), w.asg, name)
	require.NoError(t, err)
	return g
}

func (w *world) templateVersions(t *testing.T, name string) int {
	t.Helper()
	out, err := w.ec2.DescribeLaunchTemplateVersions(context.Background(), &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateName: aws.String(name)})
	require.NoError(t, err)
	return len(out.LaunchTemplateVersions)
}
