package awsdrivers

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/drivers/eksmanaged"
)

// managedClass makes EKS cluster "prod" in moto and NodeClass "managed" of
// eks-managed for it, and returns a client of moto's own (not through a
// test's fault proxy).
func (e *env) managedClass() eksmanaged.API {
	t := e.t
	t.Helper()
	ctx := context.Background()
	api, err := eksmanaged.SDKClients(awscloud.SDKConfig{Endpoint: e.endpoint})(ctx, region, awsCredentials)
	require.NoError(t, err)
	_, err = api.EKS.(*eks.Client).CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String("prod"),
		RoleArn: aws.String("arn:aws:iam::123456789012:role/eks"), ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{e.subnet}}})
	require.NoError(t, err)
	_, err = e.kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "managed-aws"}, Data: awsCredentials}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) { // made by an earlier test, with the same credentials
		require.NoError(t, err)
	}
	_, err = e.nodesets.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "managed"},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver:               nodesetv1alpha1.DriverEKSManaged,
			CredentialsSecretRef: &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "managed-aws"},
			DriverSections: nodesetv1alpha1.DriverSections{EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{
				ClusterName: "prod", Region: region, NodeRole: "arn:aws:iam::123456789012:role/node", Subnets: []string{e.subnet},
				InstanceTypes: []string{"t3.large"}, Labels: map[string]string{"pool": "managed"},
			}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return api
}

// managedSet makes namespace ns and in it NodeSet name of class "managed"
// (managedClass), with Managed rollouts and label tier=<name>, and returns
// the name of its node group.
func (e *env) managedSet(ns, name string, replicas int32) string {
	t := e.t
	t.Helper()
	ctx := context.Background()
	_, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = e.nodesets.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "managed", Replicas: ptr.To(replicas),
			Strategy: nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.ManagedStrategy},
			Template: nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"tier": name}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return drivers.GroupNameWithin(drivers.Owner{Cluster: cluster, Namespace: ns, Name: name}, 63)
}

// TestManagedNodeGroupLifecycle: a NodeSet of an eks-managed class is one
// node group in moto, created, scaled, relabelled, retainted and deleted with
// it. (moto launches no instances for node groups: the instance side is
// tested with a fake in drivers/eksmanaged.)
func TestManagedNodeGroupLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	api := e.managedClass()
	ns := "team-managed"
	name := e.managedSet(ns, "api", 2)

	nodegroupIs := func(what string, ok func(*ekstypes.Nodegroup) bool) {
		t.Helper()
		var last string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			out, err := api.EKS.DescribeNodegroup(ctx, &eks.DescribeNodegroupInput{ClusterName: aws.String("prod"), NodegroupName: aws.String(name)})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			ng := out.Nodegroup
			last = fmt.Sprintf("desired %d, labels %v, taints %d", aws.ToInt32(ng.ScalingConfig.DesiredSize), ng.Labels, len(ng.Taints))
			return ok(ng), nil
		})
		require.NoError(t, err, "%s: %s", what, last)
	}
	nodegroupIs("created with 2", func(ng *ekstypes.Nodegroup) bool {
		return aws.ToInt32(ng.ScalingConfig.DesiredSize) == 2 && ng.Labels["tier"] == "api" && ng.Labels["pool"] == "managed" &&
			ng.Tags[awscloud.TagNodeSet] == "api"
	})
	// The node controller records the group in the set's status after the
	// cloud call that made it: on a busy machine, a moment later.
	var set *nodesetv1alpha1.NodeSet
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		set, err = e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "api", metav1.GetOptions{})
		return err == nil && set.Status.Group != nil, nil
	})
	require.NoError(t, err, "status.group of the set: %+v", set)
	assert.Equal(t, name, set.Status.Group.Name)
	assert.Contains(t, set.Finalizers, nodesetv1alpha1.FinalizerGroup)

	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		set, err = e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "api", metav1.GetOptions{})
		return err == nil && set.Status.TemplateHash != "" && set.Status.Group.TemplateHash == set.Status.TemplateHash, nil
	})
	require.NoError(t, err, "the node group made with the set's template says so in status.group.templateHash: %+v", set.Status)
	created := set.Status.TemplateHash

	e.update(ns, "api", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To[int32](4) })
	nodegroupIs("scaled to 4", func(ng *ekstypes.Nodegroup) bool { return aws.ToInt32(ng.ScalingConfig.DesiredSize) == 4 })

	e.update(ns, "api", func(s *nodesetv1alpha1.NodeSet) {
		s.Spec.Template.Labels = map[string]string{"tier": "backend"}
		s.Spec.Template.Taints = []nodesetv1alpha1.Taint{{Key: "tier", Value: "backend", Effect: "NoSchedule"}}
	})
	nodegroupIs("relabelled and tainted", func(ng *ekstypes.Nodegroup) bool {
		return ng.Labels["tier"] == "backend" && len(ng.Taints) == 1 && aws.ToString(ng.Taints[0].Key) == "tier" &&
			ng.Taints[0].Effect == ekstypes.TaintEffectNoSchedule
	})
	// The set's rollout is done only once the group has taken its new
	// template (strategy Managed): while status.group.templateHash names
	// another, Progressing says GroupUpdating, never Complete. (moto does
	// not tag node groups after their creation, so here the group never
	// says it has: its TagResource answers ResourceNotFoundException, which
	// the node controller retries and does not take for a refusal of the
	// template.)
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		set, err = e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "api", metav1.GetOptions{})
		return err == nil && set.Status.ObservedGeneration == set.Generation && set.Status.TemplateHash != created, nil
	})
	require.NoError(t, err, "the edit observed: %+v", set.Status)
	if progressing := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetProgressing); set.Status.Group.TemplateHash != set.Status.TemplateHash {
		require.NotNil(t, progressing)
		assert.Equal(t, "GroupUpdating", progressing.Reason, "%s", progressing.Message)
	}
	t.Log("moto's refusal to tag is retried, never recorded as a refused template")
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		set, err = e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "api", metav1.GetOptions{})
		return err == nil && set.Status.Group != nil && strings.Contains(set.Status.Group.Message, "TagResource"), nil
	}), "the tag was tried: %+v", set.Status.Group)
	assert.Empty(t, set.Status.Group.RefusedTemplateHash, "%s", set.Status.Group.Message)
	progressing := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetProgressing)
	require.NotNil(t, progressing)
	assert.NotEqual(t, "GroupUpdateFailed", progressing.Reason, "%s", progressing.Message)

	require.NoError(t, e.nodesets.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "api", metav1.DeleteOptions{}))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "api", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}), "the NodeSet goes once its node group is gone")
	_, err = api.EKS.DescribeNodegroup(ctx, &eks.DescribeNodegroupInput{ClusterName: aws.String("prod"), NodegroupName: aws.String(name)})
	assert.True(t, awscloud.IsCode(err, "ResourceNotFoundException"), "the node group is deleted: %v", err)
}

