package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// TestTwoAppliersOwnTheirOwnTaints: a GitOps tool and a policy controller
// server-side apply taints to the same NodeSet (and NodeClass, and an EKS
// managed node group's section of either) under their own field managers. Each owns the taints it applied: the second apply neither
// conflicts nor replaces the first one's taints, and when the GitOps tool
// drops its taint from its manifest the policy's taint stays.
func TestTwoAppliersOwnTheirOwnTaints(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "ssa-taints")
	tests := []struct {
		name      string
		gvr       schema.GroupVersionResource
		namespace string
		// object is the applied manifest, with the given taints in its template.
		object func(taints string) string
		path   []string
		// noSchedule and noExecute are the effects as the list spells them
		// (the EKS API's spelling in an eksManagedNodeGroup section).
		noSchedule, noExecute string
	}{
		{
			name: "NodeSet spec.template.taints", gvr: nodeSetGVR, namespace: ns,
			object: func(taints string) string {
				return `{apiVersion: nodeset.dev/v1alpha1, kind: NodeSet, metadata: {name: web, namespace: ` + ns + `},
					spec: {nodeClassName: sim, template: {taints: ` + taints + `}}}`
			},
			path: []string{"spec", "template", "taints"},
		},
		{
			name: "NodeClass spec.nodeTemplate.taints", gvr: nodeClassGVR,
			object: func(taints string) string {
				return `{apiVersion: nodeset.dev/v1alpha1, kind: NodeClass, metadata: {name: ssa-taints},
					spec: {driver: simulated, simulated: {}, nodeTemplate: {taints: ` + taints + `}}}`
			},
			path: []string{"spec", "nodeTemplate", "taints"},
		},
		{
			name: "NodeSet spec.eksManagedNodeGroup.taints", gvr: nodeSetGVR, namespace: ns,
			object: func(taints string) string {
				return `{apiVersion: nodeset.dev/v1alpha1, kind: NodeSet, metadata: {name: gpu, namespace: ` + ns + `},
					spec: {nodeClassName: eks, eksManagedNodeGroup: {taints: ` + taints + `}}}`
			},
			path:       []string{"spec", "eksManagedNodeGroup", "taints"},
			noSchedule: "NO_SCHEDULE", noExecute: "NO_EXECUTE",
		},
		{
			name: "NodeClass spec.eksManagedNodeGroup.taints", gvr: nodeClassGVR,
			object: func(taints string) string {
				return `{apiVersion: nodeset.dev/v1alpha1, kind: NodeClass, metadata: {name: ssa-managed-taints},
					spec: {driver: eks-managed, credentialsSecretRef: {name: aws, namespace: nodeset-system},
						eksManagedNodeGroup: {region: eu-west-1, clusterName: prod, nodeRole: "arn:aws:iam::123456789012:role/eks-node",
							subnets: [subnet-0a1b2c3d], instanceTypes: [m6i.large], taints: ` + taints + `}}}`
			},
			path:       []string{"spec", "eksManagedNodeGroup", "taints"},
			noSchedule: "NO_SCHEDULE", noExecute: "NO_EXECUTE",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.noSchedule == "" {
				tt.noSchedule, tt.noExecute = "NoSchedule", "NoExecute"
			}
			noSchedule, noExecute := tt.noSchedule, tt.noExecute
			client := dynamicClient(t).Resource(tt.gvr).Namespace(tt.namespace)
			apply := func(manager, doc string) error {
				obj := &unstructured.Unstructured{}
				require.NoError(t, yaml.Unmarshal([]byte(doc), &obj.Object))
				_, err := client.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: manager})
				return err
			}
			taints := func(name string) []string {
				obj, err := client.Get(ctx, name, metav1.GetOptions{})
				require.NoError(t, err)
				list, _, err := unstructured.NestedSlice(obj.Object, tt.path...)
				require.NoError(t, err)
				var out []string
				for _, item := range list {
					taint := item.(map[string]any)
					out = append(out, taint["key"].(string)+"="+taint["value"].(string)+":"+taint["effect"].(string))
				}
				return out
			}

			gitops := tt.object(`[{key: example.com/team, value: a, effect: ` + noSchedule + `}]`)
			require.NoError(t, apply("gitops", gitops))
			name := mustName(t, gitops)
			if tt.gvr == nodeClassGVR {
				t.Cleanup(func() { _ = client.Delete(context.Background(), name, metav1.DeleteOptions{}) })
			}
			// The policy controller adds its taint, and one with the same
			// key as GitOps's but another effect: a different taint.
			err := apply("policy", tt.object(`[{key: example.com/gpu, value: "true", effect: `+noSchedule+`},
				{key: example.com/team, value: a, effect: `+noExecute+`}]`))
			require.NoError(t, err, "a second applier's taints conflict with the first's")
			assert.ElementsMatch(t, []string{"example.com/team=a:" + noSchedule, "example.com/gpu=true:" + noSchedule,
				"example.com/team=a:" + noExecute}, taints(name))

			// GitOps changes its taint's value: still no conflict, the
			// policy's taints stay.
			require.NoError(t, apply("gitops", tt.object(`[{key: example.com/team, value: b, effect: `+noSchedule+`}]`)))
			assert.ElementsMatch(t, []string{"example.com/team=b:" + noSchedule, "example.com/gpu=true:" + noSchedule,
				"example.com/team=a:" + noExecute}, taints(name))

			// GitOps drops its taint: only its own goes.
			require.NoError(t, apply("gitops", tt.object(`[]`)))
			assert.ElementsMatch(t, []string{"example.com/gpu=true:" + noSchedule, "example.com/team=a:" + noExecute}, taints(name))

			// A second taint of the same key and effect is refused, naming
			// the list and the key.
			err = apply("gitops", tt.object(`[{key: example.com/x, value: a, effect: `+noSchedule+`},
				{key: example.com/x, value: b, effect: `+noSchedule+`}]`))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "."+strings.Join(tt.path, ".")+": duplicate entries for key")
		})
	}
}

