package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/simulated"
	"nodeset.dev/nodeset/pkg/controller/nodeclass"
	"nodeset.dev/nodeset/pkg/controller/nodeset"
	"nodeset.dev/nodeset/pkg/generated/informers/externalversions"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
)

// runClassController runs, until the test ends, the NodeClassController of
// a node controller serving the simulated driver, against the real API
// server and with no webhook: what it writes in a class's Valid condition
// is all an admin learns of a class the webhook did not see.
func runClassController(t *testing.T) {
	t.Helper()
	cs := clientset(t)
	factory := externalversions.NewSharedInformerFactory(cs, 0)
	classes, sets := factory.Nodeset().V1alpha1().NodeClasses(), factory.Nodeset().V1alpha1().NodeSets()
	c, err := nodeclass.NewController(cs, classes, sets, drivers.Registry{nodesetv1alpha1.DriverSimulated: simulated.New(nil)}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	factory.Start(ctx.Done())
	go func() {
		defer close(done)
		_ = c.Run(ctx, 1)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
	})
}

// validOf waits for the class's Valid condition of its current generation.
func validOf(t *testing.T, name string) *metav1.Condition {
	t.Helper()
	var valid *metav1.Condition
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		class, err := clientset(t).NodesetV1alpha1().NodeClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		valid = meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
		return valid != nil && valid.ObservedGeneration == class.Generation, nil
	})
	require.NoError(t, err, "NodeClass %s: no Valid condition for its current generation", name)
	return valid
}

