package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

// toDockerMachine turns a class into one of the fake docker-machine plugin,
// keeping its name: another driver for the same catalogue entry.
func toDockerMachine(class *nodesetv1alpha1.NodeClass, dir string) {
	class.Spec.Driver = nodesetv1alpha1.DriverDockerMachine
	class.Spec.Simulated = nil
	class.Spec.DockerMachine = &nodesetv1alpha1.DockerMachine{DriverName: fakeplugin.Name, Options: map[string]string{"fake-dir": dir}}
}

// TestAdmin7AClassKeepsItsDriver: a NodeClass's driver is what made its
// Nodes' machines, and only that driver can take them away (a simulated
// machine is unknown to docker-machine, an Auto Scaling group's instance to
// EKS). An admin who edits the driver of a class in use, as a StorageClass's
// provisioner, is refused, and the class, its NodeSets and their Nodes stay
// as they were.
func TestAdmin7AClassKeepsItsDriver(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	_, cs := clients(t)
	ns := createNamespace(t, "admin7-driver")
	createClass(t, "admin7-driver", nil)
	waitClassValid(t, "admin7-driver")
	createSet(t, ns, "web", "admin7-driver", 1)
	eventually(t, 2*time.Minute, "the set's Node", converged(c, t, ns, "web", 1))

	class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "admin7-driver", metav1.GetOptions{})
	require.NoError(t, err)
	toDockerMachine(class, t.TempDir())
	_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
	require.Error(t, err, "the driver of a class in use cannot be changed")
	require.Contains(t, err.Error(), "spec.driver")

	stored, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "admin7-driver", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, nodesetv1alpha1.DriverSimulated, stored.Spec.Driver)
	eventually(t, time.Minute, "the set's Node, untouched", converged(c, t, ns, "web", 1))
}

// TestAdmin7NodesGoWithTheDriverThatMadeThem: an admin deletes a class in
// use, takes its nodeset.dev/in-use finalizer off by hand, and creates the
// class again under the same name with another driver (simulated, then
// docker-machine) while the old class's Nodes are still there. Their
// machines are the old driver's: a Node of them deleted afterwards (a
// scale-down) is deprovisioned by the driver recorded on it
// (nodeset.dev/driver), so its machine is gone when its Node is, and no
// orphan collection has to find it later.
func TestAdmin7NodesGoWithTheDriverThatMadeThem(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	kube, cs := clients(t)
	ns := createNamespace(t, "admin7-swapdriver")
	createClass(t, "admin7-swapdriver", nil)
	waitClassValid(t, "admin7-swapdriver")
	// OnDelete: the new class rolls nothing; a scale-down is what removes a Node.
	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "admin7-swapdriver", Replicas: ptr.To[int32](2),
			Strategy: nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.OnDeleteStrategy}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "two simulated Nodes", converged(c, t, ns, "web", 2))

	require.NoError(t, cs.NodesetV1alpha1().NodeClasses().Delete(ctx, "admin7-swapdriver", metav1.DeleteOptions{}))
	_, err = cs.NodesetV1alpha1().NodeClasses().Patch(ctx, "admin7-swapdriver", types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "the class gone", func(ctx context.Context) (bool, string) {
		_, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "admin7-swapdriver", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	createClass(t, "admin7-swapdriver", func(class *nodesetv1alpha1.NodeClass) { toDockerMachine(class, t.TempDir()) })
	waitClassValid(t, "admin7-swapdriver")
	eventually(t, time.Minute, "the set accepted under the class made again", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		return accepted != nil && accepted.Status == metav1.ConditionTrue, fmt.Sprintf("Accepted: %+v", accepted)
	})

	scale(t, ns, "web", 1)
	// When the Node is gone its machine must be gone already.
	eventually(t, time.Minute, "one Node left", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "web")
		if err != nil {
			return false, err.Error()
		}
		if len(nodes) != 1 {
			return false, fmt.Sprintf("%d nodes", len(nodes))
		}
		all, ok := c.machines(ctx)
		if !ok {
			return false, "no machine list"
		}
		machines := setMachines(all, ns, "web")
		require.Len(t, machines, 1, "the machine of the Node that left went before its Node did")
		return true, ""
	})
	// Nor did orphan collection find it: the machine went with its Node.
	eventually(t, time.Minute, "the scale-down told, and no orphan", func(ctx context.Context) (bool, string) {
		events, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var reasons []string
		for _, e := range events.Items {
			reasons = append(reasons, e.Reason+": "+e.Message)
			require.NotEqual(t, "OrphanMachineDeleted", e.Reason, "%s: a machine outlived its Node", e.Message)
		}
		return strings.Contains(strings.Join(reasons, "\n"), "Deprovisioned: Driver simulated deleted the machines"), strings.Join(reasons, "\n")
	})
}

