package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

type object = map[string]any

func nodeClass(name string, spec object) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: object{
		"apiVersion": "nodeset.dev/v1alpha1", "kind": "NodeClass",
		"metadata": object{"name": name}, "spec": spec,
	}}
}

func nodeSet(namespace, name string, spec object) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: object{
		"apiVersion": "nodeset.dev/v1alpha1", "kind": "NodeSet",
		"metadata": object{"name": name, "namespace": namespace}, "spec": spec,
	}}
}

func simulatedClass(extra object) object {
	spec := object{"driver": "simulated", "simulated": object{}}
	for k, v := range extra {
		spec[k] = v
	}
	return spec
}

func setSpec(extra object) object {
	spec := object{"nodeClassName": "sim"}
	for k, v := range extra {
		spec[k] = v
	}
	return spec
}

// TestInvalidObjectsRejected sends bad NodeClasses and NodeSets to the API
// server: each is refused with a message that names the field and the rule,
// and nothing is stored.
func TestInvalidObjectsRejected(t *testing.T) {
	ns := createNamespace(t, "invalid")
	tests := []struct {
		name string
		obj  *unstructured.Unstructured
		want []string
	}{
		// NodeClass
		{"no driver section", nodeClass("c1", object{"driver": "simulated"}),
			[]string{"exactly one driver section"}},
		{"two driver sections", nodeClass("c2", object{"driver": "simulated", "simulated": object{},
			"eksManagedNodeGroup": object{"clusterName": "a", "region": "eu-west-1", "nodeRole": "arn:aws:iam::123456789012:role/x"}}),
			[]string{"exactly one driver section"}},
		{"section does not match driver", nodeClass("c3", object{"driver": "eks-asg", "simulated": object{}}),
			[]string{"spec.eksAutoscalingGroup must be set when spec.driver is eks-asg"}},
		{"parameters for a built-in driver", nodeClass("c4", object{"driver": "simulated", "parameters": object{"a": 1}}),
			[]string{"spec.parameters is only for out-of-tree drivers", "spec.simulated must be set"}},
		{"bad driver name", nodeClass("c5", object{"driver": "My_Driver", "parameters": object{}}),
			[]string{"spec.driver", "should match"}},
		{"unknown tenancy", nodeClass("c6", simulatedClass(object{"tenancy": "Private"})),
			[]string{"spec.tenancy", "Unsupported value", "Shared", "Dedicated"}},
		{"List without namespaces", nodeClass("c7", simulatedClass(object{"allowedNamespaces": object{"from": "List"}})),
			[]string{"spec.allowedNamespaces", "must list at least one namespace when from is List"}},
		{"Selector without selector", nodeClass("c8", simulatedClass(object{"allowedNamespaces": object{"from": "Selector"}})),
			[]string{"spec.allowedNamespaces.selector is required when from is Selector"}},
		{"namespaces with from All", nodeClass("c9", simulatedClass(object{"allowedNamespaces": object{"from": "All", "namespaces": []any{"a"}}})),
			[]string{"namespaces may only be set when from is List"}},
		{"registrationTimeout not a duration", nodeClass("c10", simulatedClass(object{"registrationTimeout": "ten minutes"})),
			[]string{"spec.registrationTimeout must be a duration of at least 1s"}},
		{"registrationTimeout zero", nodeClass("c11", simulatedClass(object{"registrationTimeout": "0s"})),
			[]string{"spec.registrationTimeout must be a duration of at least 1s"}},
		{"drain timeout not a duration", nodeClass("c12", simulatedClass(object{"drain": object{"timeout": "forever"}})),
			[]string{"spec.drain.timeout must be a non-negative duration"}},
		{"drain onTimeout unknown", nodeClass("c13", simulatedClass(object{"drain": object{"onTimeout": "Ignore"}})),
			[]string{"spec.drain.onTimeout", "Unsupported value"}},
		{"negative maxNodes", nodeClass("c14", simulatedClass(object{"limits": object{"maxNodes": -1}})),
			[]string{"spec.limits.maxNodes", "greater than or equal to 0"}},
		{"bad taint effect", nodeClass("c15", simulatedClass(object{"nodeTemplate": object{"taints": []any{object{"key": "a", "effect": "Sometimes"}}}})),
			[]string{"spec.nodeTemplate.taints[0].effect", "Unsupported value"}},
		{"duplicate taint", nodeClass("c16", simulatedClass(object{"nodeTemplate": object{"taints": []any{
			object{"key": "a", "effect": "NoSchedule"}, object{"key": "a", "value": "b", "effect": "NoSchedule"}}}})),
			[]string{"spec.nodeTemplate.taints", "each key and effect may appear only once"}},
		{"failurePercent over 100", nodeClass("c17", object{"driver": "simulated", "simulated": object{"failurePercent": 150}}),
			[]string{"spec.simulated.failurePercent", "less than or equal to 100"}},
		{"capacity not a quantity", nodeClass("c18", object{"driver": "simulated", "simulated": object{"capacity": object{"cpu": "lots"}}}),
			[]string{"spec.simulated.capacity.cpu"}},
		{"bootDelay not a duration", nodeClass("c19", object{"driver": "simulated", "simulated": object{"bootDelay": "soon"}}),
			[]string{"simulated.bootDelay must be a duration"}},
		{"eks-asg without region", nodeClass("c20", object{"driver": "eks-asg", "eksAutoscalingGroup": object{"clusterName": "prod"}}),
			[]string{"spec.eksAutoscalingGroup.clusterName and spec.eksAutoscalingGroup.region are required"}},
		{"eks-asg instanceType and mixedInstances", nodeClass("c21", object{"driver": "eks-asg", "eksAutoscalingGroup": object{
			"clusterName": "prod", "region": "eu-west-1", "instanceType": "m5.large",
			"mixedInstances": object{"instanceTypes": []any{"m5.large"}}}}),
			[]string{"set instanceType or mixedInstances, not both"}},
		{"eks-asg bad AMI id", nodeClass("c22", object{"driver": "eks-asg", "eksAutoscalingGroup": object{
			"clusterName": "prod", "region": "eu-west-1", "imageID": "ubuntu-24.04"}}),
			[]string{"spec.eksAutoscalingGroup.imageID", "should match"}},
		{"eks-asg spot percentage over 100", nodeClass("c23", object{"driver": "eks-asg", "eksAutoscalingGroup": object{
			"clusterName": "prod", "region": "eu-west-1",
			"mixedInstances": object{"instanceTypes": []any{"m5.large"}, "onDemandPercentageAboveBaseCapacity": 101}}}),
			[]string{"onDemandPercentageAboveBaseCapacity", "less than or equal to 100"}},
		{"eks-managed update config both", nodeClass("c24", object{"driver": "eks-managed", "eksManagedNodeGroup": object{
			"clusterName": "prod", "region": "eu-west-1", "nodeRole": "arn:aws:iam::123456789012:role/x",
			"updateConfig": object{"maxUnavailable": 1, "maxUnavailablePercentage": 10}}}),
			[]string{"set exactly one of maxUnavailable and maxUnavailablePercentage"}},
		{"eks-managed without nodeRole", nodeClass("c25", object{"driver": "eks-managed", "eksManagedNodeGroup": object{
			"clusterName": "prod", "region": "eu-west-1"}}),
			[]string{"clusterName, region and nodeRole are required"}},
		{"docker-machine without driverName", nodeClass("c26", object{"driver": "docker-machine", "dockerMachine": object{}}),
			[]string{"spec.dockerMachine.driverName is required"}},
		{"docker-machine UserData without option", nodeClass("c27", object{"driver": "docker-machine", "dockerMachine": object{
			"driverName": "generic", "provisioning": object{"method": "UserData"}}}),
			[]string{"provisioning.userDataOption is required when method is UserData"}},
		{"tenantOverrides not a field path", nodeClass("c28", simulatedClass(object{"tenantOverrides": []any{"instance-type!"}})),
			[]string{"spec.tenantOverrides[0]", "should match"}},
		{"unknown driver with a built-in section", nodeClass("c29", object{"driver": "foo", "simulated": object{}}),
			[]string{"spec: Invalid value", "spec.simulated is only for spec.driver simulated; an out-of-tree driver is configured through spec.parameters"}},
		{"built-in section of another built-in driver", nodeClass("c30", object{"driver": "docker-machine", "simulated": object{}}),
			[]string{"spec.simulated is only for spec.driver simulated", "spec.dockerMachine must be set when spec.driver is docker-machine"}},
		{"class name of 64", nodeClass(strings.Repeat("c", 64), simulatedClass(nil)),
			[]string{"metadata.name must be at most 63 characters", "nodeset.dev/nodeclass label"}},
		{"class taint key name of 64", nodeClass("c31", simulatedClass(object{"nodeTemplate": object{"taints": []any{object{"key": strings.Repeat("k", 64), "effect": "NoSchedule"}}}})),
			[]string{"spec.nodeTemplate.taints[0].key", "should match"}},
		{"class taint key prefix of 254", nodeClass("c32", simulatedClass(object{"nodeTemplate": object{"taints": []any{object{"key": strings.Repeat("p", 254) + "/k", "effect": "NoSchedule"}}}})),
			[]string{"spec.nodeTemplate.taints[0].key", "the prefix before '/' must be at most 253 characters"}},
		{"class label value of 64", nodeClass("c33", simulatedClass(object{"nodeTemplate": object{"labels": object{"tier": strings.Repeat("v", 64)}}})),
			[]string{"spec.nodeTemplate.labels", "values at most 63"}},
		{"managed node group taint key", nodeClass("c34", object{"driver": "eks-managed", "eksManagedNodeGroup": object{
			"clusterName": "prod", "region": "eu-west-1", "nodeRole": "arn:aws:iam::123456789012:role/x",
			"taints": []any{object{"key": "a b", "effect": "NO_SCHEDULE"}}}}),
			[]string{"spec.eksManagedNodeGroup.taints[0].key", "should match"}},
		{"registrationTimeout over a day", nodeClass("c35", simulatedClass(object{"registrationTimeout": "25h"})),
			[]string{"spec.registrationTimeout must be a duration of at least 1s and at most 24h"}},
		{"registrationTimeout past time.Duration", nodeClass("c36", simulatedClass(object{"registrationTimeout": "9999999999h"})),
			[]string{"spec.registrationTimeout must be a duration of at least 1s and at most 24h"}},
		{"kubelet argument longer than user data", nodeClass("c37", object{"driver": "eks-asg", "eksAutoscalingGroup": object{
			"clusterName": "prod", "region": "eu-west-1", "bootstrap": object{"kubeletExtraArgs": []any{"--v=" + strings.Repeat("2", 16381)}}}}),
			[]string{"spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs[0]", "Too long", "16384"}},
		{"pre-bootstrap command longer than user data", nodeClass("c38", object{"driver": "eks-asg", "eksAutoscalingGroup": object{
			"clusterName": "prod", "region": "eu-west-1", "bootstrap": object{"preBootstrapCommands": []any{"echo " + strings.Repeat("x", 16380)}}}}),
			[]string{"spec.eksAutoscalingGroup.bootstrap.preBootstrapCommands[0]", "Too long", "16384"}},
		{"managed node group label key over EKS's 63", nodeClass("c39", managedClass(object{"labels": object{strings.Repeat("p", 60) + ".io/k": "v"}})),
			[]string{"spec.eksManagedNodeGroup.labels", "EKS allows keys of 1 to 63 characters, prefix included"}},
		{"managed node group label with an empty value", nodeClass("c40", managedClass(object{"labels": object{"gpu": ""}})),
			[]string{"spec.eksManagedNodeGroup.labels", "values of 1 to 63"}},
		{"managed node group label of a reserved domain", nodeClass("c41", managedClass(object{"labels": object{"node-role.kubernetes.io/web": "v"}})),
			[]string{"spec.eksManagedNodeGroup.labels", "EKS refuses keys containing kubernetes.io/"}},
		{"managed node group taint key over EKS's 63", nodeClass("c42", managedClass(object{
			"taints": []any{object{"key": strings.Repeat("p", 60) + ".io/k", "effect": "NO_SCHEDULE"}}})),
			[]string{"spec.eksManagedNodeGroup.taints[0].key", "Too long", "63"}},
		{"managed node group tag key over 128", nodeClass("c43", managedClass(object{"tags": object{strings.Repeat("k", 129): "v"}})),
			[]string{"spec.eksManagedNodeGroup.tags", "EKS allows keys of 1 to 128 characters and values of at most 256"}},
		{"managed node group tag value over 256", nodeClass("c44", managedClass(object{"tags": object{"team": strings.Repeat("v", 257)}})),
			[]string{"spec.eksManagedNodeGroup.tags", "values of at most 256"}},
		{"managed node group tag under aws:", nodeClass("c45", managedClass(object{"tags": object{"AWS:team": "v"}})),
			[]string{"spec.eksManagedNodeGroup.tags", "keys under aws: are reserved for AWS"}},
		{"managed node group disk over gp3's 16384 GiB", nodeClass("c46", managedClass(object{"diskSize": 16385})),
			[]string{"spec.eksManagedNodeGroup.diskSize", "less than or equal to 16384"}},
		{"managed node group launch template name of 2", nodeClass("c47", managedClass(object{"launchTemplate": object{"name": "lt"}})),
			[]string{"spec.eksManagedNodeGroup.launchTemplate.name", "at least 3"}},
		// NodeSet
		{"NodeSet name of 64", nodeSet(ns, strings.Repeat("s", 64), setSpec(nil)),
			[]string{"metadata.name must be at most 63 characters", "nodeset.dev/nodeset label"}},
		{"taint key prefix of 254", nodeSet(ns, "s15", setSpec(object{"template": object{"taints": []any{object{"key": strings.Repeat("p", 254) + "/k", "effect": "NoSchedule"}}}})),
			[]string{"spec.template.taints[0].key", "the prefix before '/' must be at most 253 characters"}},
		{"template annotations over 256KiB", nodeSet(ns, "s16", setSpec(object{"template": object{"annotations": object{
			"a": strings.Repeat("x", 200000), "b": strings.Repeat("y", 70000)}}})),
			[]string{"spec.template.annotations", "keys and values together must be at most 256 KiB"}},
		{"template label value of 64", nodeSet(ns, "s17", setSpec(object{"template": object{"labels": object{"tier": strings.Repeat("v", 64)}}})),
			[]string{"spec.template.labels", "values at most 63"}},
		{"kubelet argument of a set longer than user data", nodeSet(ns, "s21", setSpec(object{"eksAutoscalingGroup": object{
			"bootstrap": object{"kubeletExtraArgs": []any{"--v=" + strings.Repeat("2", 16381)}}}})),
			[]string{"spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs[0]", "Too long", "16384"}},
		{"bootDelay past time.Duration", nodeSet(ns, "s18", setSpec(object{"simulated": object{"bootDelay": "9999999999h"}})),
			[]string{"spec.simulated.bootDelay", "simulated.bootDelay must be a duration of at most 1h"}},
		{"negative replicas", nodeSet(ns, "s1", setSpec(object{"replicas": -1})),
			[]string{"spec.replicas", "greater than or equal to 0"}},
		{"missing nodeClassName", nodeSet(ns, "s2", object{"replicas": 1}),
			[]string{"spec.nodeClassName", "Required value"}},
		{"autoscaling min above max", nodeSet(ns, "s3", setSpec(object{"replicas": 3, "autoscaling": object{"minReplicas": 5, "maxReplicas": 2}})),
			[]string{"spec.autoscaling.minReplicas must be less than or equal to spec.autoscaling.maxReplicas: minReplicas is 5, maxReplicas is 2"}},
		{"replicas above autoscaling max", nodeSet(ns, "s4", setSpec(object{"replicas": 12, "autoscaling": object{"minReplicas": 1, "maxReplicas": 10}})),
			[]string{"spec.replicas: Invalid value", "spec.replicas must be within spec.autoscaling.minReplicas and spec.autoscaling.maxReplicas: replicas is 12, the bounds are 1 and 10"}},
		{"progress deadline not above minReadySeconds", nodeSet(ns, "s19", setSpec(object{"minReadySeconds": 60, "progressDeadlineSeconds": 60})),
			[]string{"spec.progressDeadlineSeconds: Invalid value", "spec.progressDeadlineSeconds must be greater than spec.minReadySeconds: progressDeadlineSeconds is 60, minReadySeconds is 60"}},
		{"progress deadline of 0", nodeSet(ns, "s20", setSpec(object{"progressDeadlineSeconds": 0})),
			[]string{"spec.progressDeadlineSeconds", "greater than or equal to 1"}},
		{"reserved label", nodeSet(ns, "s5", setSpec(object{"template": object{"labels": object{"nodeset.dev/nodeset": "other"}}})),
			[]string{"spec.template.labels: keys under nodeset.dev/ are reserved"}},
		{"reserved annotation", nodeSet(ns, "s6", setSpec(object{"template": object{"annotations": object{"nodeset.dev/delete-node": "x"}}})),
			[]string{"spec.template.annotations: keys under nodeset.dev/ are reserved"}},
		{"reserved taint", nodeSet(ns, "s7", setSpec(object{"template": object{"taints": []any{object{"key": "nodeset.dev/unregistered", "effect": "NoExecute"}}}})),
			[]string{"spec.template.taints: keys under nodeset.dev/ are reserved"}},
		{"surge and unavailable both zero", nodeSet(ns, "s8", setSpec(object{"strategy": object{"type": "RollingUpdate",
			"rollingUpdate": object{"maxSurge": 0, "maxUnavailable": "0%"}}})),
			[]string{"maxSurge and maxUnavailable cannot both be zero"}},
		{"surge percentage over 100", nodeSet(ns, "s9", setSpec(object{"strategy": object{"rollingUpdate": object{"maxSurge": "150%"}}})),
			[]string{"spec.strategy.rollingUpdate.maxSurge must be a non-negative integer of at most 2147483647 or a percentage"}},
		{"rollingUpdate with OnDelete", nodeSet(ns, "s10", setSpec(object{"strategy": object{"type": "OnDelete", "rollingUpdate": object{"maxSurge": 1}}})),
			[]string{"spec.strategy.rollingUpdate may only be set when spec.strategy.type is RollingUpdate"}},
		{"unknown strategy", nodeSet(ns, "s11", setSpec(object{"strategy": object{"type": "Recreate"}})),
			[]string{"spec.strategy.type", "Unsupported value"}},
		{"unknown deletePolicy", nodeSet(ns, "s12", setSpec(object{"deletePolicy": "Largest"})),
			[]string{"spec.deletePolicy", "Unsupported value", "Newest"}},
		{"two driver overrides", nodeSet(ns, "s13", setSpec(object{"simulated": object{"instanceType": "a"}, "dockerMachine": object{"driverName": "b"}})),
			[]string{"at most one driver section"}},
		{"bad taint effect in template", nodeSet(ns, "s14", setSpec(object{"template": object{"taints": []any{object{"key": "a", "effect": "NoWay"}}}})),
			[]string{"spec.template.taints[0].effect", "Unsupported value"}},
	}
	require.GreaterOrEqual(t, len(tests), 25)
	client := dynamicClient(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			gvr := gvrFor(t, tt.obj)
			resource := client.Resource(gvr).Namespace(tt.obj.GetNamespace())
			_, err := resource.Create(ctx, tt.obj, metav1.CreateOptions{})
			require.Error(t, err, "the API server accepted an invalid %s", tt.obj.GetKind())
			assert.True(t, apierrors.IsInvalid(err), "want 422 Invalid, got %v", err)
			for _, want := range tt.want {
				assert.Contains(t, err.Error(), want)
			}
			_, err = resource.Get(ctx, tt.obj.GetName(), metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "a rejected object must not be stored: %v", err)
		})
	}
}