// TestClassStampingNodesetsOwnKeysSaysWhy: a class's nodeTemplate that
// stamps a label, annotation or taint nodeset itself writes and reads on
// every Node (which ties a Node to its NodeSet, records its machine's and
// its drain's state, or keeps pods off it until it is Ready) cannot do
// what the admin wrote: nodeset overwrites the value, lifts the taint when
// the kubelet is Ready, or acts on it for every Node of the class (a
// drain-finished annotation removes machines with no drain). With no
// webhook, such a class is Valid=False naming the field and the rule,
// instead of being silently half-applied; keys under nodeset.dev that
// nodeset does not own on a Node stay the admin's to set.
func TestClassStampingNodesetsOwnKeysSaysWhy(t *testing.T) {
	runClassController(t)
	tests := []struct {
		name     string
		tenancy  nodesetv1alpha1.Tenancy
		template nodesetv1alpha1.NodeTemplate
		want     []string // in the message of Valid=False; none: Valid=True
	}{
		{name: "startup taint", template: nodesetv1alpha1.NodeTemplate{Taints: []nodesetv1alpha1.Taint{
			{Key: "example.com/pool", Effect: "NoSchedule"}, {Key: nodesetv1alpha1.TaintUnregistered, Effect: "NoExecute"}}},
			want: []string{"spec.nodeTemplate.taints[1].key", nodesetv1alpha1.TaintUnregistered, "startup taint"}},
		{name: "startup taint of another effect", template: nodesetv1alpha1.NodeTemplate{Taints: []nodesetv1alpha1.Taint{
			{Key: nodesetv1alpha1.TaintUnregistered, Effect: "NoSchedule"}}},
			want: []string{"spec.nodeTemplate.taints[0].key", "lifts it"}},
		{name: "cluster-autoscaler's startup taint", template: nodesetv1alpha1.NodeTemplate{Taints: []nodesetv1alpha1.Taint{
			{Key: nodeutil.AutoscalerStartupTaint, Effect: "NoExecute"}}},
			want: []string{"spec.nodeTemplate.taints[0].key", nodeutil.AutoscalerStartupTaint}},
		{name: "NodeSet label", template: nodesetv1alpha1.NodeTemplate{Labels: map[string]string{nodesetv1alpha1.LabelNodeSet: "web"}},
			want: []string{"spec.nodeTemplate.labels", nodesetv1alpha1.LabelNodeSet}},
		{name: "class label", template: nodesetv1alpha1.NodeTemplate{Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: "other"}},
			want: []string{"spec.nodeTemplate.labels", nodesetv1alpha1.LabelNodeClass}},
		{name: "template-hash label", template: nodesetv1alpha1.NodeTemplate{Labels: map[string]string{nodesetv1alpha1.LabelTemplateHash: "x"}},
			want: []string{"spec.nodeTemplate.labels", nodesetv1alpha1.LabelTemplateHash}},
		{name: "tenant label of a Dedicated class", tenancy: nodesetv1alpha1.TenancyDedicated,
			template: nodesetv1alpha1.NodeTemplate{Labels: map[string]string{nodesetv1alpha1.LabelTenant: "ml-research"}},
			want:     []string{"spec.nodeTemplate.labels", nodesetv1alpha1.LabelTenant, "Dedicated"}},
		{name: "tenant taint of a Dedicated class", tenancy: nodesetv1alpha1.TenancyDedicated,
			template: nodesetv1alpha1.NodeTemplate{Taints: []nodesetv1alpha1.Taint{{Key: nodesetv1alpha1.LabelTenant, Value: "ml-research", Effect: "NoSchedule"}}},
			want:     []string{"spec.nodeTemplate.taints[0].key", "Dedicated"}},
		{name: "drain-finished annotation", template: nodesetv1alpha1.NodeTemplate{Annotations: map[string]string{nodesetv1alpha1.AnnotationDrainFinished: "2026-01-01T00:00:00Z"}},
			want: []string{"spec.nodeTemplate.annotations", nodesetv1alpha1.AnnotationDrainFinished}},
		{name: "machine-created annotation", template: nodesetv1alpha1.NodeTemplate{Annotations: map[string]string{nodesetv1alpha1.AnnotationMachineCreated: "2000-01-01T00:00:00Z"}},
			want: []string{"spec.nodeTemplate.annotations", nodesetv1alpha1.AnnotationMachineCreated}},

		// The admin's own: nodeset does not write these on a Node of the class.
		{name: "tenant label of a Shared class", template: nodesetv1alpha1.NodeTemplate{Labels: map[string]string{nodesetv1alpha1.LabelTenant: "ml-research"}}},
		{name: "accelerator label", template: nodesetv1alpha1.NodeTemplate{Labels: map[string]string{nodesetv1alpha1.LabelAccelerator: "nvidia.com-gpu"}}},
		{name: "tenant taint of another effect on a Dedicated class", tenancy: nodesetv1alpha1.TenancyDedicated,
			template: nodesetv1alpha1.NodeTemplate{Taints: []nodesetv1alpha1.Taint{{Key: nodesetv1alpha1.LabelTenant, Value: "ml-research", Effect: "NoExecute"}}}},
		{name: "the cluster's domains", template: nodesetv1alpha1.NodeTemplate{
			Labels: map[string]string{"node-role.kubernetes.io/batch": ""},
			Taints: []nodesetv1alpha1.Taint{{Key: "node.kubernetes.io/out-of-service", Effect: "NoExecute"}}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("stamps-%d", i)
			class := &nodesetv1alpha1.NodeClass{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated, Tenancy: tt.tenancy,
					DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}},
					NodeTemplate:   tt.template},
			}
			_, err := clientset(t).NodesetV1alpha1().NodeClasses().Create(context.Background(), class, metav1.CreateOptions{})
			require.NoError(t, err, "no webhook: the schema admits it")
			t.Cleanup(func() {
				_ = clientset(t).NodesetV1alpha1().NodeClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
			})
			valid := validOf(t, name)
			if len(tt.want) == 0 {
				assert.Equal(t, metav1.ConditionTrue, valid.Status, valid.Message)
				return
			}
			assert.Equal(t, metav1.ConditionFalse, valid.Status, "the class is not half-applied in silence")
			assert.Equal(t, nodeclass.ReasonInvalidConfiguration, valid.Reason)
			for _, want := range tt.want {
				assert.Contains(t, valid.Message, want)
			}
		})
	}
}

// TestStartupTaintInAClassMakesNoNode shows why a class may not stamp
// nodeset's startup taint: a Node of such a class, as the nodeset
// controller makes it, is refused by the API server, every time.
func TestStartupTaintInAClassMakesNoNode(t *testing.T) {
	class := &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "startup-tainted"},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}},
			NodeTemplate: nodesetv1alpha1.NodeTemplate{Taints: []nodesetv1alpha1.Taint{
				{Key: nodesetv1alpha1.TaintUnregistered, Effect: "NoExecute"}}}},
	}
	set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: class.Name}}
	effective, err := resolve.EffectiveSpec(class, set)
	require.NoError(t, err)
	node := resolve.NewNode(&effective, class.Name, set, resolve.TemplateHash(&effective, set))
	node.Name = "startup-tainted-x1y2z"
	node.Finalizers = nil
	_, err = kubeClient(t).CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsInvalid(err), "%v", err)
	assert.True(t, strings.Contains(err.Error(), "taints must be unique by key and effect pair"), "%v", err)
}

