// Package awsdrivers tests the AWS group drivers (eks-asg, eks-managed) end to end: both controllers
// as processes against a real kube-apiserver, and moto_server standing in
// for EC2 and Auto Scaling. A small kubelet stand-in reports the instances'
// Nodes Ready, as the kubelets on real instances would.
package awsdrivers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/drivers/eksasg"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/test/framework"
)

func TestMain(m *testing.M) { os.Exit(framework.Run(m, framework.Options{})) }

const (
	region  = "us-east-1"
	cluster = "e2e"
)

var awsCredentials = framework.MotoCredentials

// env is one moto server, both controllers serving eks-asg against it, and
// the clients the test uses.
type env struct {
	t        *testing.T
	endpoint string
	asg      *autoscaling.Client
	ec2      *ec2.Client
	kube     kubernetes.Interface
	nodesets versioned.Interface
	ctrl     *framework.Controllers
	image    string
	subnet   string
	network  framework.MotoNetwork
}

func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// newEnvWith is newEnv with the controllers' AWS calls sent to
// through(moto's endpoint), such as a fault-injecting proxy.
func newEnvWith(t *testing.T, through func(endpoint string) string, nodeArgs ...string) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, endpoint: framework.StartMoto(t)}
	controllerEndpoint := e.endpoint
	if through != nil {
		controllerEndpoint = through(e.endpoint)
	}
	asg, ec2c, err := awscloud.SDKClients(e.endpoint)(ctx, region, awsCredentials)
	require.NoError(t, err)
	e.asg, e.ec2 = asg.(*autoscaling.Client), ec2c.(*ec2.Client)
	e.network = framework.NewMotoNetwork(t, e.ec2, region)
	e.subnet, e.image = e.network.Subnet, e.network.Image

	cfg := framework.Shared(t).AdminConfig()
	e.kube = kubernetes.NewForConfigOrDie(cfg)
	e.nodesets = versioned.NewForConfigOrDie(cfg)
	e.ctrl, err = framework.NewControllers(ctx, framework.Shared(t), framework.ControllerOptions{NodeArgs: append([]string{
		"--drivers=eks-asg,eks-managed", "--cluster-name=" + cluster, "--aws-endpoint-url=" + controllerEndpoint, "--group-poll-interval=2s",
	}, nodeArgs...)})
	require.NoError(t, err)
	e.ctrl.Node.Env = append(e.ctrl.Node.Env, "AWS_EC2_METADATA_DISABLED=true")
	require.NoError(t, e.ctrl.Start())
	framework.FailOnCrash(t, e.ctrl.NodeSet, e.ctrl.Node)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node-controller logs:\n%s", tail(e.ctrl.Node.Logs(), 80))
			t.Logf("nodeset-controller logs:\n%s", tail(e.ctrl.NodeSet.Logs(), 40))
			for _, p := range []*framework.Process{e.ctrl.Node, e.ctrl.NodeSet} {
				file := filepath.Join(framework.Shared(t).Dir, "logs", t.Name()+"-"+p.Name+".log")
				if err := os.WriteFile(file, []byte(p.Logs()), 0o644); err == nil {
					t.Logf("%s's whole log: %s", p.Name, file)
				}
			}
		}
		e.ctrl.Stop()
		e.forget()
	})
	readyCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	require.NoError(t, e.ctrl.WaitReady(readyCtx))
	return e
}

