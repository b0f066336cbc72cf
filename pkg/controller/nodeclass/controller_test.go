package nodeclass

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/simulated"
	nodesetfake "nodeset.dev/nodeset/pkg/generated/clientset/versioned/fake"
	"nodeset.dev/nodeset/pkg/generated/informers/externalversions"
	"nodeset.dev/nodeset/pkg/resolve"
)

// group is a group driver, configured through spec.parameters, whose
// machines have 2 CPUs.
type group struct {
	drivers.GroupDriver
	*simulated.Driver
}

func (group) Name() string                                  { return "cloud-group" }
func (group) Validate(context.Context, drivers.Class) error { return nil }

func (group) Capacity(context.Context, drivers.Class) (drivers.Capacity, error) {
	return drivers.Capacity{Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}, nil
}

type fixture struct {
	client     *nodesetfake.Clientset
	controller *Controller
	classes    cache.Indexer
}

func newFixture(t *testing.T, class *nodesetv1alpha1.NodeClass, sets ...*nodesetv1alpha1.NodeSet) *fixture {
	t.Helper()
	client := nodesetfake.NewSimpleClientset(class)
	factory := externalversions.NewSharedInformerFactory(client, 0)
	require.NoError(t, factory.Nodeset().V1alpha1().NodeClasses().Informer().GetIndexer().Add(class))
	for _, set := range sets {
		_, err := client.NodesetV1alpha1().NodeSets(set.Namespace).Create(context.Background(), set, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, factory.Nodeset().V1alpha1().NodeSets().Informer().GetIndexer().Add(set))
	}
	registry := drivers.Registry{nodesetv1alpha1.DriverSimulated: simulated.New(nil), "cloud-group": group{Driver: simulated.New(nil)}}
	c, err := NewController(client, factory.Nodeset().V1alpha1().NodeClasses(), factory.Nodeset().V1alpha1().NodeSets(), registry, nil)
	require.NoError(t, err)
	return &fixture{client: client, controller: c, classes: factory.Nodeset().V1alpha1().NodeClasses().Informer().GetIndexer()}
}

func simClass(driver string) *nodesetv1alpha1.NodeClass {
	class := &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "sim", Generation: 1},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: driver, TenantOverrides: []string{"instanceType", "capacity"},
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}}},
	}
	if driver != nodesetv1alpha1.DriverSimulated {
		class.Spec.Simulated, class.Spec.TenantOverrides = nil, nil
		class.Spec.Parameters = &runtime.RawExtension{Raw: []byte(`{}`)}
	}
	return class
}

func TestValidClassSaysWhatKindOfDriverServesIt(t *testing.T) {
	for _, tt := range []struct {
		driver string
		want   nodesetv1alpha1.DriverKind
	}{
		{nodesetv1alpha1.DriverSimulated, nodesetv1alpha1.DriverKindMachine},
		{"cloud-group", nodesetv1alpha1.DriverKindGroup},
	} {
		t.Run(tt.driver, func(t *testing.T) {
			f := newFixture(t, simClass(tt.driver))
			require.NoError(t, f.controller.sync(context.Background(), "sim"))
			class, err := f.client.NodesetV1alpha1().NodeClasses().Get(context.Background(), "sim", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, tt.want, class.Status.DriverKind)
			require.Len(t, class.Status.Conditions, 1)
			assert.Equal(t, metav1.ConditionTrue, class.Status.Conditions[0].Status)
			assert.Equal(t, "2", ptr.To(class.Status.Capacity.Resources[corev1.ResourceCPU]).String(), "the class's own capacity")
		})
	}
}

func validated(class *nodesetv1alpha1.NodeClass) *nodesetv1alpha1.NodeClass {
	class.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeClassValid, Status: metav1.ConditionTrue, ObservedGeneration: class.Generation}}
	return class
}

