package resolve

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestTenantKubeletFlags: on a Shared class other namespaces' pods run on a
// tenant's Nodes, so a NodeSet may pass the kubelet only flags that tune
// the Node's own resources; a flag that opens the kubelet, renames the
// Node, moves its credentials or its pods' DNS is the class's alone.
func TestTenantKubeletFlags(t *testing.T) {
	withArgs := func(args ...string) *nodesetv1alpha1.NodeSet {
		set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
		set.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{
			Bootstrap: &nodesetv1alpha1.EKSBootstrap{KubeletExtraArgs: args}}
		return set
	}
	refused := []struct {
		arg, word string
	}{
		{"--anonymous-auth=true", "--anonymous-auth=true"},
		{"--authorization-mode=AlwaysAllow", "--authorization-mode=AlwaysAllow"},
		{"--read-only-port=10255", "--read-only-port=10255"},
		{"--hostname-override=ip-10-0-0-1.ec2.internal", "--hostname-override=ip-10-0-0-1.ec2.internal"},
		{"--provider-id=aws:///eu-west-1a/i-0123456789abcdef0", "--provider-id=aws:///eu-west-1a/i-0123456789abcdef0"},
		{"--kubeconfig=/tmp/k", "--kubeconfig=/tmp/k"},
		{"--bootstrap-kubeconfig=/tmp/k", "--bootstrap-kubeconfig=/tmp/k"},
		{"--config=/tmp/kubelet.yaml", "--config=/tmp/kubelet.yaml"},
		{"--cloud-provider=external", "--cloud-provider=external"},
		{"--register-node=false", "--register-node=false"},
		{"--node-ip=10.0.0.9", "--node-ip=10.0.0.9"},
		{"--cluster-dns=10.9.9.9", "--cluster-dns=10.9.9.9"},
		{"--pod-infra-container-image=evil.example/pause", "--pod-infra-container-image=evil.example/pause"},
		{"--protect-kernel-defaults=false", "--protect-kernel-defaults=false"},
		{"--feature-gates=AllAlpha=true", "--feature-gates=AllAlpha=true"},
		{"--allowed-unsafe-sysctls=kernel.*", "--allowed-unsafe-sysctls=kernel.*"},
		{"--anonymous_auth=true", "--anonymous_auth=true"},
		{"-anonymous-auth=true", "-anonymous-auth=true"},
		// Hidden behind an allowed flag in one argument, or given as a
		// word of its own.
		{"--max-pods=20 --authorization-mode=AlwaysAllow", "--authorization-mode=AlwaysAllow"},
		{"--max-pods", "--max-pods"},
		{"--anonymous-auth", "--anonymous-auth"},
		{"true", "true"},
		{"--", "--"},
	}
	for _, tt := range refused {
		t.Run(tt.arg, func(t *testing.T) {
			problems := TenantErrors(withArgs("--v=2", tt.arg))
			if assert.Len(t, problems, 1, "%v", problems) {
				assert.Contains(t, problems[0], "spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs[1]")
				assert.Contains(t, problems[0], "not a kubelet flag a NodeSet may set")
				assert.Contains(t, problems[0], "--max-pods")
				assert.Contains(t, problems[0], `"`+tt.word+`"`)
			}
		})
	}

	allowed := []string{
		"--max-pods=58", "--pods-per-core=10", "--pod-max-pids=4096", "--v=4",
		"--kube-reserved=cpu=250m,memory=1Gi", "--system-reserved=cpu=100m",
		"--eviction-hard=memory.available<200Mi,nodefs.available<10%", "--eviction-soft=memory.available<500Mi",
		"--eviction-soft-grace-period=memory.available=1m", "--eviction-minimum-reclaim=memory.available=0Mi",
		"--eviction-max-pod-grace-period=30", "--eviction-pressure-transition-period=5m",
		"--image-gc-high-threshold=85", "--image-gc-low-threshold=80", "--image-minimum-gc-age=2m",
		"--container-log-max-size=50Mi", "--container-log-max-files=5",
		"--serialize-image-pulls=false", "--registry-qps=10", "--registry-burst=20",
		"--max_pods=58", "--max-pods=20 --v=2",
	}
	assert.Empty(t, TenantErrors(withArgs(allowed...)))
}
