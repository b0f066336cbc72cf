package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// refuseLarge refuses NodeSets of more than 3 replicas.
type refuseLarge struct{ calls int }

func (r *refuseLarge) Admit(set, _ *nodesetv1alpha1.NodeSet) (string, string) {
	r.calls++
	if *set.Spec.Replicas > 3 {
		return "LimitExceeded", "too many"
	}
	return "", ""
}

func (r *refuseLarge) AdmitScale(_, _ string, replicas int32) (string, string) {
	r.calls++
	if replicas > 3 {
		return "LimitExceeded", "too many"
	}
	return "", ""
}

func call(t *testing.T, h http.Handler, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	req.UID = types.UID("uid-1")
	body, err := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var review admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &review))
	require.NotNil(t, review.Response)
	assert.Equal(t, types.UID("uid-1"), review.Response.UID, "the response answers the request")
	return review.Response
}

func raw(t *testing.T, obj any) runtime.RawExtension {
	b, err := json.Marshal(obj)
	require.NoError(t, err)
	return runtime.RawExtension{Raw: b}
}

func nodeSet(replicas int32) *nodesetv1alpha1.NodeSet {
	return &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "c", Replicas: &replicas}}
}

func TestNodeSetHandler(t *testing.T) {
	admitter := &refuseLarge{}
	h := Handler(admitter)

	resp := call(t, h, &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "team", Object: raw(t, nodeSet(2))})
	assert.True(t, resp.Allowed)

	resp = call(t, h, &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "team", Object: raw(t, nodeSet(5))})
	require.False(t, resp.Allowed)
	assert.Equal(t, int32(http.StatusForbidden), resp.Result.Code)
	assert.Equal(t, metav1.StatusReason("LimitExceeded"), resp.Result.Reason)
	assert.Equal(t, "NodeSet team/web: too many (LimitExceeded)", resp.Result.Message, "the namespace comes from the request")

	scale := map[string]any{"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": map[string]any{"replicas": 9}}
	resp = call(t, h, &admissionv1.AdmissionRequest{Operation: admissionv1.Update, SubResource: "scale", Namespace: "team", Name: "web", Object: raw(t, scale)})
	assert.False(t, resp.Allowed, "kubectl scale past the limit")

	deleting := nodeSet(5)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	before := admitter.calls
	resp = call(t, h, &admissionv1.AdmissionRequest{Operation: admissionv1.Update, Namespace: "team", Object: raw(t, deleting)})
	assert.True(t, resp.Allowed, "a NodeSet being deleted can always lose its finalizer")
	assert.Equal(t, before, admitter.calls)

	resp = call(t, h, &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "team", Object: runtime.RawExtension{Raw: []byte(`{"spec":7}`)}})
	require.False(t, resp.Allowed)
	assert.Equal(t, int32(http.StatusBadRequest), resp.Result.Code)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader([]byte("hello"))))
	assert.Equal(t, http.StatusBadRequest, rec.Code, "not an AdmissionReview")
}

func TestNodeClassHandler(t *testing.T) {
	h := ClassHandler()
	class := func(overrides ...string) *nodesetv1alpha1.NodeClass {
		return &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "sim"}, Spec: nodesetv1alpha1.NodeClassSpec{
			Driver: nodesetv1alpha1.DriverSimulated, TenantOverrides: overrides,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}}}
	}
	resp := call(t, h, &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Object: raw(t, class("instanceType"))})
	assert.True(t, resp.Allowed)

	resp = call(t, h, &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Object: raw(t, class("instanceTyp"))})
	require.False(t, resp.Allowed)
	assert.Equal(t, int32(http.StatusUnprocessableEntity), resp.Result.Code)
	assert.Contains(t, resp.Result.Message, `spec.tenantOverrides[0]: "instanceTyp" is not a field of the driver section`)

	// A bad class stored while the webhook was down can still lose its
	// finalizers and labels.
	relabelled := class("instanceTyp")
	relabelled.Labels = map[string]string{"tier": "gold"}
	resp = call(t, h, &admissionv1.AdmissionRequest{Operation: admissionv1.Update, Object: raw(t, relabelled), OldObject: raw(t, class("instanceTyp"))})
	assert.True(t, resp.Allowed)
	resp = call(t, h, &admissionv1.AdmissionRequest{Operation: admissionv1.Delete, OldObject: raw(t, class("instanceTyp"))})
	assert.True(t, resp.Allowed)
}

