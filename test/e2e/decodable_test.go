package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// extremeValue is one value at or past the edge of what a field's Go type
// holds, sent as raw JSON so that numbers keep their exact spelling. With
// status set, spec is a valid spec and the attempt is a merge patch of the
// status subresource.
type extremeValue struct {
	name   string
	kind   string // NodeSet or NodeClass
	object string // metadata.name; a generated one when empty
	spec   string
	status string
	// field is named by the refusal. admit marks a value the schema lets
	// through on purpose: it must then decode into the Go types.
	field string
	admit bool
}

// TestSchemaAdmitsOnlyDecodableObjects stores, with no webhook registered,
// an extreme value for every field that a Go type bounds (durations,
// quantities, int32 and int64, IntOrString, timestamps, names that become
// label values) and shows that the schema refuses it, naming the field, or
// that what it admits decodes. Afterwards the typed clientset still lists
// every NodeSet and NodeClass: no object that would blind the controllers'
// informers was stored.
func TestSchemaAdmitsOnlyDecodableObjects(t *testing.T) {
	ns := createNamespace(t, "extreme")
	const int32Past = "2147483648"
	const int64Past = "9223372036854775808"
	long := func(n int) string { return strings.Repeat("a", n) }
	sim := func(section string) string { return `{"driver":"simulated","simulated":` + section + `}` }
	set := func(extra string) string { return `{"nodeClassName":"sim"` + extra + `}` }
	asg := func(extra string) string {
		return `{"driver":"eks-asg","eksAutoscalingGroup":{"clusterName":"prod","region":"eu-west-1"` + extra + `}}`
	}
	managed := func(extra string) string {
		return `{"driver":"eks-managed","eksManagedNodeGroup":{"clusterName":"prod","region":"eu-west-1","nodeRole":"arn:aws:iam::123456789012:role/x"` + extra + `}}`
	}
	condition := func(extra string) string {
		return `{"conditions":[{"type":"Valid","status":"True","reason":"Valid","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"` + extra + `}]}`
	}
	tests := []extremeValue{
		// Names that become label values and Node names.
		{name: "NodeSet name of 64", kind: "NodeSet", object: long(64), spec: set(""), field: "metadata.name"},
		{name: "NodeSet name of 63", kind: "NodeSet", object: long(63), spec: set(""), admit: true},
		{name: "NodeClass name of 64", kind: "NodeClass", object: long(64), spec: sim(`{}`), field: "metadata.name"},
		{name: "nodeClassName of 64", kind: "NodeSet", spec: `{"nodeClassName":"` + long(64) + `"}`, field: "spec.nodeClassName"},

		// Durations: time.Duration holds about 2562047h.
		{name: "registrationTimeout past int64 ns", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"registrationTimeout":"9999999999h"}`, field: "spec.registrationTimeout"},
		{name: "registrationTimeout digits past int64", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"registrationTimeout":"99999999999999999999ns"}`, field: "spec.registrationTimeout"},
		{name: "registrationTimeout of many segments", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"registrationTimeout":"99999h99999h99999h99999h"}`, field: "spec.registrationTimeout"},
		{name: "registrationTimeout over the maximum", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"registrationTimeout":"25h"}`, field: "spec.registrationTimeout"},
		{name: "registrationTimeout at the maximum", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"registrationTimeout":"23h59m60s"}`, admit: true},
		{name: "drain timeout at the maximum", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"drain":{"timeout":"24h"}}`, admit: true},
		{name: "drain timeout past int64 ns", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"drain":{"timeout":"9999999999h"}}`, field: "spec.drain.timeout"},
		{name: "drain timeout fraction past int64 ns", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"drain":{"timeout":"3000000.5h"}}`, field: "spec.drain.timeout"},
		{name: "class bootDelay past int64 ns", kind: "NodeClass", spec: sim(`{"bootDelay":"9999999999h"}`), field: "spec.simulated.bootDelay"},
		{name: "set bootDelay past int64 ns", kind: "NodeSet", spec: set(`,"simulated":{"bootDelay":"9999999999h"}`), field: "spec.simulated.bootDelay"},
		{name: "set bootDelay of many segments", kind: "NodeSet", spec: set(`,"simulated":{"bootDelay":"1s1s1s1s1s1s1s1s1s1s"}`), field: "spec.simulated.bootDelay"},
		{name: "set bootDelay at the maximum", kind: "NodeSet", spec: set(`,"simulated":{"bootDelay":"59m59.999999999s"}`), admit: true},

		// Quantities: the exponent of a suffix must fit an int32, and digits are bounded.
		{name: "class capacity exponent past int32", kind: "NodeClass", spec: sim(`{"capacity":{"cpu":"1e9999999999"}}`), field: "spec.simulated.capacity"},
		{name: "set capacity exponent past int32", kind: "NodeSet", spec: set(`,"simulated":{"capacity":{"memory":"1E-9999999999"}}`), field: "spec.simulated.capacity"},
		{name: "capacity of a thousand digits", kind: "NodeClass", spec: sim(`{"capacity":{"cpu":"` + strings.Repeat("9", 1000) + `"}}`), field: "spec.simulated.capacity"},
		{name: "capacity as a huge number", kind: "NodeClass", spec: sim(`{"capacity":{"cpu":1e30}}`), field: "spec.simulated.capacity"},
		{name: "capacity of 64 exabytes", kind: "NodeSet", spec: set(`,"simulated":{"capacity":{"memory":"64Ei"}}`), field: "spec.simulated.capacity"},
		{name: "capacity exponent that stalls the parser", kind: "NodeSet", spec: set(`,"simulated":{"capacity":{"cpu":"1e-2147483648"}}`), field: "spec.simulated.capacity"},
		{name: "capacity exponent of three digits", kind: "NodeClass", spec: sim(`{"capacity":{"cpu":"1e-100"}}`), field: "spec.simulated.capacity"},
		{name: "negative capacity", kind: "NodeClass", spec: sim(`{"capacity":{"cpu":"-1"}}`), field: "spec.simulated.capacity"},
		{name: "capacity integer past 1Pi", kind: "NodeClass", spec: sim(`{"capacity":{"pods":9223372036854775807}}`), field: "spec.simulated.capacity"},
		{name: "capacity at the maximum", kind: "NodeSet", spec: set(`,"simulated":{"capacity":{"memory":"1Pi","cpu":"1000000","pods":1125899906842624}}`), admit: true},

		// int32 fields.
		{name: "replicas past int32", kind: "NodeSet", spec: set(`,"replicas":` + int32Past), field: "spec.replicas"},
		{name: "replicas as a huge float", kind: "NodeSet", spec: set(`,"replicas":1e30`), field: "spec.replicas"},
		{name: "replicas as an integral float", kind: "NodeSet", spec: set(`,"replicas":3.0`), field: "spec.replicas"},
		{name: "minReadySeconds past int32", kind: "NodeSet", spec: set(`,"minReadySeconds":` + int32Past), field: "spec.minReadySeconds"},
		{name: "minReplicas past int32", kind: "NodeSet", spec: set(`,"autoscaling":{"minReplicas":` + int32Past + `,"maxReplicas":1}`), field: "spec.autoscaling.minReplicas"},
		{name: "maxReplicas past int32", kind: "NodeSet", spec: set(`,"replicas":1,"autoscaling":{"minReplicas":1,"maxReplicas":` + int32Past + `}`), field: "spec.autoscaling.maxReplicas"},
		{name: "maxSurge past int32", kind: "NodeSet", spec: set(`,"strategy":{"rollingUpdate":{"maxSurge":` + int32Past + `}}`), field: "spec.strategy.rollingUpdate.maxSurge"},
		{name: "maxUnavailable past int32", kind: "NodeSet", spec: set(`,"strategy":{"rollingUpdate":{"maxUnavailable":` + int32Past + `}}`), field: "spec.strategy.rollingUpdate.maxUnavailable"},
		{name: "failurePercent as a huge float", kind: "NodeSet", spec: set(`,"simulated":{"failurePercent":1e30}`), field: "spec.simulated.failurePercent"},
		{name: "maxNodes past int32", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"limits":{"maxNodes":` + int32Past + `}}`, field: "spec.limits.maxNodes"},
		{name: "maxNodesPerNamespace past int32", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"limits":{"maxNodesPerNamespace":` + int32Past + `}}`, field: "spec.limits.maxNodesPerNamespace"},
		{name: "onDemandBaseCapacity past int32", kind: "NodeClass", spec: asg(`,"mixedInstances":{"instanceTypes":["m5.large"],"onDemandBaseCapacity":` + int32Past + `}`), field: "spec.eksAutoscalingGroup.mixedInstances.onDemandBaseCapacity"},
		{name: "iops past int32", kind: "NodeClass", spec: asg(`,"blockDevices":[{"deviceName":"/dev/xvda","iops":` + int32Past + `}]`), field: "spec.eksAutoscalingGroup.blockDevices[0].iops"},
		{name: "throughput past int32", kind: "NodeSet", spec: set(`,"eksAutoscalingGroup":{"blockDevices":[{"deviceName":"/dev/xvda","throughput":` + int32Past + `}]}`), field: "spec.eksAutoscalingGroup.blockDevices[0].throughput"},
		{name: "diskSize past int32", kind: "NodeClass", spec: managed(`,"diskSize":` + int32Past), field: "spec.eksManagedNodeGroup.diskSize"},

		// Strings that feed labels, taints and cloud fields.
		{name: "taint key prefix of 254", kind: "NodeSet", spec: set(`,"template":{"taints":[{"key":"` + long(254) + `/a","effect":"NoSchedule"}]}`), field: "spec.template.taints[0].key"},
		{name: "class taint key prefix of 254", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"nodeTemplate":{"taints":[{"key":"` + long(254) + `/a","effect":"NoSchedule"}]}}`, field: "spec.nodeTemplate.taints[0].key"},
		{name: "managed taint key name of 64", kind: "NodeClass", spec: managed(`,"taints":[{"key":"` + long(64) + `","effect":"NO_SCHEDULE"}]`), field: "spec.eksManagedNodeGroup.taints[0].key"},
		{name: "template annotations over 256KiB", kind: "NodeSet", spec: set(`,"template":{"annotations":{"a":"` + long(200000) + `","b":"` + long(70000) + `"}}`), field: "spec.template.annotations"},
		{name: "class annotations over 256KiB", kind: "NodeClass", spec: `{"driver":"simulated","simulated":{},"nodeTemplate":{"annotations":{"a":"` + long(262144) + `"}}}`, field: "spec.nodeTemplate.annotations"},
		{name: "template label value of 64", kind: "NodeSet", spec: set(`,"template":{"labels":{"a":"` + long(64) + `"}}`), field: "spec.template.labels"},
		{name: "instanceType of 64", kind: "NodeSet", spec: set(`,"simulated":{"instanceType":"` + long(64) + `"}`), field: "spec.simulated.instanceType"},

		// Status: written by the controllers, but an undecodable status
		// blinds a LIST just the same.
		{name: "NodeSet status.replicas past int32", kind: "NodeSet", spec: set(""), status: `{"replicas":` + int32Past + `}`, field: "status.replicas"},
		{name: "NodeSet status.observedGeneration past int64", kind: "NodeSet", spec: set(""), status: `{"observedGeneration":` + int64Past + `}`, field: "status.observedGeneration"},
		{name: "NodeSet status.observedGeneration as a huge float", kind: "NodeSet", spec: set(""), status: `{"observedGeneration":1e30}`, field: "status.observedGeneration"},
		{name: "NodeSet status.group.desiredSize past int32", kind: "NodeSet", spec: set(""), status: `{"group":{"desiredSize":` + int32Past + `}}`, field: "status.group.desiredSize"},
		{name: "NodeSet status.capacity exponent past int32", kind: "NodeSet", spec: set(""), status: `{"capacity":{"templateHash":"h","resources":{"cpu":"1e9999999999"}}}`, field: "status.capacity.resources"},
		{name: "NodeSet condition time without a zone", kind: "NodeSet", spec: set(""), status: `{"conditions":[{"type":"Accepted","status":"True","reason":"Accepted","message":"","lastTransitionTime":"2026-01-01T00:00:00"}]}`, field: "status.conditions[0].lastTransitionTime"},
		{name: "NodeClass condition observedGeneration past int64", kind: "NodeClass", spec: sim(`{}`), status: condition(`,"observedGeneration":` + int64Past), field: "status.conditions[0].observedGeneration"},
		{name: "NodeClass status.capacity.allocatable exponent past int32", kind: "NodeClass", spec: sim(`{}`), status: `{"capacity":{"allocatable":{"memory":"1e9999999999"}}}`, field: "status.capacity.allocatable"},
		{name: "NodeClass capacity taint time without a zone", kind: "NodeClass", spec: sim(`{}`), status: `{"capacity":{"taints":[{"key":"a","effect":"NoSchedule","timeAdded":"2026-01-01T00:00:00"}]}}`, field: "status.capacity.taints[0].timeAdded"},
	}

	ctx := context.Background()
	rest := kubeClient(t).CoreV1().RESTClient()
	cs := clientset(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := tt.object
			if name == "" {
				name = fmt.Sprintf("extreme-%d", i)
			}
			collection := "/apis/nodeset.dev/v1alpha1/namespaces/" + ns + "/nodesets"
			if tt.kind == "NodeClass" {
				collection = "/apis/nodeset.dev/v1alpha1/nodeclasses"
			}
			body := fmt.Sprintf(`{"apiVersion":"nodeset.dev/v1alpha1","kind":%q,"metadata":{"name":%q},"spec":%s}`, tt.kind, name, tt.spec)
			err := rest.Post().AbsPath(collection).Body([]byte(body)).Do(ctx).Error()
			if err == nil {
				t.Cleanup(func() { _ = rest.Delete().AbsPath(collection, name).Do(context.Background()).Error() })
			}
			if tt.status != "" {
				require.NoError(t, err, "the spec of a status case is valid")
				err = rest.Patch(types.MergePatchType).AbsPath(collection, name, "status").Body([]byte(`{"status":` + tt.status + `}`)).Do(ctx).Error()
			}
			if !tt.admit {
				require.Error(t, err, "stored: %.300s", body+tt.status)
				assert.True(t, apierrors.IsInvalid(err) || apierrors.IsBadRequest(err), "want a 422 or 400 refusal, got %v", err)
				assert.Contains(t, err.Error(), tt.field)
				return
			}
			require.NoError(t, err)
			if tt.kind == "NodeClass" {
				_, err = cs.NodesetV1alpha1().NodeClasses().Get(ctx, name, metav1.GetOptions{})
			} else {
				_, err = cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, name, metav1.GetOptions{})
			}
			assert.NoError(t, err, "what the schema admits decodes into the Go types")
		})
	}

	_, err := cs.NodesetV1alpha1().NodeSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	assert.NoError(t, err, "every stored NodeSet decodes")
	_, err = cs.NodesetV1alpha1().NodeClasses().List(ctx, metav1.ListOptions{})
	assert.NoError(t, err, "every stored NodeClass decodes")
}
