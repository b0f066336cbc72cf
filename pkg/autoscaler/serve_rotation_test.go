package autoscaler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/test/framework"
)

// TestServeRereadsCertificatesOnEveryHandshake: the Secrets the kubelet
// mounts are renewed in place (deploy/certs), and a CA replaced because a
// client key leaked must stop letting that key in at once. After the
// files are replaced by those of a new CA, the server presents the new
// certificate and takes clients of the new CA only, without a restart.
func TestServeRereadsCertificatesOnEveryHandshake(t *testing.T) {
	dir := t.TempDir()
	before, err := framework.NewMutualTLS(dir, "nodeset-controller", "cluster-autoscaler")
	require.NoError(t, err)
	after, err := framework.NewMutualTLS(dir, "nodeset-controller", "cluster-autoscaler")
	require.NoError(t, err)
	opts := serveMutualTLS(t, before)

	call := func(roots *x509.CertPool, pair tls.Certificate) error {
		creds := credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
		conn, err := grpc.NewClient(opts.BindAddress, grpc.WithTransportCredentials(creds))
		require.NoError(t, err)
		defer conn.Close()
		callCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = protos.NewCloudProviderClient(conn).NodeGroups(callCtx, &protos.NodeGroupsRequest{}, grpc.WaitForReady(false))
		return err
	}
	require.Eventually(t, func() bool { return call(before.Roots, before.Client) == nil }, 10*time.Second, 50*time.Millisecond,
		"a client of the first CA is served")

	// The kubelet swaps a mounted Secret's files; copying them over the
	// ones the flags name is the same to the server.
	for from, to := range map[string]string{after.ServerCert: before.ServerCert, after.ServerKey: before.ServerKey, after.ClientCA: before.ClientCA} {
		data, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(to, data, 0o600))
	}

	assert.NoError(t, call(after.Roots, after.Client), "a client of the new CA is served with the new serving certificate")
	assert.Error(t, call(after.Roots, before.Client), "a client certificate of the replaced CA is refused")
}