// TestAdmin7AFormatEditKeepsSetsThatPassKubeletFlags: an eks-asg class lets
// tenants pass kubelet flags (bootstrap.kubeletExtraArgs) and keeps the
// bootstrap format. The API server writes the schema's default format
// (NodeConfig) into every NodeSet that passes flags, so the tenant cannot
// leave it out. A NodeSet passing flags is admitted under a class of
// either format, and when the admin edits the class from one format to
// the other (Amazon Linux 2 to 2023), the NodeSet is not refused for a
// format it never wrote: it stays within the class's boundary (here no
// node controller serves eks-asg, so it waits: NodeClassNotValidated,
// then DriverNotServed).
func TestAdmin7AFormatEditKeepsSetsThatPassKubeletFlags(t *testing.T) {
	startControllers(t)
	ctx := context.Background()
	_, cs := clients(t)
	ns := createNamespace(t, "admin7-format")
	createClass(t, "admin7-format", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Driver, class.Spec.Simulated = nodesetv1alpha1.DriverEKSASG, nil
		class.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Region: "eu-west-1",
			InstanceType: "m6i.large", Bootstrap: &nodesetv1alpha1.EKSBootstrap{Format: nodesetv1alpha1.BootstrapScript}}
		class.Spec.TenantOverrides = []string{"bootstrap.kubeletExtraArgs"}
	})
	set := &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "admin7-format", Replicas: ptr.To[int32](1),
			DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{
				Bootstrap: &nodesetv1alpha1.EKSBootstrap{KubeletExtraArgs: []string{"--max-pods=58"}}}}},
	}
	stored, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, set, metav1.CreateOptions{})
	require.NoError(t, err, "a NodeSet that passes the flags the class lets it pass")
	require.Equal(t, nodesetv1alpha1.BootstrapNodeConfig, stored.Spec.EKSAutoscalingGroup.Bootstrap.Format, "the API server wrote the default in")
	// judged is the set's Accepted condition once the controller judged its
	// current generation.
	judged := func(what string) {
		t.Helper()
		eventually(t, time.Minute, what, func(ctx context.Context) (bool, string) {
			got, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "flags", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			accepted := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			if accepted == nil || accepted.ObservedGeneration != got.Generation {
				return false, fmt.Sprintf("Accepted: %+v", accepted)
			}
			waits := accepted.Reason == nodesetv1alpha1.ReasonNodeClassNotValidated || accepted.Reason == nodesetv1alpha1.ReasonDriverNotServed
			return waits, accepted.Reason + ": " + accepted.Message
		})
	}
	judged("the set within the class's boundary")

	// The admin moves the class to the other format, and back; the tenant
	// changes its flags after each edit, judged by the webhook and the
	// controller against the class as it is now.
	for i, format := range []nodesetv1alpha1.BootstrapFormat{nodesetv1alpha1.BootstrapNodeConfig, nodesetv1alpha1.BootstrapScript} {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "admin7-format", metav1.GetOptions{})
		require.NoError(t, err)
		class.Spec.EKSAutoscalingGroup.Bootstrap.Format = format
		_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
		require.NoError(t, err)
		patch := fmt.Sprintf(`{"spec":{"eksAutoscalingGroup":{"bootstrap":{"kubeletExtraArgs":["--max-pods=%d"]}}}}`, 60+i)
		_, err = cs.NodesetV1alpha1().NodeSets(ns).Patch(ctx, "flags", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err, "new flags under a class of format %s", format)
		judged("the set within the boundary of the class of format " + string(format))
	}
}
