package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestTenantKubeletFlagsOnASharedClassWithoutTheWebhook: a Shared class
// that lets tenants pass kubelet flags puts other namespaces' pods on a
// tenant's Nodes. Without the webhook, a NodeSet whose flags would open
// the kubelet to anyone (anonymous, AlwaysAllow, the read-only port) or
// send its pods' DNS elsewhere is InvalidTemplate naming the argument and
// gets no Node; one that only sizes the Node passes the tenant's checks
// (and, with no eks-asg node controller running here, waits for one).
func TestTenantKubeletFlagsOnASharedClassWithoutTheWebhook(t *testing.T) {
	startControllers(t)
	_, cs := clients(t)
	ns := createNamespace(t, "probe-kubelet-flags")
	_, tenantCS := tenant(t, "tenant-a", ns)
	createClass(t, "probe-kubelet-flags", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Driver, c.Spec.Simulated = nodesetv1alpha1.DriverEKSASG, nil
		c.Spec.Tenancy = nodesetv1alpha1.TenancyShared
		c.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{
			ClusterName: "prod", Region: "eu-west-1", ImageID: "ami-0123456789abcdef0", InstanceType: "m5.large",
			Bootstrap: &nodesetv1alpha1.EKSBootstrap{KubeletExtraArgs: []string{"--v=2"}},
		}
		c.Spec.TenantOverrides = []string{"bootstrap.kubeletExtraArgs"}
	})
	withoutWebhook(t)
	ctx := context.Background()

	for i, args := range [][]string{
		{"--anonymous-auth=true", "--authorization-mode=AlwaysAllow"},
		{"--read-only-port=10255"},
		{"--max-pods=58 --cluster-dns=10.9.9.9"},
		{"--hostname-override=ip-10-0-0-1.eu-west-1.compute.internal"},
	} {
		set := tenantSet(fmt.Sprintf("open-%d", i), "probe-kubelet-flags", 1)
		set.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{KubeletExtraArgs: args}}
		_, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, set, metav1.CreateOptions{})
		require.NoError(t, err, "%q: no webhook, the schema admits it", args)
		acceptedWith(t, ns, set.Name, "InvalidTemplate", "spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs[0]")
	}

	sized := tenantSet("sized", "probe-kubelet-flags", 0)
	sized.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
		KubeletExtraArgs: []string{"--max-pods=58", "--eviction-hard=memory.available<200Mi", "--v=4"}}}
	_, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, sized, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "a set that only sizes its Nodes passes the tenant's checks", func(ctx context.Context) (bool, string) {
		got, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "sized", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		accepted := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		if accepted == nil || accepted.ObservedGeneration != got.Generation {
			return false, "no Accepted condition for this generation yet"
		}
		return accepted.Status == metav1.ConditionTrue || accepted.Reason == nodesetv1alpha1.ReasonNodeClassNotValidated ||
			accepted.Reason == nodesetv1alpha1.ReasonDriverNotServed, strings.Join([]string{accepted.Reason, accepted.Message}, ": ")
	})
}