// TestNodeClassNameImmutable checks an update may not move a NodeSet to another class.
// managedClass is an eks-managed NodeClass spec with the section's
// required fields and extra.
func managedClass(extra object) object {
	section := object{"clusterName": "prod", "region": "eu-west-1", "nodeRole": "arn:aws:iam::123456789012:role/x", "subnets": []any{"subnet-0123abcd"}}
	for k, v := range extra {
		section[k] = v
	}
	return object{"driver": "eks-managed", "eksManagedNodeGroup": section}
}

func TestNodeClassNameImmutable(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "immutable")
	client := dynamicClient(t).Resource(nodeSetGVR).Namespace(ns)
	created, err := client.Create(ctx, nodeSet(ns, "web", setSpec(nil)), metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedField(created.Object, "other", "spec", "nodeClassName"))
	_, err = client.Update(ctx, created, metav1.UpdateOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.nodeClassName is immutable")

	// Scaling through an update is fine, and bounded by autoscaling.
	current, err := client.Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedField(current.Object, object{"minReplicas": int64(1), "maxReplicas": int64(3)}, "spec", "autoscaling"))
	require.NoError(t, unstructured.SetNestedField(current.Object, int64(5), "spec", "replicas"))
	_, err = client.Update(ctx, current, metav1.UpdateOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.replicas must be within")
}

