package node

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/resolve"
)

// parametersGroupDriver is an out-of-tree group driver configured through
// spec.parameters: like a real one, it reports its group's labels (the
// "labels" of its parameters, with the tenant's overrides merged) as its
// machines' labels, as docs/drivers/out-of-tree.md asks.
type parametersGroupDriver struct {
	*recordingGroupDriver
}

const parametersDriverName = "example.com/cloud"

func (d parametersGroupDriver) Name() string { return parametersDriverName }

func (d parametersGroupDriver) EnsureGroup(ctx context.Context, g drivers.Group) (drivers.GroupStatus, error) {
	var params struct {
		Labels map[string]string `json:"labels"`
	}
	if p := g.Class.Spec.Parameters; p != nil {
		if err := json.Unmarshal(p.Raw, &params); err != nil {
			return drivers.GroupStatus{}, err
		}
	}
	d.machineLabels = map[string]string{corev1.LabelTopologyZone: "zone-a"}
	for k, v := range params.Labels {
		d.machineLabels[k] = v
	}
	return d.recordingGroupDriver.EnsureGroup(ctx, g)
}

// TestHostileParametersCannotLabelAGroupNodeWithReservedKeys: a class of an
// out-of-tree group driver lets tenants override its parameters' labels.
// nodeset cannot read free-form parameters, so it accepts the tenant's
// keys; the driver reports them as its machines' labels. The Node must not
// carry another tenant's nodeset.dev/tenant label (which would draw that
// tenant's pods, which select it, onto this tenant's Shared node), nor
// another Node's hostname or a control-plane role.
func TestHostileParametersCannotLabelAGroupNodeWithReservedKeys(t *testing.T) {
	class := &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "cloud", Generation: 1},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver:              parametersDriverName,
			Parameters:          &runtime.RawExtension{Raw: []byte(`{"labels":{"example.com/pool":"batch"}}`)},
			TenantOverrides:     []string{"labels"},
			RegistrationTimeout: &metav1.Duration{Duration: 10 * time.Minute},
		},
		Status: nodesetv1alpha1.NodeClassStatus{Conditions: []metav1.Condition{{Type: nodesetv1alpha1.NodeClassValid,
			Status: metav1.ConditionTrue, Reason: "Valid", ObservedGeneration: 1}}},
	}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{class})
	driver := parametersGroupDriver{newGroupDriver()}
	f.controller.registry = drivers.Registry{parametersDriverName: driver}
	f.controller.opts.NodeSets = f.nodesets
	set := &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", UID: "uid-web", Finalizers: []string{"nodeset.dev/nodes"}},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "cloud", Replicas: ptr.To[int32](1),
			Parameters: &runtime.RawExtension{Raw: []byte(`{"labels":{` +
				`"nodeset.dev/tenant":"team-b","kubernetes.io/hostname":"team-b-node","node-role.kubernetes.io/control-plane":"",` +
				`"example.com/owner":"team-a"}}`)}},
		Status: nodesetv1alpha1.NodeSetStatus{Conditions: []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue,
			Reason: "Accepted", LastTransitionTime: metav1.NewTime(testNow)}}},
	}
	_, err := resolve.ProvisioningSpec(nil, class, set)
	require.NoError(t, err, "free-form parameters are the driver's to check: nodeset accepts the tenant's keys")
	created, err := f.nodesets.NodesetV1alpha1().NodeSets("team-a").Create(context.Background(), set, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, f.setIndexer.Add(created))

	require.NoError(t, f.controller.syncGroup(context.Background(), "team-a/web"))
	nodes, err := f.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, nodes.Items, 1)
	made := nodes.Items[0]
	assert.Equal(t, "team-a", made.Labels["example.com/owner"], "the tenant's own keys go on")
	assert.Equal(t, "batch", made.Labels["example.com/pool"])
	assert.Equal(t, "zone-a", made.Labels[corev1.LabelTopologyZone], "what the cloud reports goes on")
	assert.NotContains(t, made.Labels, nodesetv1alpha1.LabelTenant, "another tenant's Dedicated label")
	assert.NotContains(t, made.Labels, corev1.LabelHostname, "another Node's hostname")
	assert.NotContains(t, made.Labels, "node-role.kubernetes.io/control-plane")
}

// TestHostileGroupDriverCannotStampNodesetKeys: whatever a group driver
// reports, labels and taints under nodeset.dev are nodeset's own words on a
// Node: a Shared class's Node gets no nodeset.dev/tenant label or taint
// from its machine (say, left on an EKS node group by the class's earlier
// Dedicated tenancy, or set by a plugin).
func TestHostileGroupDriverCannotStampNodesetKeys(t *testing.T) {
	g := newGroupFixture(t, 1)
	g.group.machineLabels = map[string]string{nodesetv1alpha1.LabelTenant: "team-b", corev1.LabelTopologyZone: "zone-a"}
	g.group.machineTaints = []corev1.Taint{{Key: nodesetv1alpha1.LabelTenant, Value: "team-b", Effect: corev1.TaintEffectNoSchedule}}
	require.NoError(t, g.syncGroup())
	made := g.get("ip-100")
	assert.Equal(t, "zone-a", made.Labels[corev1.LabelTopologyZone])
	assert.NotContains(t, made.Labels, nodesetv1alpha1.LabelTenant)
	for _, taint := range made.Spec.Taints {
		assert.NotEqual(t, nodesetv1alpha1.LabelTenant, taint.Key)
	}
}

// TestAnotherClassesStampReachesNoGroup: a tenant's edit that puts a label
// another class stamps (example.com/pool=gpu of a GPU class) on its Nodes
// reaches no cloud group before the nodeset controller's verdict: the set's
// Accepted may still be of the generation before the edit.
func TestAnotherClassesStampReachesNoGroup(t *testing.T) {
	valid := nodesetv1alpha1.NodeClassStatus{Conditions: []metav1.Condition{{Type: nodesetv1alpha1.NodeClassValid,
		Status: metav1.ConditionTrue, Reason: "Valid", ObservedGeneration: 1}}}
	class := &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "cloud", Generation: 1},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: parametersDriverName,
			RegistrationTimeout: &metav1.Duration{Duration: 10 * time.Minute}},
		Status: valid,
	}
	gpu := &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu", Generation: 1},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: parametersDriverName,
			NodeTemplate:        nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"example.com/pool": "gpu"}},
			RegistrationTimeout: &metav1.Duration{Duration: 10 * time.Minute}},
		Status: valid,
	}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{class, gpu})
	driver := parametersGroupDriver{newGroupDriver()}
	f.controller.registry = drivers.Registry{parametersDriverName: driver}
	f.controller.opts.NodeSets = f.nodesets
	set := &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", UID: "uid-web", Finalizers: []string{"nodeset.dev/nodes"}},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "cloud", Replicas: ptr.To[int32](1),
			Template: nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"example.com/pool": "gpu"}}},
		Status: nodesetv1alpha1.NodeSetStatus{Conditions: []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue,
			Reason: "Accepted", LastTransitionTime: metav1.NewTime(testNow)}}},
	}
	created, err := f.nodesets.NodesetV1alpha1().NodeSets("team-a").Create(context.Background(), set, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, f.setIndexer.Add(created))

	require.NoError(t, f.controller.syncGroup(context.Background(), "team-a/web"))
	assert.Empty(t, driver.ensured, "no group is made or changed for the edit")
	nodes, err := f.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, nodes.Items)
}