// TestTwoAppliersOwnTheirOwnSourceSecurityGroups: the security groups that
// may reach an EKS managed node group's nodes over SSH are a set, so two
// appliers each own the groups they applied (an atomic list went to the
// last applier whole, or conflicted), and a group named twice is refused,
// naming the field.
func TestTwoAppliersOwnTheirOwnSourceSecurityGroups(t *testing.T) {
	ctx := context.Background()
	client := dynamicClient(t).Resource(nodeClassGVR)
	class := func(groups string) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(`{apiVersion: nodeset.dev/v1alpha1, kind: NodeClass, metadata: {name: ssa-ssh},
			spec: {driver: eks-managed, credentialsSecretRef: {name: aws, namespace: nodeset-system},
				eksManagedNodeGroup: {region: eu-west-1, clusterName: prod, nodeRole: "arn:aws:iam::123456789012:role/eks-node",
					subnets: [subnet-0a1b2c3d], instanceTypes: [m6i.large], remoteAccess: {sourceSecurityGroups: `+groups+`}}}}`), &obj.Object))
		return obj
	}
	apply := func(manager, groups string) error {
		_, err := client.Apply(ctx, "ssa-ssh", class(groups), metav1.ApplyOptions{FieldManager: manager})
		return err
	}
	groups := func() []string {
		obj, err := client.Get(ctx, "ssa-ssh", metav1.GetOptions{})
		require.NoError(t, err)
		list, _, err := unstructured.NestedStringSlice(obj.Object, "spec", "eksManagedNodeGroup", "remoteAccess", "sourceSecurityGroups")
		require.NoError(t, err)
		return list
	}
	require.NoError(t, apply("gitops", `[sg-0a1b2c3d]`))
	t.Cleanup(func() { _ = client.Delete(context.Background(), "ssa-ssh", metav1.DeleteOptions{}) })
	require.NoError(t, apply("bastion", `[sg-0e0e0e0e]`), "a second applier's group conflicts with the first's")
	assert.ElementsMatch(t, []string{"sg-0a1b2c3d", "sg-0e0e0e0e"}, groups())
	require.NoError(t, apply("gitops", `[]`))
	assert.Equal(t, []string{"sg-0e0e0e0e"}, groups(), "the first applier's drop takes only its own group")

	err := apply("gitops", `[sg-0f0f0f0f, sg-0f0f0f0f]`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.eksManagedNodeGroup.remoteAccess.sourceSecurityGroups")
	assert.Contains(t, err.Error(), `duplicate entries for key [="sg-0f0f0f0f"]`)
}

// TestAppliedManifestAndScaleShareReplicas follows docs/getting-started.md
// on keeping NodeSets in Git: a manifest without spec.replicas, applied
// server-side again after kubectl scale, keeps the scaled count; one that
// sets replicas owns it, so its next apply conflicts on .spec.replicas; and
// without replicas, an autoscaling minimum above the default 1 is refused,
// naming the field and the bounds.
func TestAppliedManifestAndScaleShareReplicas(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "ssa-replicas")
	ensureClass(t, "sim")
	client := dynamicClient(t).Resource(nodeSetGVR).Namespace(ns)
	apply := func(doc string) error {
		obj := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj.Object))
		obj.SetNamespace(ns)
		_, err := client.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "gitops"})
		return err
	}
	replicas := func(name string) int64 {
		obj, err := client.Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		value, _, err := unstructured.NestedInt64(obj.Object, "spec", "replicas")
		require.NoError(t, err)
		return value
	}

	require.NoError(t, apply(`{apiVersion: nodeset.dev/v1alpha1, kind: NodeSet, metadata: {name: free}, spec: {nodeClassName: sim}}`))
	assert.Equal(t, int64(1), replicas("free"))
	kubectl(t, "scale", "-n", ns, "nodeset/free", "--replicas=4")
	require.NoError(t, apply(`{apiVersion: nodeset.dev/v1alpha1, kind: NodeSet, metadata: {name: free},
		spec: {nodeClassName: sim, template: {labels: {tier: web}}}}`))
	assert.Equal(t, int64(4), replicas("free"), "an apply without replicas scaled the set back")

	require.NoError(t, apply(`{apiVersion: nodeset.dev/v1alpha1, kind: NodeSet, metadata: {name: pinned}, spec: {nodeClassName: sim, replicas: 2}}`))
	kubectl(t, "scale", "-n", ns, "nodeset/pinned", "--replicas=4")
	err := apply(`{apiVersion: nodeset.dev/v1alpha1, kind: NodeSet, metadata: {name: pinned}, spec: {nodeClassName: sim, replicas: 2}}`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), ".spec.replicas")
	assert.Equal(t, int64(4), replicas("pinned"))

	err = apply(`{apiVersion: nodeset.dev/v1alpha1, kind: NodeSet, metadata: {name: floor},
		spec: {nodeClassName: sim, autoscaling: {minReplicas: 2, maxReplicas: 5}}}`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.replicas must be within spec.autoscaling.minReplicas and spec.autoscaling.maxReplicas: replicas is 1, the bounds are 2 and 5")
}