// TestNodeClassDriverImmutable: the schema, not only the webhook, keeps a
// class's driver: its Nodes' machines are that driver's.
func TestNodeClassDriverImmutable(t *testing.T) {
	ctx := context.Background()
	client := dynamicClient(t).Resource(nodeClassGVR)
	created, err := client.Create(ctx, nodeClass("driver-immutable", simulatedClass(nil)), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Delete(context.Background(), "driver-immutable", metav1.DeleteOptions{}) })
	require.NoError(t, unstructured.SetNestedField(created.Object, "example.dev", "spec", "driver"))
	unstructured.RemoveNestedField(created.Object, "spec", "simulated")
	require.NoError(t, unstructured.SetNestedField(created.Object, object{"size": "large"}, "spec", "parameters"))
	_, err = client.Update(ctx, created, metav1.UpdateOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.driver cannot change")

	// The rest of the class may change.
	current, err := client.Get(ctx, "driver-immutable", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedField(current.Object, "sim.large", "spec", "simulated", "instanceType"))
	_, err = client.Update(ctx, current, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// TestTenantOverridesNameMapKeys: a key of a map, with the dots, slashes and
// dashes label and tag keys have, is a tenantOverrides entry the API
// server admits; a field name with a dash is still refused.
func TestTenantOverridesNameMapKeys(t *testing.T) {
	ctx := context.Background()
	client := dynamicClient(t).Resource(nodeClassGVR)
	class := nodeClass("map-key-overrides", simulatedClass(object{"tenantOverrides": []any{
		"capacity.nvidia.com/gpu", "labels.example.com/team", "labels.cost-center"}}))
	_, err := client.Create(ctx, class, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Delete(context.Background(), "map-key-overrides", metav1.DeleteOptions{}) })
	_, err = client.Create(ctx, nodeClass("dashed-field", simulatedClass(object{"tenantOverrides": []any{"instance-type"}})), metav1.CreateOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.tenantOverrides[0]")
}