// forget removes what a test left in the shared control plane once its
// controllers are stopped: every NodeSet, the Nodes of the NodeSet API's
// classes and the classes, finalizers and all. The next test's node
// controller serves a new moto server: left there, this test's NodeSets
// would get groups and instances in it that the next test does not expect.
func (e *env) forget() {
	ctx := context.Background()
	unfinalize := []byte(`{"metadata":{"finalizers":null}}`)
	ignoreGone := func(err error) error {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	sets, err := e.nodesets.NodesetV1alpha1().NodeSets("").List(ctx, metav1.ListOptions{})
	require.NoError(e.t, err)
	for _, s := range sets.Items {
		_, err := e.nodesets.NodesetV1alpha1().NodeSets(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, unfinalize, metav1.PatchOptions{})
		assert.NoError(e.t, ignoreGone(err))
		assert.NoError(e.t, ignoreGone(e.nodesets.NodesetV1alpha1().NodeSets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})))
	}
	nodes, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodesetv1alpha1.LabelNodeClass})
	require.NoError(e.t, err)
	for _, n := range nodes.Items {
		_, err := e.kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, unfinalize, metav1.PatchOptions{})
		assert.NoError(e.t, ignoreGone(err))
		assert.NoError(e.t, ignoreGone(e.kube.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})))
	}
	classes, err := e.nodesets.NodesetV1alpha1().NodeClasses().List(ctx, metav1.ListOptions{})
	require.NoError(e.t, err)
	for _, c := range classes.Items {
		_, err := e.nodesets.NodesetV1alpha1().NodeClasses().Patch(ctx, c.Name, types.MergePatchType, unfinalize, metav1.PatchOptions{})
		assert.NoError(e.t, ignoreGone(err))
		assert.NoError(e.t, ignoreGone(e.nodesets.NodesetV1alpha1().NodeClasses().Delete(ctx, c.Name, metav1.DeleteOptions{})))
	}
	e.t.Logf("removed what the test left: %d NodeSets, %d Nodes, %d NodeClasses", len(sets.Items), len(nodes.Items), len(classes.Items))
}

// ghostGroup makes, with the eks-asg driver directly, a group of size
// instances for NodeSet gone/ghost, which does not exist: an orphan, as a
// NodeSet deleted while no node controller ran leaves. It returns the
// group's name and status.
func (e *env) ghostGroup(className string, size int32) (string, drivers.GroupStatus) {
	e.t.Helper()
	driver := eksasg.New(eksasg.Options{Cluster: cluster, Clients: awscloud.SDKClients(e.endpoint)})
	spec := framework.ASGClass(className, region, e.network, "").Spec
	spec.CredentialsSecretRef = nil
	owner := drivers.Owner{Cluster: cluster, Namespace: "gone", Name: "ghost", UID: "uid-ghost"}
	ghost := eksasg.GroupName(cluster, "gone", "ghost")
	status, err := driver.EnsureGroup(context.Background(), drivers.Group{Name: ghost, Owner: owner,
		Class: drivers.Class{Name: className, Credentials: awsCredentials, Spec: spec}, Replicas: size, MaxReplicas: size, TemplateHash: "h"})
	require.NoError(e.t, err)
	return ghost, status
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// kubelets stands in for the kubelets of the instances until ctx is done.
func (e *env) kubelets(ctx context.Context) { framework.ReportAWSNodesReady(ctx, e.kube) }

// createSet makes the namespace and a NodeSet of class with replicas.
func (e *env) createSet(namespace, name, class string, replicas int32) *nodesetv1alpha1.NodeSet {
	e.t.Helper()
	ctx := context.Background()
	_, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(e.t, err)
	}
	set, err := e.nodesets.NodesetV1alpha1().NodeSets(namespace).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: class, Replicas: ptr.To(replicas),
			Template: nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"tier": "web"}}},
	}, metav1.CreateOptions{})
	require.NoError(e.t, err)
	return set
}

func (e *env) createClass(name string, mutate ...func(*nodesetv1alpha1.EKSAutoscalingGroup)) {
	ctx := context.Background()
	_, err := e.kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-aws"},
		Data:       awsCredentials,
	}, metav1.CreateOptions{})
	require.NoError(e.t, err, "class names are unique across the package's tests: their credentials Secrets stay")
	class := framework.ASGClass(name, region, e.network, name+"-aws")
	for _, m := range mutate {
		m(class.Spec.EKSAutoscalingGroup)
	}
	_, err = e.nodesets.NodesetV1alpha1().NodeClasses().Create(ctx, class, metav1.CreateOptions{})
	require.NoError(e.t, err)
}

// instances are the group's instances that are not on their way out, by
// providerID.
func (e *env) instances(group string) (desired int32, live map[string]string, err error) {
	out, err := e.asg.DescribeAutoScalingGroups(context.Background(), &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{group}})
	if err != nil || len(out.AutoScalingGroups) == 0 {
		return 0, nil, fmt.Errorf("group %s: %v", group, err)
	}
	g := out.AutoScalingGroups[0]
	live = map[string]string{}
	for _, i := range g.Instances {
		if strings.HasPrefix(string(i.LifecycleState), "Terminat") {
			continue
		}
		live[awscloud.ProviderID(aws.ToString(i.AvailabilityZone), aws.ToString(i.InstanceId))] = string(i.LifecycleState)
	}
	return aws.ToInt32(g.DesiredCapacity), live, nil
}

