package awsdrivers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/drivers/eksasg"
	"nodeset.dev/nodeset/test/framework"
)

// TestAGroupMadeUnderItsFormerNameIsKeptOnUpgrade: a group whose name was
// cut to fit was named, before cut names covered the NodeSet's UID, with
// 32 bits of a hash of cluster, namespace and name. A node controller of
// today finds it under the name the NodeSet's status.group.name recorded
// once it was made, goes on using it (its instances become the set's
// Nodes), and makes no second group under today's name.
func TestAGroupMadeUnderItsFormerNameIsKeptOnUpgrade(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.kubelets(ctx)
	ns := "team-upgrade-with-a-namespace-name-of-some-length"
	name := "training-pipeline-workers-of-a-name-that-is-cut-to-fit-in"
	class := "upgrade-s6"
	// The class comes last: until it exists, the set gets no group (and
	// only without the webhook is such a set admitted).
	_, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	e.withoutWebhook(ns)
	set := e.createSet(ns, name, class, 1)
	owner := drivers.Owner{Cluster: cluster, Namespace: ns, Name: name, UID: set.UID}
	base := fmt.Sprintf("nodeset-%s-%s-%s", cluster, ns, name)
	require.Greater(t, len(base), 110, "the name is cut to fit")
	sum := sha256.Sum256([]byte(cluster + "/" + ns + "/" + name))
	former := base[:110] + "-" + hex.EncodeToString(sum[:])[:8]
	current := drivers.GroupName(owner)
	require.NotEqual(t, former, current)

	// What a node controller before the change made and recorded.
	spec := framework.ASGClass(class, region, e.network, "").Spec
	spec.CredentialsSecretRef = nil
	driver := eksasg.New(eksasg.Options{Cluster: cluster, Clients: awscloud.SDKClients(e.endpoint)})
	_, err = driver.EnsureGroup(ctx, drivers.Group{Name: former, Owner: owner,
		Class: drivers.Class{Name: class, Credentials: awsCredentials, Spec: spec}, Replicas: 1, MaxReplicas: 1, TemplateHash: "former"})
	require.NoError(t, err)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if g := got.Status.Group; g != nil && g.Name == former {
			return true, nil
		}
		got.Status.Group = &nodesetv1alpha1.GroupStatus{Name: former, State: "", DesiredSize: ptr.To[int32](1)}
		// A conflict with the nodeset controller's write: again.
		_, _ = e.nodesets.NodesetV1alpha1().NodeSets(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
		return false, nil
	})
	require.NoError(t, err, "status.group.name records the former name")

	e.createClass(class)
	nodes := e.converged(ns, name, former, 1, 90*time.Second)
	for _, n := range nodes {
		assert.Equal(t, former, n.Annotations[nodesetv1alpha1.AnnotationGroup])
	}
	got, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, got.Status.Group)
	assert.Equal(t, former, got.Status.Group.Name)
	all, err := e.asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{})
	require.NoError(t, err)
	var names []string
	for _, g := range all.AutoScalingGroups {
		names = append(names, *g.AutoScalingGroupName)
	}
	assert.Equal(t, []string{former}, names, "one group, under its former name; none under %s (%s)", current, strings.Join(names, ", "))
}