func overridingSet(class *nodesetv1alpha1.NodeClass) (*nodesetv1alpha1.NodeSet, string) {
	set := &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "team-a"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "sim", DriverSections: nodesetv1alpha1.DriverSections{
			Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.large",
				Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}}}},
	}
	effective, _ := resolve.EffectiveSpec(class, set)
	hash := resolve.TemplateHash(&effective, set)
	set.Status.TemplateHash = hash
	return set, hash
}

func TestNodeSetGetsTheCapacityOfItsOwnTemplate(t *testing.T) {
	class := validated(simClass(nodesetv1alpha1.DriverSimulated))
	set, hash := overridingSet(class)
	f := newFixture(t, class, set)
	require.NoError(t, f.controller.syncSetCapacity(context.Background(), "team-a/big"))
	got, err := f.client.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), "big", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, got.Status.Capacity)
	assert.Equal(t, hash, got.Status.Capacity.TemplateHash)
	assert.Equal(t, "16", ptr.To(got.Status.Capacity.Resources[corev1.ResourceCPU]).String(), "the set's override, not the class's 2 CPUs")
	assert.Equal(t, "sim.large", got.Status.Capacity.Labels[corev1.LabelInstanceTypeStable])

	// Published once per template: a second sync of the set as published writes nothing.
	writes := len(f.client.Actions())
	f2 := newFixture(t, class, got)
	require.NoError(t, f2.controller.syncSetCapacity(context.Background(), "team-a/big"))
	for _, a := range f2.client.Actions()[1:] { // the fixture's own create
		assert.NotEqual(t, "patch", a.GetVerb(), "nothing to write for an up-to-date capacity")
	}
	assert.Positive(t, writes)
}

func TestNoCapacityBeforeTheClassIsValid(t *testing.T) {
	class := simClass(nodesetv1alpha1.DriverSimulated)
	set, _ := overridingSet(class)
	f := newFixture(t, class, set)
	require.NoError(t, f.controller.syncSetCapacity(context.Background(), "team-a/big"))
	for _, a := range f.client.Actions() {
		assert.NotEqual(t, "patch", a.GetVerb(), "a class not validated yet publishes nothing")
	}
}

// TestAClassSaysSinceWhenItsNodesAreSealed: a class no node controller has
// served yet seals its Nodes since its creation; one an earlier release
// served (a verdict, no sealedSince) gets UpgradeGrace from now, for the
// Nodes that release still makes during the upgrade; either is kept once
// written, through a new generation.
func TestAClassSaysSinceWhenItsNodesAreSealed(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sealedSince := func(class *nodesetv1alpha1.NodeClass) time.Time {
		t.Helper()
		f := newFixture(t, class)
		require.NoError(t, f.controller.sync(context.Background(), "sim"))
		got, err := f.client.NodesetV1alpha1().NodeClasses().Get(context.Background(), "sim", metav1.GetOptions{})
		require.NoError(t, err)
		require.NotNil(t, got.Status.SealedSince)
		return got.Status.SealedSince.Time
	}

	fresh := simClass(nodesetv1alpha1.DriverSimulated)
	fresh.CreationTimestamp = metav1.NewTime(created)
	assert.Equal(t, created, sealedSince(fresh).UTC(), "a new class: since its creation")

	earlier := validated(simClass(nodesetv1alpha1.DriverSimulated))
	earlier.CreationTimestamp = metav1.NewTime(created)
	before := time.Now()
	got := sealedSince(earlier)
	assert.False(t, got.Before(before.Add(UpgradeGrace).Truncate(time.Second)), "an earlier release's class: %s", got)
	assert.False(t, got.After(time.Now().Add(UpgradeGrace)), "an earlier release's class: %s", got)

	kept := validated(simClass(nodesetv1alpha1.DriverSimulated))
	kept.Generation = 2
	kept.Status.SealedSince = &metav1.Time{Time: created.Add(time.Hour)}
	assert.Equal(t, created.Add(time.Hour), sealedSince(kept).UTC(), "kept")
}