// runningInstances are the ids of the instances EC2 has running or pending,
// in any group or none.
func (e *env) runningInstances() []string {
	out, err := e.ec2.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{
		Name: aws.String("instance-state-name"), Values: []string{"pending", "running"}}}})
	require.NoError(e.t, err)
	var ids []string
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			ids = append(ids, aws.ToString(i.InstanceId))
		}
	}
	sort.Strings(ids)
	return ids
}

func (e *env) setNodes(namespace, name string) []corev1.Node {
	nodes, err := e.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{
		LabelSelector: nodesetv1alpha1.LabelNodeSetNamespace + "=" + namespace + "," + nodesetv1alpha1.LabelNodeSet + "=" + name})
	require.NoError(e.t, err)
	return nodes.Items
}

// converged waits until the set has n Ready Nodes, one per live instance of
// its group, with the group's desired capacity n and nothing else running.
func (e *env) converged(namespace, name, group string, n int, timeout time.Duration) []corev1.Node {
	e.t.Helper()
	var last string
	var nodes []corev1.Node
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		nodes = e.setNodes(namespace, name)
		desired, live, err := e.instances(group)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		readyCount := 0
		byProvider := map[string]bool{}
		for _, node := range nodes {
			if nodeutil.IsReady(&node) && node.DeletionTimestamp == nil && !nodeutil.HasStartupTaint(&node) {
				readyCount++
			}
			byProvider[node.Spec.ProviderID] = true
		}
		matched := len(byProvider) == len(live)
		for id := range live {
			matched = matched && byProvider[id]
		}
		last = fmt.Sprintf("%d Nodes (%d Ready, registered), desired capacity %d, %d live instances, Nodes match instances: %v",
			len(nodes), readyCount, desired, len(live), matched)
		return len(nodes) == n && readyCount == n && desired == int32(n) && len(live) == n && matched, nil
	})
	require.NoError(e.t, err, "NodeSet %s/%s converging on %d: %s", namespace, name, n, last)
	return nodes
}

func (e *env) update(namespace, name string, mutate func(*nodesetv1alpha1.NodeSet)) {
	e.t.Helper()
	require.NoError(e.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		set, err := e.nodesets.NodesetV1alpha1().NodeSets(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(set)
		_, err = e.nodesets.NodesetV1alpha1().NodeSets(namespace).Update(context.Background(), set, metav1.UpdateOptions{})
		return err
	}))
}

func providerIDs(nodes []corev1.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Spec.ProviderID)
	}
	sort.Strings(out)
	return out
}

