package autoscaler

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
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/test/framework"
)

func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// TestServeRequiresClientCertificates serves over TLS with a client CA: a
// client with a certificate of that CA gets answers; one without, or with a
// certificate of another CA, or in plaintext, does not.
func TestServeRequiresClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, err := framework.NewCA("autoscaler-ca")
	require.NoError(t, err)
	serverCert, serverKey, err := ca.Issue("nodeset-controller", x509.ExtKeyUsageServerAuth)
	require.NoError(t, err)
	clientCert, clientKey, err := ca.Issue("cluster-autoscaler", x509.ExtKeyUsageClientAuth)
	require.NoError(t, err)
	other, err := framework.NewCA("other-ca")
	require.NoError(t, err)
	strangerCert, strangerKey, err := other.Issue("stranger", x509.ExtKeyUsageClientAuth)
	require.NoError(t, err)

	port, err := framework.FreePort()
	require.NoError(t, err)
	opts := ServingOptions{
		BindAddress:  fmt.Sprintf("127.0.0.1:%d", port),
		CertFile:     write(t, dir, "server.crt", serverCert),
		KeyFile:      write(t, dir, "server.key", serverKey),
		ClientCAFile: write(t, dir, "ca.crt", ca.PEM),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- opts.Serve(ctx, newFixture(t, nil, testSet(1)).server) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca.PEM))
	call := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(opts.BindAddress, grpc.WithTransportCredentials(creds))
		require.NoError(t, err)
		defer conn.Close()
		callCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = protos.NewCloudProviderClient(conn).NodeGroups(callCtx, &protos.NodeGroupsRequest{}, grpc.WaitForReady(false))
		return err
	}
	withCert := func(certPEM, keyPEM []byte) credentials.TransportCredentials {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		require.NoError(t, err)
		return credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	}
	require.Eventually(t, func() bool { return call(withCert(clientCert, clientKey)) == nil }, 10*time.Second, 50*time.Millisecond,
		"a client with a certificate of the client CA is served")
	assert.Error(t, call(credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})), "no client certificate")
	assert.Error(t, call(withCert(strangerCert, strangerKey)), "a certificate of another CA")
	assert.Error(t, call(insecure.NewCredentials()), "plaintext")
}

func TestServingOptionsRefuseHalfConfiguredTLS(t *testing.T) {
	_, err := (&ServingOptions{CertFile: "a.crt"}).ServerOptions()
	assert.ErrorContains(t, err, "go together")
	_, err = (&ServingOptions{ClientCAFile: "ca.crt"}).ServerOptions()
	assert.ErrorContains(t, err, "needs --autoscaler-tls-cert-file")
	opts, err := (&ServingOptions{}).ServerOptions()
	assert.NoError(t, err)
	assert.Empty(t, opts, "plaintext when no TLS flag is set")
}
