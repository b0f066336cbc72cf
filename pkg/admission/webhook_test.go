package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

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