func instanceIDs(t *testing.T, providerIDs []string) []string {
	var out []string
	for _, p := range providerIDs {
		id, err := awscloud.InstanceID(p)
		require.NoError(t, err)
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// TestAutoScalingGroupLifecycle takes one NodeSet through its whole life on
// moto: 0→3→1 with chosen victims, a kubelet that registers first after a
// node-controller crash, a template change rolled out, and deletion.
func TestAutoScalingGroupLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ns := "team-asg"
	group := e.startSet("asg", ns, "web")

	t.Log("0 -> 3")
	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To[int32](3) })
	nodes := e.converged(ns, "web", group, 3, 90*time.Second)
	for _, n := range nodes {
		assert.Regexp(t, `^aws:///us-east-1a/i-[0-9a-f]+$`, n.Spec.ProviderID)
		assert.Regexp(t, `^ip-10-0-1-\d+\.ec2\.internal$`, n.Name, "the Node is named as EC2 named the instance")
		assert.Equal(t, "web", n.Labels["tier"])
		assert.Equal(t, "asg", n.Labels[nodesetv1alpha1.LabelNodeClass])
		assert.Equal(t, group, n.Annotations[nodesetv1alpha1.AnnotationGroup])
		assert.Contains(t, n.Finalizers, nodesetv1alpha1.FinalizerTermination)
	}
	got, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, got.Status.Group)
	assert.Equal(t, group, got.Status.Group.Name)
	assert.Contains(t, got.Finalizers, nodesetv1alpha1.FinalizerGroup)
	hash := got.Status.TemplateHash
	for _, n := range nodes {
		assert.Equal(t, hash, n.Labels[nodesetv1alpha1.LabelTemplateHash], "instances carry their launch template version's hash")
	}

	t.Log("3 -> 1, the two chosen Nodes go")
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	chosen := []string{nodes[0].Spec.ProviderID, nodes[2].Spec.ProviderID}
	keep := nodes[1].Spec.ProviderID
	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) {
		s.Spec.Replicas = ptr.To[int32](1)
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[nodesetv1alpha1.AnnotationDeleteNodes] = nodes[0].Name + "," + nodes[2].Name
	})
	nodes = e.converged(ns, "web", group, 1, 90*time.Second)
	assert.Equal(t, []string{keep}, providerIDs(nodes), "the Node left is the one not chosen")
	assert.Equal(t, instanceIDs(t, []string{keep}), e.runningInstances(), "the chosen instances were terminated, and only they")
	for _, c := range chosen {
		assert.NotContains(t, providerIDs(e.setNodes(ns, "web")), c)
	}

	t.Log("the node controller crashes after raising the group; the kubelet registers first")
	e.ctrl.Node.Kill(syscall.SIGKILL)
	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To[int32](2) })
	_, err = e.asg.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(group), DesiredCapacity: aws.Int32(2)})
	require.NoError(t, err)
	_, live, err := e.instances(group)
	require.NoError(t, err)
	require.Len(t, live, 2)
	var newcomer string
	for id := range live {
		if id != keep {
			newcomer = id
		}
	}
	id, err := awscloud.InstanceID(newcomer)
	require.NoError(t, err)
	described, err := e.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	require.NoError(t, err)
	dnsName := aws.ToString(described.Reservations[0].Instances[0].PrivateDnsName)
	now := metav1.Now()
	_, err = e.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: dnsName, Labels: map[string]string{"kubernetes.io/hostname": dnsName}},
		Spec:       corev1.NodeSpec{ProviderID: newcomer},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, e.ctrl.Node.Start())
	nodes = e.converged(ns, "web", group, 2, 90*time.Second)
	adopted, err := e.kube.CoreV1().Nodes().Get(ctx, dnsName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "web", adopted.Labels[nodesetv1alpha1.LabelNodeSet], "the kubelet's Node was adopted")
	assert.Equal(t, dnsName, adopted.Labels["kubernetes.io/hostname"], "its own labels stay")
	assert.Contains(t, adopted.Finalizers, nodesetv1alpha1.FinalizerTermination)
	all, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	perInstance := map[string]int{}
	for _, n := range all.Items {
		perInstance[n.Spec.ProviderID]++
	}
	assert.Equal(t, 1, perInstance[newcomer], "never two Nodes for one instance")
	assert.Len(t, e.runningInstances(), 2, "the restart made no instance")

	t.Log("SIGKILL in the middle of a scale-up leaks nothing")
	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To[int32](4) })
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		desired, _, err := e.instances(group)
		return err == nil && desired == 4, nil
	}))
	e.ctrl.Node.Kill(syscall.SIGKILL)
	require.NoError(t, e.ctrl.Node.Start())
	e.converged(ns, "web", group, 4, 90*time.Second)
	assert.Len(t, e.runningInstances(), 4, "one instance per replica, none leaked")
	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To[int32](2) })
	nodes = e.converged(ns, "web", group, 2, 90*time.Second)
	assert.ElementsMatch(t, []string{keep, newcomer}, providerIDs(nodes), "the newest went first (deletePolicy Newest)")
	assert.Len(t, e.runningInstances(), 2)

	t.Log("a template change is a new launch template version, rolled out one surge node at a time")
	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Template.Labels["tier"] = "frontend" })
	var rolled *nodesetv1alpha1.NodeSet
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		rolled, err = e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || rolled.Status.TemplateHash == hash {
			return false, nil
		}
		return rolled.Status.UpdatedReplicas == 2 && rolled.Status.Replicas == 2 && rolled.Status.ReadyReplicas == 2, nil
	}), "rollout: %+v", rolled.Status)
	nodes = e.converged(ns, "web", group, 2, time.Minute)
	for _, n := range nodes {
		assert.Equal(t, "frontend", n.Labels["tier"])
		assert.Equal(t, rolled.Status.TemplateHash, n.Labels[nodesetv1alpha1.LabelTemplateHash])
		assert.NotContains(t, []string{keep, newcomer}, n.Spec.ProviderID, "every instance was replaced")
	}
	versions, err := e.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateName: aws.String(group)})
	require.NoError(t, err)
	assert.Len(t, versions.LaunchTemplateVersions, 2)
	assert.Len(t, e.runningInstances(), 2, "the replaced instances were terminated")

	t.Log("every AWS call is counted by operation and outcome")
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", e.ctrl.NodeMetricsPort))
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	for _, op := range []string{"DescribeAutoScalingGroups", "SetDesiredCapacity", "TerminateInstanceInAutoScalingGroup", "CreateLaunchTemplateVersion"} {
		assert.Regexp(t, `nodeset_cloud_api_calls_total\{driver="eks-asg",operation="`+op+`",outcome="success"\} [1-9]`, string(metrics))
	}

	t.Log("deletion leaves no group, launch template or instance")
	require.NoError(t, e.nodesets.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "web", metav1.DeleteOptions{}))
	var left string
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		set, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err == nil {
			left = fmt.Sprintf("finalizers %v", set.Finalizers)
			for _, n := range e.setNodes(ns, "web") {
				left += fmt.Sprintf("; Node %s deleting %v finalizers %v", n.Name, n.DeletionTimestamp != nil, n.Finalizers)
			}
		}
		return apierrors.IsNotFound(err), nil
	}), "NodeSet gone; left: %s", left)
	assert.Empty(t, e.setNodes(ns, "web"))
	groups, err := e.asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{group}})
	require.NoError(t, err)
	assert.Empty(t, groups.AutoScalingGroups)
	_, err = e.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateName: aws.String(group)})
	assert.Error(t, err, "the launch template went with the group")
	assert.Empty(t, e.runningInstances())
}

