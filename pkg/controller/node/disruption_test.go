package node

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
)

// TestANodeIsOutOfZoneHealthUntilItsMachineRegisters: kube-controller-manager's
// node lifecycle controller counts every Node whose Ready condition is not
// True in its zone's health (ComputeZoneState), unless the Node is labelled
// node.kubernetes.io/exclude-disruption (isNodeExcludedFromDisruptionChecks);
// a zone with over 55% of such Nodes stops the NoExecute tainting of its
// unreachable Nodes (none at all in a cluster of 50 Nodes or fewer). A Node
// nodeset made for a machine still booting carries the label, so a scale-up
// does not put its zone in that state; the write that registers the machine
// removes it, so a registered Node that fails counts. A template's own
// exclude-disruption label stays.
func TestANodeIsOutOfZoneHealthUntilItsMachineRegisters(t *testing.T) {
	for _, tc := range []struct {
		name     string
		template map[string]string // the label as the templates give it
		want     string            // after registration; "-": absent
	}{
		{name: "nodeset's", want: "-"},
		{name: "a template's", template: map[string]string{nodeutil.LabelExcludeDisruption: "true"}, want: "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
			set.Spec.Template.Labels = tc.template
			made := resolve.NewNode(&nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated}, "sim", set, "h1")
			if tc.template == nil {
				assert.Equal(t, nodeutil.StartupExcludeDisruption, made.Labels[nodeutil.LabelExcludeDisruption], "made out of its zone's health")
			} else {
				assert.Equal(t, "true", made.Labels[nodeutil.LabelExcludeDisruption], "the template's value is kept")
			}

			node := setNode("web-a", "sim")
			for k, v := range made.Labels {
				if _, ok := node.Labels[k]; !ok && k != nodesetv1alpha1.LabelSeal {
					node.Labels[k] = v
				}
			}
			node.Spec.Taints = append(node.Spec.Taints, resolve.StartupTaints()...)
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
			require.NoError(t, f.sync("web-a"))
			provisioned := f.get("web-a")
			require.NotEmpty(t, provisioned.Spec.ProviderID)
			assert.Contains(t, provisioned.Labels, nodeutil.LabelExcludeDisruption, "kept while the machine boots")

			ready := markReady(provisioned)
			require.NoError(t, f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), ready, ""))
			f.updateCache(ready)
			writes := f.nodeWrites()
			require.NoError(t, f.sync("web-a"))
			got := f.get("web-a")
			require.False(t, nodeutil.HasStartupTaint(got), "registered")
			assert.Equal(t, writes+1, f.nodeWrites(), "in the registration's one write")
			value, ok := got.Labels[nodeutil.LabelExcludeDisruption]
			if tc.want == "-" {
				assert.False(t, ok, "a registered Node counts in its zone's health: %v", got.Labels)
				return
			}
			assert.Equal(t, tc.want, value)
		})
	}
}

// TestALoneNodeIsOutOfZoneHealthUntilItsMachineRegisters: a Node an admin
// creates for a machine to come gets the startup label with the startup
// taints, and loses both when the machine registers.
func TestALoneNodeIsOutOfZoneHealthUntilItsMachineRegisters(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, loneNode("static-a", "sim", nil))
	require.NoError(t, f.sync("static-a"))
	provisioned := f.get("static-a")
	require.True(t, nodeutil.HasStartupTaint(provisioned))
	assert.Equal(t, nodeutil.StartupExcludeDisruption, provisioned.Labels[nodeutil.LabelExcludeDisruption])

	ready := markReady(provisioned)
	require.NoError(t, f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), ready, ""))
	f.updateCache(ready)
	require.NoError(t, f.sync("static-a"))
	got := f.get("static-a")
	require.False(t, nodeutil.HasStartupTaint(got), "registered")
	assert.NotContains(t, got.Labels, nodeutil.LabelExcludeDisruption)
}
