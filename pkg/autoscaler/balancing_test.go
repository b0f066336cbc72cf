package autoscaler

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/resolve"
)

// basicIgnoredLabels are the labels cluster-autoscaler 1.36 never compares
// when it looks for similar node groups
// (processors/nodegroupset/compare_nodegroups.go, BasicIgnoredLabels); the
// externalgrpc provider gets the generic comparator
// (builder/autoscaler.go: CreateGenericNodeInfoComparator), which adds
// only the --balancing-ignore-label flags to them.
var basicIgnoredLabels = []string{
	corev1.LabelHostname,
	corev1.LabelFailureDomainBetaZone,
	corev1.LabelFailureDomainBetaRegion,
	corev1.LabelTopologyZone,
	corev1.LabelTopologyRegion,
	"beta.kubernetes.io/fluentd-ds-ready",
	"kops.k8s.io/instancegroup",
}

// documentedIgnoredLabels are the --balancing-ignore-label flags
// docs/autoscaler.md lists for cluster-autoscaler.
func documentedIgnoredLabels(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/autoscaler.md")
	require.NoError(t, err)
	var out []string
	// The lines of its flag listing, not the prose around it.
	for _, m := range regexp.MustCompile(`(?m)^--balancing-ignore-label=(\S+?)(?: \\)?$`).FindAllStringSubmatch(string(doc), -1) {
		out = append(out, m[1])
	}
	require.NotEmpty(t, out, "docs/autoscaler.md names no --balancing-ignore-label")
	return out
}

// similarLabels is cluster-autoscaler 1.36's label test for similar node
// groups (compare_nodegroups.go, compareLabels): every label not ignored
// must be on both nodes, with the same value.
func similarLabels(a, b *corev1.Node, ignored []string) (bool, []string) {
	skip := map[string]bool{}
	for _, k := range ignored {
		skip[k] = true
	}
	var differ []string
	for _, pair := range [][2]*corev1.Node{{a, b}, {b, a}} {
		for k, v := range pair[0].Labels {
			if skip[k] {
				continue
			}
			if w, ok := pair[1].Labels[k]; !ok || w != v {
				differ = append(differ, k)
			}
		}
	}
	return len(differ) == 0, differ
}

// registered is node as it is once its machine's kubelet registered it and
// the cloud's node controller and CSI node plugins labelled it: besides
// what nodeset put on it, the kubelet's default labels, which it also puts
// on a Node that already exists (kubernetes pkg/kubelet/kubelet_node_status.go,
// initialNode and updateDefaultLabels: kubernetes.io/os and /arch and
// their beta.kubernetes.io/ twins), the cloud node controller's instance
// type under both keys (k8s.io/cloud-provider controllers/node), and, on
// EKS, the EBS CSI node plugin's zone and the AWS cloud provider's zone id.
func registered(node *corev1.Node, name string, aws bool) *corev1.Node {
	n := node.DeepCopy()
	n.Name = name
	n.Labels[corev1.LabelHostname] = name
	n.Labels[corev1.LabelOSStable] = "linux"
	n.Labels["beta.kubernetes.io/os"] = "linux"
	n.Labels["beta.kubernetes.io/arch"] = n.Labels[corev1.LabelArchStable]
	if it, ok := n.Labels[corev1.LabelInstanceTypeStable]; ok {
		n.Labels[corev1.LabelInstanceType] = it
	}
	if aws {
		n.Labels[corev1.LabelFailureDomainBetaZone] = n.Labels[corev1.LabelTopologyZone]
		n.Labels["topology.k8s.aws/zone-id"] = "use1-az-" + n.Labels[corev1.LabelTopologyZone]
	}
	return n
}

// zonalSet is a NodeSet of the class whose driver reported, for its
// template, a node of zone (status.capacity), as the AWS drivers report
// for a set whose subnets are in one zone.
func zonalSet(t *testing.T, class *nodesetv1alpha1.NodeClass, name, zone string, templateLabels map[string]string) *nodesetv1alpha1.NodeSet {
	t.Helper()
	set := testSet(0)
	set.Name = name
	set.Spec.Template.Labels = templateLabels
	effective, err := resolve.EffectiveSpec(class, set)
	require.NoError(t, err)
	hash := resolve.TemplateHash(&effective, set)
	set.Status.TemplateHash = hash
	set.Status.Capacity = &nodesetv1alpha1.TemplateCapacity{TemplateHash: hash, NodeCapacity: nodesetv1alpha1.NodeCapacity{
		Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")},
		Labels: map[string]string{
			corev1.LabelInstanceTypeStable: "m5.large", corev1.LabelArchStable: "amd64",
			corev1.LabelTopologyRegion: "us-east-1", corev1.LabelTopologyZone: zone, "topology.ebs.csi.aws.com/zone": zone,
		},
	}}
	return set
}

// TestDocumentedBalancingFlagsMakeSimilarNodeSetsSimilar: with the
// --balancing-ignore-label flags docs/autoscaler.md gives,
// cluster-autoscaler's comparator finds two NodeSets similar when their
// nodes differ only in what tells NodeSets, zones and registrations apart:
// one set at zero (its template node) and one with a registered Node, and
// two sets of one class in two zones, as docs/autoscaler.md advises for
// zonal workloads. Sets whose nodes differ in a label pods may select, or
// in instance type, stay apart.
func TestDocumentedBalancingFlagsMakeSimilarNodeSetsSimilar(t *testing.T) {
	ignored := append(documentedIgnoredLabels(t), basicIgnoredLabels...)
	class := testClass()
	web := map[string]string{"tier": "web"}
	for _, tc := range []struct {
		name string
		a, b *nodesetv1alpha1.NodeSet
		// aNode, bNode: the set has a registered Node, which
		// cluster-autoscaler copies instead of asking for the template.
		aNode, bNode bool
		similar      bool
	}{
		{"one at zero, one with a registered Node", zonalSet(t, class, "web-1a", "us-east-1a", web), zonalSet(t, class, "web-1b", "us-east-1b", web), true, false, true},
		{"both at zero, two zones", zonalSet(t, class, "web-1a", "us-east-1a", web), zonalSet(t, class, "web-1b", "us-east-1b", web), false, false, true},
		{"both with Nodes, two zones", zonalSet(t, class, "web-1a", "us-east-1a", web), zonalSet(t, class, "web-1b", "us-east-1b", web), true, true, true},
		{"another pool label", zonalSet(t, class, "web-1a", "us-east-1a", web), zonalSet(t, class, "batch-1b", "us-east-1b", map[string]string{"tier": "batch"}), true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newClassFixture(t, class, nil, tc.a)
			require.NoError(t, f.sets.Add(tc.b))
			a, err := f.server.TemplateNode(tc.a)
			require.NoError(t, err)
			b, err := f.server.TemplateNode(tc.b)
			require.NoError(t, err)
			if tc.aNode {
				a = registered(a, "ip-10-0-1-1.ec2.internal", true)
			}
			if tc.bNode {
				b = registered(b, "ip-10-0-2-1.ec2.internal", true)
			}
			similar, differ := similarLabels(a, b, ignored)
			assert.Equal(t, tc.similar, similar, "labels that differ: %v", differ)
		})
	}
}
