package lifecycle

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/test/framework"
)

// throttleEvictions has the API server refuse every eviction in namespace
// with 429 Too Many Requests and no budget's cause, as it does when its
// priority and fairness sheds load (or an admission webhook limits the
// rate of evictions): here a webhook in the test refuses them, so that
// the refusal is certain. It returns once the API server refuses an
// eviction so, and a func after which the webhook lets them through.
func throttleEvictions(t *testing.T, namespace string) (lift func()) {
	t.Helper()
	kube, _ := clients(t)
	ctx := context.Background()
	ca, err := framework.NewCA("evictions-" + namespace)
	require.NoError(t, err)
	certPEM, keyPEM, err := ca.Issue("127.0.0.1", x509.ExtKeyUsageServerAuth)
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	var throttling atomic.Bool
	throttling.Store(true)
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		response := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: !throttling.Load()}
		if !response.Allowed {
			response.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusTooManyRequests,
				Reason: metav1.StatusReasonTooManyRequests, Message: "too many requests, please try again later"}
		}
		review.Response = response
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}))
	server.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	server.StartTLS()
	t.Cleanup(server.Close)
	name := "evictions-" + namespace
	hooks := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	_, err = hooks.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "evictions.sre.nodeset.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(server.URL + "/"), CABundle: ca.PEM},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				corev1.LabelMetadataName: namespace}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods/eviction"}},
			}},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := hooks.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("removing the eviction webhook: %v", err)
		}
	})
	// A pod no scheduler places: its eviction (a dry run) is refused once
	// the API server calls the webhook.
	probe, err := kube.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "eviction-probe"},
		Spec: corev1.PodSpec{SchedulerName: "none",
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "the API server refuses evictions with 429", func(ctx context.Context) (bool, string) {
		err := kube.PolicyV1().Evictions(namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: probe.Name, Namespace: namespace},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
		return apierrors.IsTooManyRequests(err), fmt.Sprint(err)
	})
	return func() { throttling.Store(false) }
}

// TestAThrottledEvictionIsNoBudgetRefusal: an API server that sheds load
// refuses evictions with 429 Too Many Requests, as a PodDisruptionBudget
// does, but without a budget's cause. The drain tells the API server's
// answer (an EvictionFailed Event and the Draining condition), not a
// budget that does not exist: an SRE would look for one. Once the API
// server takes evictions again the drain ends.
func TestAThrottledEvictionIsNoBudgetRefusal(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "throttled")
	lift := throttleEvictions(t, ns)
	var pod string
	node := drainingNode(t, c, ns, "throttled-sim", "throttled", 5*time.Minute, func(node string) {
		pod = runPod(t, ns, "unguarded", node, nil)
	})
	eventually(t, time.Minute, "the API server's refusal told in the Draining condition", func(ctx context.Context) (bool, string) {
		msg, err := drainMessage(ctx, t, node)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(msg, "eviction(s) failed") && strings.Contains(msg, ns+"/"+pod), msg
	})
	msg, err := drainMessage(ctx, t, node)
	require.NoError(t, err)
	assert.NotContains(t, msg, "PodDisruptionBudget", "no budget guards the pod")
	reasons := eventuallyEvent(t, node, nodecontroller.ReasonEvictionFailed)
	assert.NotContains(t, reasons, nodecontroller.ReasonEvictionBlocked, "no budget refused the eviction")
	_, err = kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err, "the API server refused the eviction")

	lift()
	eventually(t, 2*time.Minute, "node drained and gone", func(ctx context.Context) (bool, string) {
		msg, err := drainMessage(ctx, t, node)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprint(msg, err)
	})
	reasons = eventuallyEvent(t, node, nodecontroller.ReasonDrained)
	assert.False(t, slices.Contains(reasons, nodecontroller.ReasonDrainTimedOut), "the drain ended once the eviction went through")
}
