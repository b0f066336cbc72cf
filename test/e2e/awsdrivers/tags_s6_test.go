package awsdrivers

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/drivers/eksasg"
	"nodeset.dev/nodeset/test/framework"
)

// TestATenantsTagsNeverHandItsGroupToAnotherProgram: a class that lets
// tenants add tags (tenantOverrides: tags) puts them on the group and, by
// propagation, its instances. With no webhook, a NodeSet whose tags would
// have cluster-autoscaler's auto-discovery take its group (and raise it past
// the limits the class's tenants share) is Accepted=False naming the tag,
// and no group is made for it; a tag of the tenant's own reaches its group.
func TestATenantsTagsNeverHandItsGroupToAnotherProgram(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, err := e.kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tags-s6-aws"}, Data: awsCredentials}, metav1.CreateOptions{})
	require.NoError(t, err)
	class := framework.ASGClass("tags-s6", region, e.network, "tags-s6-aws")
	class.Spec.TenantOverrides = []string{"tags"}
	_, err = e.nodesets.NodesetV1alpha1().NodeClasses().Create(ctx, class, metav1.CreateOptions{})
	require.NoError(t, err)
	// A set's first verdict comes at once; before the class is validated it
	// is Accepted=False for that alone.
	e.waitValid(t, "tags-s6", metav1.ConditionTrue)
	ns := "team-tags"
	_, err = e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	e.withoutWebhook(ns)
	create := func(name string, tags map[string]string) {
		_, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "tags-s6", Replicas: ptr.To[int32](1),
				DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{Tags: tags}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	accepted := func(name string) *metav1.Condition {
		var cond *metav1.Condition
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			set, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			cond = meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			return cond != nil && cond.ObservedGeneration == set.Generation, nil
		})
		require.NoError(t, err, "NodeSet %s/%s gets no verdict", ns, name)
		return cond
	}

	create("own", map[string]string{"team": "a"})
	create("discovered", map[string]string{"k8s.io/cluster-autoscaler/enabled": "true", "k8s.io/cluster-autoscaler/prod": "owned"})

	refused := accepted("discovered")
	assert.Equal(t, metav1.ConditionFalse, refused.Status, "a NodeSet whose group cluster-autoscaler would take: %s", refused.Message)
	assert.Contains(t, refused.Message, `spec.eksAutoscalingGroup.tags key "k8s.io/cluster-autoscaler/enabled"`)
	assert.Contains(t, refused.Message, `spec.eksAutoscalingGroup.tags key "k8s.io/cluster-autoscaler/prod"`)

	own := eksasg.GroupName(cluster, ns, "own")
	ownVerdict := accepted("own")
	require.Equal(t, metav1.ConditionTrue, ownVerdict.Status, "%s: %s", ownVerdict.Reason, ownVerdict.Message)
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := e.asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{own}})
		return err == nil && len(out.AutoScalingGroups) == 1, err
	})
	require.NoError(t, err, "the tenant's own tag: its group is made")
	out, err := e.asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{own}})
	require.NoError(t, err)
	assert.Equal(t, "a", awscloud.GroupTag(&out.AutoScalingGroups[0], "team"))

	// Every group of this cluster's: none is the refused set's, and none
	// carries cluster-autoscaler's tags.
	all, err := e.asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{})
	require.NoError(t, err)
	for i := range all.AutoScalingGroups {
		g := &all.AutoScalingGroups[i]
		assert.NotEqual(t, eksasg.GroupName(cluster, ns, "discovered"), aws.ToString(g.AutoScalingGroupName))
		assert.Empty(t, awscloud.GroupTag(g, "k8s.io/cluster-autoscaler/enabled"), "group %s", aws.ToString(g.AutoScalingGroupName))
	}
	set, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "discovered", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		require.NoError(t, err)
		assert.Nil(t, set.Status.Group, "no group was tried for the refused set")
	}
}

// withoutWebhook unregisters the NodeSet webhook until the test ends, and
// waits until the API server admits, in namespace, a NodeSet of a class
// that does not exist: only the webhook refuses one.
func (e *env) withoutWebhook(namespace string) {
	e.t.Helper()
	ctx := context.Background()
	hooks := e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	saved, err := hooks.Get(ctx, "nodeset.dev", metav1.GetOptions{})
	require.NoError(e.t, err)
	require.NoError(e.t, hooks.Delete(ctx, saved.Name, metav1.DeleteOptions{}))
	e.t.Cleanup(func() {
		_, err := hooks.Create(context.Background(), &admissionv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: saved.Name, Labels: saved.Labels}, Webhooks: saved.Webhooks}, metav1.CreateOptions{})
		assert.NoError(e.t, err, "the webhook is registered again")
	})
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		probe := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe", Namespace: namespace},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "no-such-class-for-the-probe", Replicas: ptr.To[int32](0)}}
		if _, err := e.nodesets.NodesetV1alpha1().NodeSets(namespace).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
			return false, nil
		}
		return true, e.nodesets.NodesetV1alpha1().NodeSets(namespace).Delete(ctx, probe.Name, metav1.DeleteOptions{})
	})
	require.NoError(e.t, err, "the API server has dropped the webhook")
}