// TestRefusalsNameTheField sends objects the Go types or the Node rules
// refuse: each refusal names the field.
func TestRefusalsNameTheField(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	set := func(name, spec string) runtime.RawExtension {
		return runtime.RawExtension{Raw: []byte(`{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeSet","metadata":{"name":"` + name + `"},"spec":` + spec + `}`)}
	}
	class := func(name, spec string) runtime.RawExtension {
		return runtime.RawExtension{Raw: []byte(`{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeClass","metadata":{"name":"` + name + `"},"spec":` + spec + `}`)}
	}
	asg := func(extra string) string {
		return `{"driver":"eks-asg","eksAutoscalingGroup":{"clusterName":"prod","region":"eu-west-1"` + extra + `},"tenantOverrides":`
	}
	tests := []struct {
		name     string
		handler  http.Handler
		object   runtime.RawExtension
		wantCode int32
		want     []string
	}{
		{"undecodable set duration", Handler(&refuseLarge{}), set("web", `{"nodeClassName":"c","replicas":1,"simulated":{"bootDelay":"9999999999h"}}`),
			http.StatusBadRequest, []string{"decoding the NodeSet: spec.simulated.bootDelay: time: invalid duration"}},
		{"undecodable set quantity", Handler(&refuseLarge{}), set("web", `{"nodeClassName":"c","replicas":1,"simulated":{"capacity":{"cpu":"lots"}}}`),
			http.StatusBadRequest, []string{"spec.simulated.capacity[cpu]"}},
		{"set maxSurge past int32", Handler(&refuseLarge{}), set("web", `{"nodeClassName":"c","replicas":1,"strategy":{"rollingUpdate":{"maxSurge":2147483648}}}`),
			http.StatusBadRequest, []string{"spec.strategy.rollingUpdate.maxSurge"}},
		{"set taint list", Handler(&refuseLarge{}), set("web", `{"nodeClassName":"c","replicas":1,"template":{"taints":[{"key":"a","effect":7}]}}`),
			http.StatusBadRequest, []string{"spec.template.taints[0].effect"}},
		{"set name of 64", Handler(&refuseLarge{}), set(long(64), `{"nodeClassName":"c","replicas":1}`),
			http.StatusUnprocessableEntity, []string{"metadata.name: must be at most 63 characters", "nodeset.dev/nodeset"}},
		{"undecodable class duration", ClassHandler(), class("c", `{"driver":"simulated","simulated":{},"registrationTimeout":"99999999999999999999ns"}`),
			http.StatusBadRequest, []string{"decoding the NodeClass: spec.registrationTimeout: time: invalid duration"}},
		{"class name of 64", ClassHandler(), class(long(64), `{"driver":"simulated","simulated":{}}`),
			http.StatusUnprocessableEntity, []string{"metadata.name: must be at most 63 characters", "nodeset.dev/nodeclass"}},
		{"built-in section of an unknown driver", ClassHandler(), class("c", `{"driver":"foo","simulated":{}}`),
			http.StatusUnprocessableEntity, []string{`spec.simulated: is only for spec.driver simulated, not "foo"`, "spec.parameters"}},
		{"eks section of another built-in driver", ClassHandler(), class("c", `{"driver":"eks-managed","eksAutoscalingGroup":{}}`),
			http.StatusUnprocessableEntity, []string{"spec.eksAutoscalingGroup: is only for spec.driver eks-asg"}},
		{"override inside a list of objects", ClassHandler(), class("c", asg(``)+`["instanceType","blockDevices.volumeSize"]}`),
			http.StatusUnprocessableEntity, []string{"spec.tenantOverrides[1]", "list elements cannot be overridden piecewise", "list the whole list (blockDevices) instead"}},
		{"override inside a list of strings", ClassHandler(), class("c", asg(``)+`["mixedInstances.instanceTypes.first"]}`),
			http.StatusUnprocessableEntity, []string{"spec.tenantOverrides[0]", "(mixedInstances.instanceTypes)"}},
		{"class label value", ClassHandler(), class("c", `{"driver":"simulated","simulated":{},"nodeTemplate":{"labels":{"tier":"gold plated"}}}`),
			http.StatusUnprocessableEntity, []string{`spec.nodeTemplate.labels: Invalid value: "gold plated"`}},
		{"class label key", ClassHandler(), class("c", `{"driver":"simulated","simulated":{},"nodeTemplate":{"labels":{"bad key":"a"}}}`),
			http.StatusUnprocessableEntity, []string{`spec.nodeTemplate.labels: Invalid value: "bad key"`}},
		{"class taint key prefix of 254", ClassHandler(), class("c", `{"driver":"simulated","simulated":{},"nodeTemplate":{"taints":[{"key":"`+long(254)+`/a","effect":"NoSchedule"}]}}`),
			http.StatusUnprocessableEntity, []string{"spec.nodeTemplate.taints[0].key", "prefix part must be no more than 253"}},
		{"class taint key name of 64", ClassHandler(), class("c", `{"driver":"simulated","simulated":{},"nodeTemplate":{"taints":[{"key":"`+long(64)+`","effect":"NoSchedule"}]}}`),
			http.StatusUnprocessableEntity, []string{"spec.nodeTemplate.taints[0].key", "name part must be no more than 63"}},
		{"class taint value", ClassHandler(), class("c", `{"driver":"simulated","simulated":{},"nodeTemplate":{"taints":[{"key":"a","value":"x y","effect":"NoSchedule"}]}}`),
			http.StatusUnprocessableEntity, []string{"spec.nodeTemplate.taints[0].value"}},
		{"class annotations over 256KiB", ClassHandler(), class("c", `{"driver":"simulated","simulated":{},"nodeTemplate":{"annotations":{"a":"`+long(262144)+`"}}}`),
			http.StatusUnprocessableEntity, []string{"spec.nodeTemplate.annotations", "may not be more than 262144 bytes"}},
		{"simulated label", ClassHandler(), class("c", `{"driver":"simulated","simulated":{"labels":{"zone":"`+long(64)+`"}}}`),
			http.StatusUnprocessableEntity, []string{"spec.simulated.labels"}},
		{"managed node group taint", ClassHandler(), class("c", `{"driver":"eks-managed","eksManagedNodeGroup":{"taints":[{"key":"a b","effect":"NO_SCHEDULE"}]}}`),
			http.StatusUnprocessableEntity, []string{"spec.eksManagedNodeGroup.taints[0].key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := call(t, tt.handler, &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "team", Object: tt.object})
			require.False(t, resp.Allowed)
			assert.Equal(t, tt.wantCode, resp.Result.Code, resp.Result.Message)
			for _, want := range tt.want {
				assert.Contains(t, resp.Result.Message, want)
			}
		})
	}
}