// TestOrphanGroupIsCollected: a group tagged with the cluster whose NodeSet
// does not exist is deleted with its instances once old enough; a NodeSet's
// own group is not.
func TestOrphanGroupIsCollected(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createClass("orphans")
	ghost, _ := e.ghostGroup("orphans", 2)
	require.Len(t, e.runningInstances(), 2)
	// The controllers run with --orphan-min-age=10s and a 2s interval.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := e.asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{ghost}})
		return err == nil && len(out.AutoScalingGroups) == 0, nil
	}), "the orphan group is deleted")
	assert.Empty(t, e.runningInstances(), "with its instances")
}

// TestCloudRefusesBadClasses: a class naming an image or subnet the region
// does not have is Valid=False with AWS's code and message, before any
// NodeSet uses it.
func TestCloudRefusesBadClasses(t *testing.T) {
	e := newEnv(t)
	e.createClass("bad-ami", func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.ImageID = "ami-0123456789abcdef0" })
	e.createClass("bad-subnet", func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.SubnetIDs = []string{"subnet-0123456789abcdef0"} })
	e.createClass("good")
	for name, want := range map[string]string{
		"bad-ami":    "spec.eksAutoscalingGroup.imageID ami-0123456789abcdef0: invalid configuration: InvalidAMIID.NotFound",
		"bad-subnet": "spec.eksAutoscalingGroup.subnetIDs subnet-0123456789abcdef0: invalid configuration: InvalidSubnetID.NotFound",
		"good":       "driver eks-asg accepts the configuration",
	} {
		var last string
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			class, err := e.nodesets.NodesetV1alpha1().NodeClasses().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			valid := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
			if valid == nil {
				return false, nil
			}
			last = string(valid.Status) + " " + valid.Message
			return strings.Contains(valid.Message, want), nil
		})
		require.NoError(t, err, "NodeClass %s: Valid is %q", name, last)
		assert.NotContains(t, last, "testing", "no credential in the condition")
	}
}
