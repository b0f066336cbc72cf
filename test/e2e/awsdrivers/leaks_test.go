package awsdrivers

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/test/framework"
)

// TestFailedTerminationsLeakNothing: every TerminateInstanceInAutoScalingGroup
// of a deleted NodeSet fails half way (the instance leaves the group, the
// call answers 500). "Not in the group" is not "terminated": the node
// controller asks EC2 and terminates the instances there before it lets the
// NodeSet go.
func TestFailedTerminationsLeakNothing(t *testing.T) {
	e, proxy := newFaultyEnv(t, 7)
	ctx := context.Background()
	ns := "team-leak"
	group := e.startSet("leak", ns, "web")
	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To[int32](2) })
	e.converged(ns, "web", group, 2, 90*time.Second)

	proxy.FailAction("TerminateInstanceInAutoScalingGroup", 1000, func(form url.Values) {
		// The call took the instance out of the group and failed.
		_, _ = e.asg.DetachInstances(context.Background(), &autoscaling.DetachInstancesInput{AutoScalingGroupName: aws.String(group),
			InstanceIds: []string{form.Get("InstanceId")}, ShouldDecrementDesiredCapacity: aws.Bool(true)})
	})
	require.NoError(t, e.nodesets.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "web", metav1.DeleteOptions{}))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}), "NodeSet gone")
	assert.Positive(t, proxy.Injected()["action-TerminateInstanceInAutoScalingGroup"], "the terminations did fail")
	assert.Empty(t, e.runningInstances(), "no instance outlives its NodeSet")
}

// TestOrphanInstancesAreCollectedDespiteABrokenClass: an instance tagged
// with a NodeSet that does not exist, in no group (detached before its
// group was deleted), is terminated once old enough, and so is the orphan
// group, while a class with a region that does not exist is in the same
// node controller: its scope is skipped, no one else's.
func TestOrphanInstancesAreCollectedDespiteABrokenClass(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createClass("stray-broken", func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.Region = "zz-nowhere-9" })
	e.createClass("stray-orphans")
	ghost, status := e.ghostGroup("stray-orphans", 3)
	require.Len(t, status.Machines, 3)
	id, err := awscloud.InstanceID(status.Machines[0].ProviderID)
	require.NoError(t, err)
	_, err = e.asg.DetachInstances(ctx, &autoscaling.DetachInstancesInput{AutoScalingGroupName: aws.String(ghost),
		InstanceIds: []string{id}, ShouldDecrementDesiredCapacity: aws.Bool(true)})
	require.NoError(t, err)
	require.Len(t, e.runningInstances(), 3)
	// The controllers run with --orphan-min-age=10s and a 2s interval.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := e.asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{ghost}})
		return err == nil && len(out.AutoScalingGroups) == 0 && len(e.runningInstances()) == 0, nil
	}), "the orphan group and the instance detached from it are gone; running: %v", e.runningInstances())
	assert.Contains(t, e.ctrl.Node.Logs(), "zz-nowhere-9 (NodeClass stray-broken)", "the broken class's scope was skipped, and said so")
}

// validity waits until the class's Valid condition message contains want
// and returns the condition.
func (e *env) validity(name, want string, timeout time.Duration) metav1.Condition {
	e.t.Helper()
	var last metav1.Condition
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		class, err := e.nodesets.NodesetV1alpha1().NodeClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		valid := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
		if valid == nil || valid.ObservedGeneration != class.Generation {
			return false, nil
		}
		last = *valid
		return strings.Contains(valid.Message, want), nil
	})
	require.NoError(e.t, err, "NodeClass %s: Valid is %s %q", name, last.Status, last.Message)
	assert.NotContains(e.t, last.Message, "testing", "no credential in the condition")
	return last
}