// TestClassWarnsOfRiskyOverrides: a class that lets tenants reach the
// kubelet's flags or a Node's labels is admitted, with a warning saying what
// tenants get and what stays refused.
func TestClassWarnsOfRiskyOverrides(t *testing.T) {
	class := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: nodesetv1alpha1.NodeClassSpec{
		Driver: nodesetv1alpha1.DriverSimulated, TenantOverrides: []string{"instanceType", "labels"},
		DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}}}
	raw, err := json.Marshal(class)
	require.NoError(t, err)
	resp := call(t, ClassHandler(), &admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}})
	assert.True(t, resp.Allowed)
	require.Len(t, resp.Warnings, 1)
	assert.Contains(t, resp.Warnings[0], `spec.tenantOverrides[1] "labels"`)
	assert.Contains(t, resp.Warnings[0], "stay refused")
}

// TestRemovedAutoscalerOptionsAreRefused: a cluster-autoscaler option
// annotation can take no effect, so a NodeSet that adds one is refused,
// naming it; one stored before is left alone.
func TestRemovedAutoscalerOptionsAreRefused(t *testing.T) {
	set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team",
		Annotations: map[string]string{"cluster-autoscaler.nodeset.dev/max-node-startup-time": "20m"}},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "sim", Replicas: ptr.To[int32](1)}}
	raw, err := json.Marshal(set)
	require.NoError(t, err)
	resp := call(t, Handler(&refuseLarge{}),
		&admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: "team", Object: runtime.RawExtension{Raw: raw}})
	require.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, `metadata.annotations["cluster-autoscaler.nodeset.dev/max-node-startup-time"]`)
	assert.Contains(t, resp.Result.Message, "have no effect")

	resp = call(t, Handler(&refuseLarge{}),
		&admissionv1.AdmissionRequest{UID: "2", Operation: admissionv1.Update, Namespace: "team", Object: runtime.RawExtension{Raw: raw}, OldObject: runtime.RawExtension{Raw: raw}})
	assert.True(t, resp.Allowed, "an annotation stored before is left alone")
}
