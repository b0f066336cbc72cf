package awsdrivers

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/drivers/eksasg"
	"nodeset.dev/nodeset/test/framework"
)

// TestARecreatedNodeSetNeverRunsOnItsPredecessorsGroup: a NodeSet deleted
// with its finalizers removed by hand leaves its group behind; made again
// under the same name (a new UID), it is handed the same group name. The
// old group is an orphan (its NodeSet's UID is gone) and the orphan
// collection deletes it with its instances: none of them may ever be a
// Node of the new NodeSet, which gets a group of its own once the old one
// is gone.
func TestARecreatedNodeSetNeverRunsOnItsPredecessorsGroup(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.kubelets(ctx)
	ns, name := "team-again", "web"
	e.createClass("again")

	// The group the NodeSet's predecessor left.
	driver := eksasg.New(eksasg.Options{Cluster: cluster, Clients: awscloud.SDKClients(e.endpoint)})
	spec := framework.ASGClass("again", region, e.network, "").Spec
	spec.CredentialsSecretRef = nil
	group := eksasg.GroupName(cluster, ns, name)
	old, err := driver.EnsureGroup(ctx, drivers.Group{Name: group, Owner: drivers.Owner{Cluster: cluster, Namespace: ns, Name: name, UID: "uid-before"},
		Class: drivers.Class{Name: "again", Credentials: awsCredentials, Spec: spec}, Replicas: 2, MaxReplicas: 2, TemplateHash: "h"})
	require.NoError(t, err)
	require.Len(t, old.Machines, 2)
	predecessors := map[string]bool{}
	for _, m := range old.Machines {
		predecessors[m.ProviderID] = true
	}

	set := e.createSet(ns, name, "again", 1)
	adopted := map[string]string{}
	e.waitFor("the new NodeSet on a group of its own", 2*time.Minute, func() (bool, string) {
		for _, n := range e.setNodes(ns, name) {
			if predecessors[n.Spec.ProviderID] {
				adopted[n.Spec.ProviderID] = n.Name
			}
		}
		out, err := e.asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{group}})
		if err != nil || len(out.AutoScalingGroups) == 0 {
			return false, "no group"
		}
		owner := awscloud.OwnerFromTags(out.AutoScalingGroups[0].Tags)
		live := 0
		for _, i := range out.AutoScalingGroups[0].Instances {
			if predecessors[awscloud.ProviderID(aws.ToString(i.AvailabilityZone), aws.ToString(i.InstanceId))] {
				return false, "the old group's instances still there"
			}
			live++
		}
		return owner.UID == set.UID && live == 1 && len(e.setNodes(ns, name)) == 1, "group of " + string(owner.UID)
	})
	assert.Empty(t, adopted, "an instance of the predecessor's group became a Node of the new NodeSet")
	e.converged(ns, name, group, 1, time.Minute)

	got, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, set.UID, got.UID)
}