// nodegroups are the node groups of cluster "prod", each with its desired
// size.
func nodegroups(ctx context.Context, api eksmanaged.API) (map[string]int32, error) {
	out, err := api.EKS.ListNodegroups(ctx, &eks.ListNodegroupsInput{ClusterName: aws.String("prod")})
	if err != nil {
		return nil, err
	}
	sizes := map[string]int32{}
	for _, ng := range out.Nodegroups {
		d, err := api.EKS.DescribeNodegroup(ctx, &eks.DescribeNodegroupInput{ClusterName: aws.String("prod"), NodegroupName: aws.String(ng)})
		if err != nil {
			return nil, err
		}
		sizes[ng] = aws.ToInt32(d.Nodegroup.ScalingConfig.DesiredSize)
	}
	return sizes, nil
}

// oneNodeGroup waits for cluster "prod" to have one node group, group, of
// size, recorded so in the status of NodeSet ns/set.
func (e *env) oneNodeGroup(api eksmanaged.API, ns, set, group string, size int32, what string) {
	e.t.Helper()
	ctx := context.Background()
	want := fmt.Sprintf("status.group %s of %d", group, size)
	e.waitFor(fmt.Sprintf("%s: one node group of %d, in the set's status", what, size), 3*time.Minute, func() (bool, string) {
		sizes, err := nodegroups(ctx, api)
		if err != nil {
			return false, err.Error()
		}
		s, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, set, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		recorded := "no status.group"
		if g := s.Status.Group; g != nil && g.DesiredSize != nil {
			recorded = fmt.Sprintf("status.group %s of %d", g.Name, *g.DesiredSize)
		}
		return maps.Equal(sizes, map[string]int32{group: size}) && recorded == want, fmt.Sprintf("node groups %v, %s", sizes, recorded)
	})
}

// deleteManagedSet deletes NodeSet ns/set and waits for it to be gone,
// with every node group of cluster "prod".
func (e *env) deleteManagedSet(api eksmanaged.API, ns, set string) {
	e.t.Helper()
	ctx := context.Background()
	require.NoError(e.t, e.nodesets.NodesetV1alpha1().NodeSets(ns).Delete(ctx, set, metav1.DeleteOptions{}))
	e.waitFor("the set gone, with its node group", 3*time.Minute, func() (bool, string) {
		_, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, set, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("the NodeSet: %v", err)
		}
		sizes, err := nodegroups(ctx, api)
		return err == nil && len(sizes) == 0, fmt.Sprintf("node groups %v (%v)", sizes, err)
	})
}
