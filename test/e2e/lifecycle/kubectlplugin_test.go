package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/kubectlplugin"
	"nodeset.dev/nodeset/test/framework"
)

// plugin runs kubectl-nodeset in-process as user and returns what it
// printed, or its error as kubectl-nodeset prints it.
func plugin(t *testing.T, user string, args ...string) (string, string) {
	t.Helper()
	kubeconfig, err := framework.Shared(t).WriteKubeconfig(user)
	require.NoError(t, err)
	var out, errOut bytes.Buffer
	cmd := kubectlplugin.Command(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig=" + kubeconfig}, args...))
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		return out.String(), kubectlplugin.ErrorText(err)
	}
	return out.String(), ""
}

// TestKubectlPlugin: a tenant lists its classes, creates, scales and watches
// a NodeSet with kubectl nodeset; refusals read as the server wrote them.
func TestKubectlPlugin(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	kube, cs := clients(t)
	ns := createNamespace(t, "plugin")
	createClass(t, "plugin-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.TenantOverrides = []string{"instanceType"}
	})
	createClass(t, "plugin-private", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{"elsewhere"}}
	})
	tenant(t, "tenant-a", ns)
	// The VALID column is the node controller's verdict.
	waitClassValid(t, "plugin-sim")

	out, errText := plugin(t, "tenant-a", "-n", ns, "classes")
	require.Empty(t, errText)
	lines := strings.Split(out, "\n")
	assert.Contains(t, lines[0], "FOR "+strings.ToUpper(ns))
	row := func(name string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, name+" ") {
				return l
			}
		}
		return ""
	}
	assert.Regexp(t, `^plugin-sim\s+simulated\s+Shared\s+sim\.small\s+\S+\s+instanceType\s+True\s+yes$`, row("plugin-sim"))
	assert.Regexp(t, `\sno$`, row("plugin-private"), "a class listed for other namespaces")

	tests := []struct {
		name    string
		args    []string
		wantOut string
		wantErr []string
	}{
		{"create", []string{"create", "cli", "--class", "plugin-sim", "--replicas", "2", "--label", "tier=web",
			"--taint", "dedicated=web:NoSchedule", "--set", "instanceType=sim.large"}, "nodeset.nodeset.dev/cli created\n", nil},
		{"server dry run", []string{"create", "dry", "--class", "plugin-sim", "--dry-run=server"}, "nodeset.nodeset.dev/dry created (server dry run)\n", nil},
		{"wrong class", []string{"create", "lost", "--class", "no-such-class"}, "",
			[]string{"Error from server (NodeClassNotFound):", `NodeClass "no-such-class" does not exist`}},
		{"class not for this namespace", []string{"create", "intruder", "--class", "plugin-private"}, "",
			[]string{"Error from server (NamespaceNotAllowed):"}},
		{"restricted field", []string{"create", "big", "--class", "plugin-sim", "--set", "bootDelay=1s"}, "",
			[]string{"Error from server (OverrideNotAllowed):", "spec.simulated.bootDelay is restricted by NodeClass plugin-sim", "instanceType"}},
		{"not a field", []string{"create", "typo", "--class", "plugin-sim", "--set", "instanceTyp=x"}, "",
			[]string{"error:", `unknown field "instanceTyp"`}},
		{"bad taint", []string{"create", "t", "--class", "plugin-sim", "--taint", "dedicated"}, "",
			[]string{"error:", "want key[=value]:Effect"}},
		{"no permission", []string{"create", "cli", "--class", "plugin-sim", "-n", "kube-system"}, "",
			[]string{"Error from server (Forbidden):", `User "tenant-a" cannot create resource "nodesets" in API group "nodeset.dev" in the namespace "kube-system"`}},
		{"scale", []string{"scale", "cli", "--replicas", "3"}, "nodeset.nodeset.dev/cli scaled\n", nil},
		{"scale a missing NodeSet", []string{"scale", "nope", "--replicas", "3"}, "",
			[]string{"Error from server (NotFound):", `nodesets.nodeset.dev "nope" not found`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errText := plugin(t, "tenant-a", append([]string{"-n", ns}, tt.args...)...)
			if len(tt.wantErr) == 0 {
				require.Empty(t, errText)
				assert.Equal(t, tt.wantOut, out)
				return
			}
			for _, want := range tt.wantErr {
				assert.Contains(t, errText, want)
			}
		})
	}
	web, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "cli", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(3), *web.Spec.Replicas)
	assert.Equal(t, map[string]string{"tier": "web"}, web.Spec.Template.Labels)
	assert.Equal(t, []nodesetv1alpha1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}, web.Spec.Template.Taints)
	assert.Equal(t, "sim.large", web.Spec.Simulated.InstanceType)
	for _, name := range []string{"dry", "lost", "intruder", "big", "typo"} {
		_, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, name, metav1.GetOptions{})
		assert.Error(t, err, "%s must not exist", name)
	}

	// Client dry-run output applies cleanly.
	out, errText = plugin(t, "tenant-a", "-n", ns, "create", "from-yaml", "--class", "plugin-sim", "--replicas", "1",
		"--set", "instanceType=sim.medium", "--dry-run=client", "-o", "yaml")
	require.Empty(t, errText)
	var printed nodesetv1alpha1.NodeSet
	require.NoError(t, yaml.UnmarshalStrict([]byte(out), &printed), out)
	_, tenantClient := tenant(t, "tenant-a", ns)
	_, err = tenantClient.NodesetV1alpha1().NodeSets(ns).Create(ctx, &printed, metav1.CreateOptions{FieldValidation: "Strict"})
	require.NoError(t, err, "the printed NodeSet is accepted as it is:\n%s", out)

	// Status: each node's phase, and the events. A Node that claims the
	// set by its labels, marked none of nodeset's, is not listed.
	eventually(t, 2*time.Minute, "3 nodes", converged(c, t, ns, "cli", 3))
	_, err = kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "plugin-claimant", Labels: map[string]string{
		nodesetv1alpha1.LabelNodeSetNamespace: ns, nodesetv1alpha1.LabelNodeSet: "cli", nodesetv1alpha1.LabelNodeClass: "plugin-sim",
		nodesetv1alpha1.LabelSeal: nodesetv1alpha1.SealNone}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	out, errText = plugin(t, framework.AdminName, "-n", ns, "status", "cli")
	require.Empty(t, errText)
	assert.Contains(t, out, "NodeSet "+ns+"/cli (class plugin-sim): 3 desired, 3 current, 3 ready")
	assert.Equal(t, 3, strings.Count(out, " ready "), out)
	assert.NotContains(t, out, "plugin-claimant")
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, "plugin-claimant", metav1.DeleteOptions{}))
	assert.Contains(t, out, "SuccessfulCreate")
	out, errText = plugin(t, "tenant-a", "-n", ns, "status", "cli")
	require.Empty(t, errText)
	assert.Contains(t, out, "Nodes: not visible to you", "tenants may not list Nodes")
	assert.Contains(t, out, "SuccessfulCreate", "but see their NodeSet's events")

	// A node being drained shows as draining.
	nodes, err := setNodes(ctx, t, ns, "cli")
	require.NoError(t, err)
	guardedPod(t, ns, "blocker", nodes[0].Name, "blocker")
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, nodes[0].Name, metav1.DeleteOptions{}))
	eventually(t, time.Minute, "draining shown", func(context.Context) (bool, string) {
		out, _ := plugin(t, framework.AdminName, "-n", ns, "status", "cli")
		return strings.Contains(out, nodes[0].Name+"   draining"), out
	})
	require.NoError(t, kube.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "blocker", metav1.DeleteOptions{}))
	for _, name := range []string{"cli", "from-yaml"} {
		require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, name, metav1.DeleteOptions{}))
	}
	eventually(t, 2*time.Minute, "the nodes gone", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "cli")
		return err == nil && len(nodes) == 0, fmt.Sprintf("%d nodes, %v", len(nodes), err)
	})
}