// runNodeSetController runs, until the test ends, the NodeSetController in
// the test's process against the real API server, with no webhook.
func runNodeSetController(t *testing.T) {
	t.Helper()
	cs, kube := clientset(t), kubeClient(t)
	factory := externalversions.NewSharedInformerFactory(cs, 0)
	kubeFactory := informers.NewSharedInformerFactory(kube, 0)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := nodeset.NewController(ctx, kube, cs, &record.FakeRecorder{}, kubeFactory.Core().V1().Nodes(), kubeFactory.Core().V1().Namespaces(),
		factory.Nodeset().V1alpha1().NodeSets(), factory.Nodeset().V1alpha1().NodeClasses(), nodeset.Options{})
	require.NoError(t, err)
	done := make(chan struct{})
	factory.Start(ctx.Done())
	kubeFactory.Start(ctx.Done())
	go func() {
		defer close(done)
		_ = c.Run(ctx, 1)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
		kubeFactory.Shutdown()
	})
}

// TestRelabelledNamespaceKeepsItsNodes: a namespace relabelled so that a
// class's selector no longer matches it has its NodeSets turn
// Accepted=False, NamespaceNotAllowed, keeps the Nodes it has, and scaling
// the set then neither adds nor removes one; allowed again, the set scales;
// deleted, its Nodes go (docs/tenancy.md, allowedNamespaces).
func TestRelabelledNamespaceKeepsItsNodes(t *testing.T) {
	runClassController(t)
	runNodeSetController(t)
	ctx := context.Background()
	cs, kube := clientset(t), kubeClient(t)
	ns := createNamespace(t, "relabel")
	label := func(tier string) {
		namespace, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		require.NoError(t, err)
		namespace.Labels["example.com/tier"] = tier
		_, err = kube.CoreV1().Namespaces().Update(ctx, namespace, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	label("gold")
	const class = "relabel-gold"
	_, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}},
			AllowedNamespaces: &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromSelector,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/tier": "gold"}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: class, Replicas: ptr.To[int32](2)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	nodesOf := func(ctx context.Context) (live, deleting int, err error) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns})
		if err != nil {
			return 0, 0, err
		}
		for _, n := range nodes.Items {
			if n.DeletionTimestamp == nil {
				live++
			} else {
				deleting++
			}
		}
		return live, deleting, nil
	}
	waitFor := func(what string, cond func(ctx context.Context) (bool, string)) {
		t.Helper()
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			ok, why := cond(ctx)
			last = why
			return ok, nil
		})
		require.NoError(t, err, "%s; last: %s", what, last)
	}
	accepted := func(reason string, live int) func(ctx context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			got, _, err := nodesOf(ctx)
			if err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			if c == nil || c.ObservedGeneration != set.Generation || set.Status.ObservedGeneration != set.Generation {
				return false, "not synced yet"
			}
			return c.Reason == reason && got == live, fmt.Sprintf("%s (%s), %d Nodes", c.Reason, c.Message, got)
		}
	}
	waitFor("two Nodes", accepted("Accepted", 2))

	label("silver")
	waitFor("NamespaceNotAllowed, Nodes kept", accepted("NamespaceNotAllowed", 2))
	for _, replicas := range []int32{3, 1} {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		set.Spec.Replicas = ptr.To(replicas)
		_, err = cs.NodesetV1alpha1().NodeSets(ns).Update(ctx, set, metav1.UpdateOptions{})
		require.NoError(t, err)
		waitFor(fmt.Sprintf("scaled to %d while not allowed: nothing made or removed", replicas), accepted("NamespaceNotAllowed", 2))
		_, deleting, err := nodesOf(ctx)
		require.NoError(t, err)
		assert.Zero(t, deleting, "no Node removed")
	}

	label("gold")
	waitFor("allowed again, the set scales to 1", accepted("Accepted", 1))
	label("silver")
	waitFor("not allowed again", accepted("NamespaceNotAllowed", 1))
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "web", metav1.DeleteOptions{}))
	waitFor("the deleted set's Nodes go", func(ctx context.Context) (bool, string) {
		live, deleting, err := nodesOf(ctx)
		if err != nil {
			return false, err.Error()
		}
		return live == 0, fmt.Sprintf("%d live, %d deleting", live, deleting)
	})
}
