package lifecycle

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/kubestore"
	"nodeset.dev/nodeset/test/framework"
)

// TestDockerMachineAmazonEC2Driver: a NodeSet of a class served by
// rancher/machine's real amazonec2 driver, aimed at moto, joining by
// UserData. Each Node gets an EC2 instance named after it whose user data
// is its join script (moto runs none: a stand-in reports the Nodes Ready);
// when EC2 has no room (RunInstances answered InsufficientInstanceCapacity
// by a proxy) the new Node says OutOfCapacity, as cluster-autoscaler reads
// it, and its NodeSet ReplicaFailure, and it gets its instance once there
// is room; scale-down terminates exactly the chosen Node's instance; a
// node controller killed while amazonec2 waits for a launched instance to
// run leaves no instance behind; and deleting the NodeSet leaves no
// instance, key pair, record or bootstrap token behind.
func TestDockerMachineAmazonEC2Driver(t *testing.T) {
	c := startControllers(t)
	installPlugin(t, "amazonec2")
	ctx := context.Background()
	kube, cs := clients(t)
	var refuse, hold atomic.Bool
	cloud := framework.StartMotoEC2(t, func(w http.ResponseWriter, r *http.Request, _ []byte, form url.Values) bool {
		if form.Get("Action") == "DescribeInstances" && hold.Load() {
			// No instance runs, as far as the plugin can tell.
			<-r.Context().Done()
			return true
		}
		if form.Get("Action") != "RunInstances" || !refuse.Load() {
			return false
		}
		framework.AnswerNoCapacity(w, "t3.medium", "us-east-1a")
		return true
	})
	ec2c := cloud.EC2
	kubelets, stopKubelets := context.WithCancel(ctx)
	t.Cleanup(stopKubelets)
	go framework.ReportNodesReady(kubelets, kube, "docker-machine://amazonec2/")

	const secretKey = "e2e/EC2+secret+Hv7pQ2xN"
	_, err := kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "amazonec2-e2e"},
		Data:       map[string][]byte{"access-key": []byte("AKIAE2EPLANTED00EC21"), "secret-key": []byte(secretKey)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = kube.CoreV1().Secrets("nodeset-system").Delete(context.Background(), "amazonec2-e2e", metav1.DeleteOptions{})
	})
	createClass(t, "amazonec2-e2e", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Driver = nodesetv1alpha1.DriverDockerMachine
		class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "amazonec2-e2e"}
		class.Spec.DriverSections = nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{
			DriverName:        "amazonec2",
			Options:           cloud.AmazonEC2Options(),
			CredentialOptions: map[string]string{"amazonec2-access-key": "access-key", "amazonec2-secret-key": "secret-key"},
			Provisioning: &nodesetv1alpha1.MachineProvisioning{Method: nodesetv1alpha1.ProvisioningUserData,
				UserDataOption: "amazonec2-userdata", KubernetesVersion: "v1.37.2"},
		}}
		class.Spec.RegistrationTimeout = &metav1.Duration{Duration: 2 * time.Minute}
	})
	t.Cleanup(func() {
		_ = cs.NodesetV1alpha1().NodeClasses().Delete(context.Background(), "amazonec2-e2e", metav1.DeleteOptions{})
	})
	waitClassValid(t, "amazonec2-e2e")
	ns := createNamespace(t, "dm-amazonec2")

	// instances are moto's live instances by their Name tag, which
	// amazonec2 sets to the machine's (the Node's) name; two live instances
	// of one name (one left by an attempt before) are an error.
	instances := func(ctx context.Context) (map[string]ec2types.Instance, error) {
		out, err := ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
		if err != nil {
			return nil, err
		}
		live := map[string]ec2types.Instance{}
		for _, r := range out.Reservations {
			for _, i := range r.Instances {
				if i.State.Name == ec2types.InstanceStateNameTerminated {
					continue
				}
				for _, tag := range i.Tags {
					if aws.ToString(tag.Key) != "Name" {
						continue
					}
					name := aws.ToString(tag.Value)
					if other, ok := live[name]; ok {
						return nil, fmt.Errorf("two live instances of machine %s: %s and %s", name, aws.ToString(other.InstanceId), aws.ToString(i.InstanceId))
					}
					live[name] = i
				}
			}
		}
		return live, nil
	}
	// instancesAre waits until the live instances are exactly the Nodes'.
	instancesAre := func(what string, names func() []string) {
		t.Helper()
		eventually(t, time.Minute, what, func(ctx context.Context) (bool, string) {
			live, err := instances(ctx)
			if err != nil {
				return false, err.Error()
			}
			want := names()
			if len(live) != len(want) {
				return false, fmt.Sprintf("%d instances, want %v", len(live), want)
			}
			for _, name := range want {
				if _, ok := live[name]; !ok {
					return false, "no instance for " + name
				}
			}
			return true, ""
		})
	}

	createSet(t, ns, "fleet", "amazonec2-e2e", 2)
	eventually(t, 3*time.Minute, "2 amazonec2 nodes", converged(c, t, ns, "fleet", 2))
	nodes, err := setNodes(ctx, t, ns, "fleet")
	require.NoError(t, err)
	instancesAre("an instance per Node", func() []string { return nodeNames(t, ns, "fleet") })
	live, err := instances(ctx)
	require.NoError(t, err)
	for _, n := range nodes {
		assert.Equal(t, "docker-machine://amazonec2/"+n.Name, n.Spec.ProviderID)
		attr, err := ec2c.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: live[n.Name].InstanceId,
			Attribute: ec2types.InstanceAttributeNameUserData})
		require.NoError(t, err)
		userData, err := base64.StdEncoding.DecodeString(aws.ToString(attr.UserData.Value))
		require.NoError(t, err)
		assert.Contains(t, string(userData), "export NODE_NAME='"+n.Name+"'", "the instance of %s joins as it", n.Name)
	}

	// No room in EC2: the new Node says so, as cluster-autoscaler reads it.
	refuse.Store(true)
	scale(t, ns, "fleet", 3)
	var waiting string
	eventually(t, 2*time.Minute, "the third Node out of capacity", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "fleet")
		if err != nil {
			return false, err.Error()
		}
		for _, n := range nodes {
			if n.Spec.ProviderID == "" && strings.HasPrefix(n.Annotations[nodesetv1alpha1.AnnotationProvisioningError], "OutOfCapacity: ") {
				waiting = n.Name
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d nodes, none refused for capacity yet", len(nodes))
	})
	node, err := kube.CoreV1().Nodes().Get(ctx, waiting, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, node.Annotations[nodesetv1alpha1.AnnotationProvisioningError], "InsufficientInstanceCapacity")
	eventually(t, time.Minute, "the NodeSet's ReplicaFailure", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "fleet", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		failure := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetReplicaFailure)
		return failure != nil && failure.Status == metav1.ConditionTrue && strings.Contains(failure.Message, "InsufficientInstanceCapacity"),
			fmt.Sprintf("ReplicaFailure: %+v", failure)
	})
	live, err = instances(ctx)
	require.NoError(t, err)
	assert.Len(t, live, 2, "no instance for the refused Node")
	refuse.Store(false)
	eventually(t, 3*time.Minute, "3 nodes once there is room", converged(c, t, ns, "fleet", 3))
	instancesAre("an instance per Node", func() []string { return nodeNames(t, ns, "fleet") })

	// Scale-down terminates the chosen Node's instance, no other.
	chosen := nodes[0].Name
	_, err = kube.CoreV1().Nodes().Patch(ctx, chosen, "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"nodeset.dev/delete-node":"true"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	scale(t, ns, "fleet", 2)
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "fleet", 2))
	assert.NotContains(t, nodeNames(t, ns, "fleet"), chosen)
	instancesAre("the chosen Node's instance terminated", func() []string { return nodeNames(t, ns, "fleet") })

	// The node controller killed while amazonec2 waits for a launched
	// instance to run: the instance, known to the machine's record by then,
	// is terminated by the next attempt, not left running beside the
	// instance that attempt launches.
	records := func(ctx context.Context) ([]corev1.Secret, error) {
		list, err := kube.CoreV1().Secrets("nodeset-system").List(ctx, metav1.ListOptions{LabelSelector: kubestore.LabelMachineDriver + "," + nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns})
		if err != nil {
			return nil, err
		}
		return list.Items, nil
	}
	before := nodeNames(t, ns, "fleet")
	hold.Store(true)
	scale(t, ns, "fleet", 3)
	eventually(t, time.Minute, "a third instance launched, its id in its machine's record", func(ctx context.Context) (bool, string) {
		live, err := instances(ctx)
		if err != nil {
			return false, err.Error()
		}
		list, err := records(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range list {
			name := r.Annotations[kubestore.AnnotationMachine]
			if i, ok := live[name]; ok && !slices.Contains(before, name) && strings.Contains(string(r.Data["config.json"]), aws.ToString(i.InstanceId)) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d instances, %d records", len(live), len(list))
	})
	c.restart(t, c.node, syscall.SIGKILL)
	hold.Store(false)
	eventually(t, 3*time.Minute, "3 nodes after the kill", converged(c, t, ns, "fleet", 3))
	instancesAre("an instance per Node, none left from the killed attempt", func() []string { return nodeNames(t, ns, "fleet") })

	// Deleting the NodeSet leaves nothing behind, in EC2 or in the cluster.
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "fleet", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "everything gone", func(ctx context.Context) (bool, string) {
		live, err := instances(ctx)
		if err != nil || len(live) > 0 {
			return false, fmt.Sprintf("instances left: %d %v", len(live), err)
		}
		keys, err := ec2c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{})
		if err != nil || len(keys.KeyPairs) > 0 {
			return false, fmt.Sprintf("key pairs left: %v", err)
		}
		records, err := kube.CoreV1().Secrets("nodeset-system").List(ctx, metav1.ListOptions{LabelSelector: kubestore.LabelMachineDriver + "," + nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns})
		if err != nil || len(records.Items) > 0 {
			return false, fmt.Sprintf("machine records left: %v", err)
		}
		tokens, err := kube.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
		if err != nil || len(tokens.Items) > 0 {
			return false, fmt.Sprintf("bootstrap tokens left: %v", err)
		}
		return true, ""
	})

	// The secret key reached no Event.
	events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, e := range events.Items {
		assert.NotContains(t, e.Message, secretKey)
	}
}