// TestMetadataUpdateLeavesSpecAndGeneration: an update through the generated
// clientset that changes only metadata, as the nodeset-controller's adding
// its finalizer to a NodeSet is, changes neither the spec nor
// metadata.generation of a NodeSet created without a template (as kubectl
// creates one from a manifest that has none), and gives the updater no spec
// field. Otherwise every new NodeSet is at generation 2 before its controller
// acted, and the controller owns a spec field the user never wrote.
func TestMetadataUpdateLeavesSpecAndGeneration(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "metadata-update")
	ensureClass(t, "sim")
	cs := clientset(t)

	created, err := dynamicClient(t).Resource(nodeSetGVR).Namespace(ns).Create(ctx, nodeSet(ns, "web", setSpec(nil)), metav1.CreateOptions{})
	require.NoError(t, err)
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	set.Finalizers = append(set.Finalizers, "example.com/hold")
	updated, err := cs.NodesetV1alpha1().NodeSets(ns).Update(ctx, set, metav1.UpdateOptions{FieldManager: "finalizer-adder"})
	require.NoError(t, err)
	assert.Equal(t, created.GetGeneration(), updated.Generation, "a metadata-only update moved metadata.generation")
	stored, err := dynamicClient(t).Resource(nodeSetGVR).Namespace(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, stored.Object["spec"], "template", "the update wrote spec.template")
	assertOwnsNoField(t, updated.ManagedFields, "finalizer-adder", `"f:spec"`)
	updated.Finalizers = nil
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Update(ctx, updated, metav1.UpdateOptions{})
	require.NoError(t, err)

	// The same for a NodeClass's nodeTemplate. (Its durations are another
	// matter: a typed round trip spells the defaulted registrationTimeout
	// "15m" as "15m0s"; the controllers write NodeClasses by merge patch.)
	classes := dynamicClient(t).Resource(nodeClassGVR)
	_, err = classes.Create(ctx, nodeClass("metadata-update", simulatedClass(nil)), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = classes.Delete(context.Background(), "metadata-update", metav1.DeleteOptions{}) })
	class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "metadata-update", metav1.GetOptions{})
	require.NoError(t, err)
	class.Finalizers = append(class.Finalizers, "example.com/hold")
	updatedClass, err := cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{FieldManager: "finalizer-adder"})
	require.NoError(t, err)
	storedClass, err := classes.Get(ctx, "metadata-update", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, storedClass.Object["spec"], "nodeTemplate", "the update wrote spec.nodeTemplate")
	assertOwnsNoField(t, updatedClass.ManagedFields, "finalizer-adder", `"f:nodeTemplate"`)
	updatedClass.Finalizers = nil
	_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, updatedClass, metav1.UpdateOptions{})
	require.NoError(t, err)

	// A template that is set survives the same round trip.
	_, err = dynamicClient(t).Resource(nodeSetGVR).Namespace(ns).Create(ctx, nodeSet(ns, "labelled", setSpec(object{
		"template": object{"labels": object{"tier": "web"}}})), metav1.CreateOptions{})
	require.NoError(t, err)
	set, err = cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "labelled", metav1.GetOptions{})
	require.NoError(t, err)
	set.Annotations = map[string]string{"example.com/note": "x"}
	updated, err = cs.NodesetV1alpha1().NodeSets(ns).Update(ctx, set, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"tier": "web"}, updated.Spec.Template.Labels)
}

func assertOwnsNoField(t *testing.T, entries []metav1.ManagedFieldsEntry, manager, field string) {
	t.Helper()
	for _, entry := range entries {
		if entry.Manager == manager && entry.FieldsV1 != nil {
			raw := entry.FieldsV1.GetRawString()
			assert.NotContains(t, raw, field, "%s changed only metadata but owns %s", manager, raw)
		}
	}
}

func mustName(t *testing.T, doc string) string {
	t.Helper()
	obj := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &obj.Object))
	return obj.GetName()
}
