package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"nodeset.dev/nodeset/test/framework"
)

// TestWebhookAnswersOnlyClientsOfItsClientCA: the webhook's answers are
// computed from every namespace's NodeSets (a scale review names a stored
// NodeSet, a refusal quotes its class and the namespace's node count), and
// its port is reachable from pods. With --webhook-client-ca-file it answers
// only a client with a certificate of that CA (the API server, given one in
// its AdmissionConfiguration): a caller without one, or with another CA's,
// gets no answer at all.
func TestWebhookAnswersOnlyClientsOfItsClientCA(t *testing.T) {
	certs, err := framework.NewMutualTLS(t.TempDir(), "nodeset-webhook", "kube-apiserver")
	require.NoError(t, err)
	port, err := framework.FreePort()
	require.NoError(t, err)
	opts := ServingOptions{BindAddress: fmt.Sprintf("127.0.0.1:%d", port),
		CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCAFile: certs.ClientCA}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- opts.Serve(ctx, &refuseLarge{}) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	scale, err := json.Marshal(map[string]any{"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": map[string]any{"replicas": 9}})
	require.NoError(t, err)
	body, err := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "forged", Operation: admissionv1.Update, SubResource: "scale",
			Namespace: "someone-else", Name: "web", Object: runtime.RawExtension{Raw: scale}}})
	require.NoError(t, err)
	post := func(presented ...tls.Certificate) (*admissionv1.AdmissionResponse, error) {
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: certs.Roots, Certificates: presented, MinVersion: tls.VersionTLS12}}}
		defer client.CloseIdleConnections()
		resp, err := client.Post(fmt.Sprintf("https://localhost:%d%s", port, Path), "application/json", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
			return nil, err
		}
		return review.Response, nil
	}
	require.Eventually(t, func() bool {
		resp, err := post(certs.Client)
		return err == nil && resp != nil && !resp.Allowed
	}, 10*time.Second, 50*time.Millisecond, "a client with a certificate of the client CA is answered")
	resp, err := post()
	assert.Error(t, err, "no client certificate: no answer (got %+v)", resp)
	resp, err = post(certs.Stranger)
	assert.Error(t, err, "a certificate of another CA: no answer (got %+v)", resp)
}