// TestEveryClassGetsAVerdict: what the issue found without one, each named
// by its field, within seconds; and a Secret made or fixed after its class
// is seen at once.
func TestEveryClassGetsAVerdict(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createClass("bad-type", func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.InstanceType = "t9.huge" })
	e.createClass("bad-region", func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.Region = "zz-nowhere-9" })
	e.createClass("bad-cluster", func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.ClusterName, s.Bootstrap = "staging", nil })
	for name, want := range map[string]string{
		"bad-type":    "spec.eksAutoscalingGroup.instanceType t9.huge: invalid configuration: InvalidInstanceType",
		"bad-region":  `spec.eksAutoscalingGroup.region: "zz-nowhere-9" is not an AWS region`,
		"bad-cluster": "spec.eksAutoscalingGroup.clusterName: EKS cluster staging does not exist in us-east-1",
	} {
		valid := e.validity(name, want, 30*time.Second)
		assert.Equal(t, metav1.ConditionFalse, valid.Status, name)
	}

	t.Log("a misnamed key never borrows the node controller's identity")
	_, err := e.kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "typo-aws"},
		Data: map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("testing"), "aws_secret_access_key": []byte("testing")}}, metav1.CreateOptions{})
	require.NoError(t, err)
	typo := framework.ASGClass("typo", region, e.network, "typo-aws")
	_, err = e.nodesets.NodesetV1alpha1().NodeClasses().Create(ctx, typo, metav1.CreateOptions{})
	require.NoError(t, err)
	valid := e.validity("typo", "spec.credentialsSecretRef: Secret nodeset-system/typo-aws has no key aws_access_key_id", 30*time.Second)
	assert.Equal(t, metav1.ConditionFalse, valid.Status)

	t.Log("fixing the Secret is seen at once")
	secret, err := e.kube.CoreV1().Secrets("nodeset-system").Get(ctx, "typo-aws", metav1.GetOptions{})
	require.NoError(t, err)
	secret.Data = awsCredentials
	_, err = e.kube.CoreV1().Secrets("nodeset-system").Update(ctx, secret, metav1.UpdateOptions{})
	require.NoError(t, err)
	start := time.Now()
	assert.Equal(t, metav1.ConditionTrue, e.validity("typo", "driver eks-asg accepts the configuration", time.Minute).Status)
	t.Logf("valid %s after the fix", time.Since(start).Round(time.Millisecond))
	e.secretSeen("typo-aws", "typo")

	t.Log("a Secret created after its class is seen at once")
	late := framework.ASGClass("late", region, e.network, "late-aws")
	_, err = e.nodesets.NodesetV1alpha1().NodeClasses().Create(ctx, late, metav1.CreateOptions{})
	require.NoError(t, err)
	valid = e.validity("late", `spec.credentialsSecretRef: reading credentials Secret nodeset-system/late-aws`, 30*time.Second)
	assert.Equal(t, metav1.ConditionFalse, valid.Status)
	assert.Never(t, func() bool {
		class, err := e.nodesets.NodesetV1alpha1().NodeClasses().Get(ctx, "late", metav1.GetOptions{})
		return err != nil || meta.IsStatusConditionTrue(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
	}, 10*time.Second, 500*time.Millisecond, "no credentials, no verdict but Valid=False")
	_, err = e.kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "late-aws"}, Data: awsCredentials}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionTrue, e.validity("late", "driver eks-asg accepts the configuration", time.Minute).Status)
	e.secretSeen("late-aws", "late")
}

// secretSeen checks that the node controller's watch of credentials
// Secrets, not a retry of the class's validation, saw the Secret change
// and had the class validated again: the retries back off, and on a busy
// machine a validation may take longer than their first intervals, so the
// time to the verdict cannot tell the two apart.
func (e *env) secretSeen(secret, class string) {
	e.t.Helper()
	seen := regexp.MustCompile(`"Credentials Secret changed; validating its NodeClasses again".* secret="nodeset-system/` +
		regexp.QuoteMeta(secret) + `" nodeclasses=\[[^\]]*"` + regexp.QuoteMeta(class) + `"`)
	assert.Regexp(e.t, seen, e.ctrl.Node.Logs(), "the watch of credentials Secrets saw %s change and enqueued NodeClass %s", secret, class)
}
