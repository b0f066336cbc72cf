package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"nodeset.dev/nodeset/pkg/autoscaler"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/pkg/servingcerts"
	"nodeset.dev/nodeset/test/framework"
)

// TestShippedCertificatesGiveMutualTLS runs the certificate provisioning of
// deploy/certs as its ServiceAccount, with exactly the RBAC it ships with,
// against the real API server: it makes the CA and the Secrets, injects the
// caBundle into deploy/webhook's configuration, and a second run changes
// nothing. The autoscaler API served with those Secrets (as the Deployment
// mounts them) answers a client holding cluster-autoscaler's certificate that
// dials the Service's name, as cluster-autoscaler does, and nobody else.
func TestShippedCertificatesGiveMutualTLS(t *testing.T) {
	cp := framework.Shared(t)
	ctx := context.Background()
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	kube := kubeClient(t)
	ensureNamespace(t, "nodeset-system")

	// The RBAC of deploy/certs (not its Job: no kube-controller-manager runs it here).
	objs, err := framework.ReadObjects(filepath.Join(root, "deploy", "certs", "nodeset-certs.yaml"))
	require.NoError(t, err)
	rbac := filepath.Join(t.TempDir(), "rbac.yaml")
	var docs []byte
	for _, obj := range objs {
		if obj.GetKind() == "Job" || obj.GetKind() == "CronJob" {
			continue
		}
		raw, err := yaml.Marshal(obj.Object)
		require.NoError(t, err)
		docs = append(append(docs, raw...), []byte("---\n")...)
	}
	require.NoError(t, os.WriteFile(rbac, docs, 0o600))
	require.NoError(t, framework.Apply(ctx, cp.AdminConfig(), rbac))
	webhook := filepath.Join(root, "deploy", "webhook", "nodeset-webhook.yaml")
	require.NoError(t, framework.Apply(ctx, cp.AdminConfig(), webhook))
	t.Cleanup(func() { _ = framework.Delete(context.Background(), cp.AdminConfig(), webhook) })

	asJob := cp.AdminConfig()
	asJob.Impersonate.UserName = "system:serviceaccount:nodeset-system:nodeset-certs"
	asJob.Impersonate.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:nodeset-system", "system:authenticated"}
	jobClient := kubernetes.NewForConfigOrDie(asJob)
	opts := servingcerts.Options{
		Namespace: "nodeset-system", CASecret: "nodeset-ca",
		Serving: []servingcerts.ServingCertificate{{Secret: "nodeset-webhook-tls", Service: "nodeset-webhook"},
			{Secret: "nodeset-autoscaler-tls", Service: "nodeset-autoscaler"}},
		ClientSecret: "cluster-autoscaler-client-tls", ClientName: "cluster-autoscaler",
		WebhookConfiguration: "nodeset.dev", ClusterDomain: "cluster.local",
		Validity: 365 * 24 * time.Hour, WebhookWait: 30 * time.Second,
	}
	require.NoError(t, servingcerts.Provision(ctx, jobClient, opts), "provisioning with the shipped RBAC")
	secret := func(name string) *corev1.Secret {
		s, err := kube.CoreV1().Secrets("nodeset-system").Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err, name)
		return s
	}
	serving, client := secret("nodeset-autoscaler-tls"), secret("cluster-autoscaler-client-tls")
	assert.Equal(t, corev1.SecretTypeTLS, serving.Type)
	config, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "nodeset.dev", metav1.GetOptions{})
	require.NoError(t, err)
	for _, w := range config.Webhooks {
		assert.Equal(t, secret("nodeset-ca").Data["ca.crt"], w.ClientConfig.CABundle, "caBundle of %s", w.Name)
	}
	require.NoError(t, servingcerts.Provision(ctx, jobClient, opts), "a second run")
	assert.Equal(t, serving.ResourceVersion, secret("nodeset-autoscaler-tls").ResourceVersion, "a second run changes nothing")

	// Serve as the Deployment does, from the mounted Secret's files.
	dir := t.TempDir()
	for key, value := range serving.Data {
		require.NoError(t, os.WriteFile(filepath.Join(dir, key), value, 0o600))
	}
	port, err := framework.FreePort()
	require.NoError(t, err)
	server := autoscaler.ServingOptions{BindAddress: fmt.Sprintf("127.0.0.1:%d", port),
		CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), ClientCAFile: filepath.Join(dir, "ca.crt")}
	serveCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- server.Serve(serveCtx, protos.UnimplementedCloudProviderServer{}) }()
	t.Cleanup(func() { stop(); <-done })

	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(client.Data["ca.crt"]))
	call := func(certs []tls.Certificate) error {
		// cluster-autoscaler sets the server name from the host of its address.
		creds := credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: certs,
			ServerName: "nodeset-autoscaler.nodeset-system.svc", MinVersion: tls.VersionTLS12})
		conn, err := grpc.NewClient(server.BindAddress, grpc.WithTransportCredentials(creds))
		require.NoError(t, err)
		defer conn.Close()
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = protos.NewCloudProviderClient(conn).NodeGroups(callCtx, &protos.NodeGroupsRequest{})
		return err
	}
	pair, err := tls.X509KeyPair(client.Data["tls.crt"], client.Data["tls.key"])
	require.NoError(t, err)
	require.Eventually(t, func() bool { return status.Code(call([]tls.Certificate{pair})) == codes.Unimplemented }, 10*time.Second, 50*time.Millisecond,
		"cluster-autoscaler's certificate gets through to the service")
	assert.Equal(t, codes.Unavailable, status.Code(call(nil)), "no client certificate: no connection")
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := kubeClient(t).CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}
