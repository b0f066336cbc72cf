package servingcerts

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func testOptions(now time.Time) Options {
	return Options{
		Namespace:            "nodeset-system",
		CASecret:             "nodeset-ca",
		Serving:              []ServingCertificate{{Secret: "nodeset-webhook-tls", Service: "nodeset-webhook"}, {Secret: "nodeset-autoscaler-tls", Service: "nodeset-autoscaler"}},
		ClientSecret:         "cluster-autoscaler-client-tls",
		ClientName:           "cluster-autoscaler",
		WebhookConfiguration: "nodeset.dev",
		ClusterDomain:        "cluster.local",
		Validity:             365 * 24 * time.Hour,
		WebhookWait:          time.Second,
		Now:                  func() time.Time { return now },
	}
}

func secretData(t *testing.T, kube *fake.Clientset, name string) map[string][]byte {
	t.Helper()
	s, err := kube.CoreV1().Secrets("nodeset-system").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err, name)
	return s.Data
}

// TestProvision: one run makes the CA, both serving certificates (valid for
// the Services' DNS names), the client certificate and the caBundle; a second
// run changes nothing; near the end of their validity the leaves are issued
// again under the same CA; a serving certificate and a client certificate of
// the CA complete a mutual-TLS handshake.
func TestProvision(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	kube := fake.NewClientset(&admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeset.dev"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "nodesets.nodeset.dev"}, {Name: "nodeclasses.nodeset.dev"}},
	})
	require.NoError(t, Provision(ctx, kube, testOptions(now)))

	ca := secretData(t, kube, "nodeset-ca")
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca[CACertKey]))
	verify := func(name, dnsName string, usage x509.ExtKeyUsage) {
		data := secretData(t, kube, name)
		assert.Equal(t, ca[CACertKey], data[CACertKey], "%s carries the CA", name)
		pair, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
		require.NoError(t, err, name)
		cert, err := x509.ParseCertificate(pair.Certificate[0])
		require.NoError(t, err)
		_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{usage}})
		assert.NoError(t, err, name)
	}
	verify("nodeset-webhook-tls", "nodeset-webhook.nodeset-system.svc", x509.ExtKeyUsageServerAuth)
	verify("nodeset-autoscaler-tls", "nodeset-autoscaler.nodeset-system.svc", x509.ExtKeyUsageServerAuth)
	verify("nodeset-autoscaler-tls", "nodeset-autoscaler.nodeset-system.svc.cluster.local", x509.ExtKeyUsageServerAuth)
	verify("cluster-autoscaler-client-tls", "", x509.ExtKeyUsageClientAuth)
	webhook, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "nodeset.dev", metav1.GetOptions{})
	require.NoError(t, err)
	for _, w := range webhook.Webhooks {
		assert.Equal(t, ca[CACertKey], w.ClientConfig.CABundle, w.Name)
	}

	// Again: nothing changes.
	before := secretData(t, kube, "nodeset-autoscaler-tls")
	require.NoError(t, Provision(ctx, kube, testOptions(now.Add(time.Hour))))
	assert.Equal(t, before, secretData(t, kube, "nodeset-autoscaler-tls"))
	assert.Equal(t, ca, secretData(t, kube, "nodeset-ca"))

	// With less than a third of the validity left: new leaves, same CA.
	require.NoError(t, Provision(ctx, kube, testOptions(now.Add(250*24*time.Hour))))
	assert.NotEqual(t, before[corev1.TLSCertKey], secretData(t, kube, "nodeset-autoscaler-tls")[corev1.TLSCertKey])
	assert.Equal(t, ca, secretData(t, kube, "nodeset-ca"))

	// A renamed Service gets a certificate for its new name.
	opts := testOptions(now.Add(250 * 24 * time.Hour))
	opts.Serving[1].Service = "autoscaler"
	require.NoError(t, Provision(ctx, kube, opts))
	data := secretData(t, kube, "nodeset-autoscaler-tls")
	pair, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	assert.Contains(t, cert.DNSNames, "autoscaler.nodeset-system.svc")
}

func TestProvisionWaitsForTheWebhookConfiguration(t *testing.T) {
	kube := fake.NewClientset()
	err := Provision(context.Background(), kube, testOptions(time.Now()))
	assert.ErrorContains(t, err, "ValidatingWebhookConfiguration nodeset.dev did not appear")
	// The certificates are there all the same.
	secretData(t, kube, "nodeset-webhook-tls")
}

// TestProvisionRenewsTheCABeforeItExpires: run as the weekly CronJob runs it,
// for longer than the CA is valid, nodeset-certs never leaves a moment
// where a certificate in use has expired or is not trusted by the other
// side: the CA is renewed with a third of its validity left, and the old
// one stays trusted (in ca.crt and the caBundle) until it expires, so a
// server or client still holding a certificate of the old CA (a pod whose
// Secret volume is not updated yet, cluster-autoscaler's copy of its client
// certificate) keeps working.
func TestProvisionRenewsTheCABeforeItExpires(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	kube := fake.NewClientset(&admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeset.dev"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "nodesets.nodeset.dev"}},
	})
	leaf := func(data map[string][]byte) *x509.Certificate {
		pair, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
		require.NoError(t, err)
		cert, err := x509.ParseCertificate(pair.Certificate[0])
		require.NoError(t, err)
		return cert
	}
	trusts := func(bundle []byte, cert *x509.Certificate, at time.Time, usage x509.ExtKeyUsage) error {
		roots := x509.NewCertPool()
		require.True(t, roots.AppendCertsFromPEM(bundle))
		_, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}
	caValidity := 10 * testOptions(start).Validity
	var previous map[string][]byte
	var renewedCA bool
	for now := start; now.Before(start.Add(caValidity + 400*24*time.Hour)); now = now.Add(7 * 24 * time.Hour) {
		require.NoError(t, Provision(ctx, kube, testOptions(now)), "the run of %s", now.Format(time.DateOnly))
		webhook, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "nodeset.dev", metav1.GetOptions{})
		require.NoError(t, err)
		caBundle := webhook.Webhooks[0].ClientConfig.CABundle
		serving, client := secretData(t, kube, "nodeset-webhook-tls"), secretData(t, kube, "cluster-autoscaler-client-tls")
		// A week later, before the next run: what is issued now is valid and trusted.
		later := now.Add(7 * 24 * time.Hour)
		require.NoError(t, trusts(caBundle, leaf(serving), later, x509.ExtKeyUsageServerAuth), "the webhook's certificate on %s", later.Format(time.DateOnly))
		require.NoError(t, trusts(serving[CACertKey], leaf(client), later, x509.ExtKeyUsageClientAuth), "the client certificate on %s", later.Format(time.DateOnly))
		if previous != nil && !bytes.Equal(previous[CACertKey], serving[CACertKey]) {
			// The trust changed: what was issued before is still trusted now.
			renewedCA = true
			assert.NoError(t, trusts(caBundle, leaf(previous), now, x509.ExtKeyUsageServerAuth), "the webhook's previous certificate on %s", now.Format(time.DateOnly))
		}
		previous = serving
	}
	assert.True(t, renewedCA, "the CA was renewed")
}
