package autoscaler

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/test/framework"
)

// TestServeRequiresClientCertificates serves over TLS with a client CA: a
// client with a certificate of that CA gets answers; one without, or with a
// certificate of another CA, or in plaintext, does not.
func TestServeRequiresClientCertificates(t *testing.T) {
	certs, err := framework.NewMutualTLS(t.TempDir(), "nodeset-controller", "cluster-autoscaler")
	require.NoError(t, err)
	opts := serveMutualTLS(t, certs)

	call := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(opts.BindAddress, grpc.WithTransportCredentials(creds))
		require.NoError(t, err)
		defer conn.Close()
		callCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = protos.NewCloudProviderClient(conn).NodeGroups(callCtx, &protos.NodeGroupsRequest{}, grpc.WaitForReady(false))
		return err
	}
	withCert := func(pair tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{RootCAs: certs.Roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	}
	require.Eventually(t, func() bool { return call(withCert(certs.Client)) == nil }, 10*time.Second, 50*time.Millisecond,
		"a client with a certificate of the client CA is served")
	assert.Error(t, call(credentials.NewTLS(&tls.Config{RootCAs: certs.Roots, MinVersion: tls.VersionTLS12})), "no client certificate")
	assert.Error(t, call(withCert(certs.Stranger)), "a certificate of another CA")
	assert.Error(t, call(insecure.NewCredentials()), "plaintext")
}

func TestServingOptionsRefuseHalfConfiguredTLS(t *testing.T) {
	_, err := (&ServingOptions{CertFile: "a.crt"}).ServerOptions()
	assert.ErrorContains(t, err, "go together")
	_, err = (&ServingOptions{ClientCAFile: "ca.crt"}).ServerOptions()
	assert.ErrorContains(t, err, "needs --autoscaler-tls-cert-file")
	opts, err := (&ServingOptions{BindAddress: "127.0.0.1:8086"}).ServerOptions()
	assert.NoError(t, err)
	assert.Empty(t, opts, "plaintext on loopback when no TLS flag is set")
}

// TestServingOptionsRefuseUnauthenticatedOffLoopback: without mutual TLS the
// API may only listen on loopback; anywhere else is a startup error that
// says what to set, and Serve never opens the port.
func TestServingOptionsRefuseUnauthenticatedOffLoopback(t *testing.T) {
	mtls := ServingOptions{CertFile: "tls.crt", KeyFile: "tls.key", ClientCAFile: "ca.crt"}
	for _, tc := range []struct {
		name    string
		opts    ServingOptions
		wantErr string
	}{
		{name: "plaintext on 127.0.0.1", opts: ServingOptions{BindAddress: "127.0.0.1:8086"}},
		{name: "plaintext on 127.1.2.3", opts: ServingOptions{BindAddress: "127.1.2.3:8086"}},
		{name: "plaintext on ::1", opts: ServingOptions{BindAddress: "[::1]:8086"}},
		{name: "plaintext on localhost", opts: ServingOptions{BindAddress: "localhost:8086"}},
		{name: "disabled", opts: ServingOptions{}},
		{name: "plaintext on every interface", opts: ServingOptions{BindAddress: ":8086"}, wantErr: "refusing to serve the autoscaler API with plaintext"},
		{name: "plaintext on 0.0.0.0", opts: ServingOptions{BindAddress: "0.0.0.0:8086"}, wantErr: "not a loopback address"},
		{name: "plaintext on [::]", opts: ServingOptions{BindAddress: "[::]:8086"}, wantErr: "not a loopback address"},
		{name: "plaintext on a pod IP", opts: ServingOptions{BindAddress: "10.1.2.3:8086"}, wantErr: "--autoscaler-tls-client-ca-file"},
		{name: "plaintext on a host name", opts: ServingOptions{BindAddress: "nodeset.example.com:8086"}, wantErr: "not a loopback address"},
		{name: "TLS without a client CA on every interface",
			opts:    ServingOptions{BindAddress: ":8086", CertFile: "tls.crt", KeyFile: "tls.key"},
			wantErr: "TLS without client certificates"},
		{name: "mutual TLS on every interface", opts: func() ServingOptions { o := mtls; o.BindAddress = ":8086"; return o }()},
		{name: "not host:port", opts: ServingOptions{BindAddress: "8086"}, wantErr: "missing port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}

	// Serve refuses before listening.
	port, err := framework.FreePort()
	require.NoError(t, err)
	opts := ServingOptions{BindAddress: fmt.Sprintf("0.0.0.0:%d", port)}
	err = opts.Serve(context.Background(), newFixture(t, nil, testSet(1)).server)
	assert.ErrorContains(t, err, "not a loopback address")
}

// serveMutualTLS serves a fixture's server with the certificates of certs
// on a free loopback port until the test ends, and returns its options.
func serveMutualTLS(t *testing.T, certs *framework.MutualTLS) ServingOptions {
	t.Helper()
	port, err := framework.FreePort()
	require.NoError(t, err)
	opts := ServingOptions{BindAddress: fmt.Sprintf("127.0.0.1:%d", port),
		CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCAFile: certs.ClientCA}
	serve(t, opts, newFixture(t, nil, testSet(1)).server)
	return opts
}

// serve serves server with opts until the test ends.
func serve(t *testing.T, opts ServingOptions, server protos.CloudProviderServer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- opts.Serve(ctx, server) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// panicking panics in NodeGroups.
type panicking struct {
	protos.UnimplementedCloudProviderServer
}

func (panicking) NodeGroups(context.Context, *protos.NodeGroupsRequest) (*protos.NodeGroupsResponse, error) {
	panic("a NodeSet it did not expect")
}

// TestAPanicFailsItsCallAlone: a handler that panics (on a NodeSet it did
// not expect) answers its call with Internal, and the server, which is the
// nodeset-controller's process, goes on serving.
func TestAPanicFailsItsCallAlone(t *testing.T) {
	port, err := framework.FreePort()
	require.NoError(t, err)
	opts := ServingOptions{BindAddress: fmt.Sprintf("127.0.0.1:%d", port)}
	serve(t, opts, panicking{})
	conn, err := grpc.NewClient(opts.BindAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := protos.NewCloudProviderClient(conn)
	for range 2 {
		callCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = client.NodeGroups(callCtx, &protos.NodeGroupsRequest{}, grpc.WaitForReady(true))
		cancel()
		assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
		assert.ErrorContains(t, err, "NodeGroups panicked: a NodeSet it did not expect")
	}
	_, err = client.Refresh(context.Background(), &protos.RefreshRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "still serving: %v", err)
}

// echoing answers NodeGroupTargetSize with an error quoting the id it was
// asked about, as the server's own answers quote a node group id or a
// Node's provider ID.
type echoing struct {
	protos.UnimplementedCloudProviderServer
}

func (echoing) NodeGroupTargetSize(_ context.Context, req *protos.NodeGroupTargetSizeRequest) (*protos.NodeGroupTargetSizeResponse, error) {
	return nil, status.Errorf(codes.NotFound, "node group %q: not found", req.GetId())
}

// TestAnAnswersErrorIsBoundedAndScrubbed: the message of a failed call
// (which cluster-autoscaler logs) is cut to errorMessageLimit bytes and rid
// of what has a credential's form, whatever the caller or the API server
// put in it; its code is kept.
func TestAnAnswersErrorIsBoundedAndScrubbed(t *testing.T) {
	port, err := framework.FreePort()
	require.NoError(t, err)
	opts := ServingOptions{BindAddress: fmt.Sprintf("127.0.0.1:%d", port)}
	serve(t, opts, echoing{})
	conn, err := grpc.NewClient(opts.BindAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := protos.NewCloudProviderClient(conn)
	callCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := "tenant/AKIAIOSFODNN7EXAMPLE/" + strings.Repeat("x", 100_000)
	_, err = client.NodeGroupTargetSize(callCtx, &protos.NodeGroupTargetSizeRequest{Id: id}, grpc.WaitForReady(true))
	require.Error(t, err)
	answer := status.Convert(err)
	assert.Equal(t, codes.NotFound, answer.Code())
	assert.LessOrEqual(t, len(answer.Message()), errorMessageLimit)
	assert.NotContains(t, answer.Message(), "AKIAIOSFODNN7EXAMPLE")
	assert.Contains(t, answer.Message(), `node group "tenant/[redacted:aws-access-key-id]/xxx`)
}
