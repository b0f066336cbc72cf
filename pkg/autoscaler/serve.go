package autoscaler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/pkg/redact"
)

// ServingOptions say where and how the server listens.
type ServingOptions struct {
	// BindAddress is host:port; empty disables the server.
	BindAddress string
	// CertFile and KeyFile enable TLS.
	CertFile, KeyFile string
	// ClientCAFile makes the server require client certificates signed by it.
	ClientCAFile string
}

// AddFlags registers the serving flags.
func (o *ServingOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.BindAddress, "autoscaler-bind-address", "",
		"Address (host:port) to serve cluster-autoscaler's externalgrpc cloud-provider API on. Empty disables it. "+
			"Any address but a loopback one (127.0.0.0/8, ::1, localhost) needs mutual TLS: all three --autoscaler-tls-* flags.")
	fs.StringVar(&o.CertFile, "autoscaler-tls-cert-file", "",
		"TLS certificate for the autoscaler API (with --autoscaler-tls-key-file). Without it the API is plaintext, which is refused unless bound to loopback.")
	fs.StringVar(&o.KeyFile, "autoscaler-tls-key-file", "", "TLS private key for the autoscaler API.")
	fs.StringVar(&o.ClientCAFile, "autoscaler-tls-client-ca-file", "",
		"CA bundle: when set, clients of the autoscaler API must present a certificate it signed.")
}

// Validate refuses a configuration that would let callers in without a
// client certificate anywhere but on loopback: the API adds and removes
// every tenant's nodes.
func (o *ServingOptions) Validate() error {
	if o.CertFile == "" && o.KeyFile == "" && o.ClientCAFile != "" {
		return errors.New("--autoscaler-tls-client-ca-file needs --autoscaler-tls-cert-file and --autoscaler-tls-key-file")
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return errors.New("--autoscaler-tls-cert-file and --autoscaler-tls-key-file go together")
	}
	if o.BindAddress == "" || o.ClientCAFile != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(o.BindAddress)
	if err != nil {
		return fmt.Errorf("--autoscaler-bind-address=%s: %w", o.BindAddress, err)
	}
	if isLoopback(host) {
		return nil
	}
	what := "plaintext"
	if o.CertFile != "" {
		what = "TLS without client certificates"
	}
	return fmt.Errorf("--autoscaler-bind-address=%s is not a loopback address: refusing to serve the autoscaler API with %s, "+
		"which lets anyone who reaches the port list every tenant's NodeSets and delete their nodes; "+
		"set --autoscaler-tls-cert-file, --autoscaler-tls-key-file and --autoscaler-tls-client-ca-file (mutual TLS), "+
		"or bind to 127.0.0.1 or [::1]", o.BindAddress, what)
}

// isLoopback reports whether host (of host:port) only reaches this machine:
// an address in 127.0.0.0/8, ::1, or localhost. An empty host is every
// interface.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ServerOptions are the gRPC options the serving options call for. The
// files are read here, so that a missing or bad one is a startup error, and
// again on every handshake: the kubelet renews a mounted Secret in place,
// and a client CA replaced because a client key leaked must stop letting
// that key in without a restart.
func (o *ServingOptions) ServerOptions() ([]grpc.ServerOption, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.CertFile == "" {
		return nil, nil
	}
	if _, err := o.keyPair(); err != nil {
		return nil, err
	}
	getCertificate := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return o.keyPair() }
	config := &tls.Config{GetCertificate: getCertificate, MinVersion: tls.VersionTLS12}
	if o.ClientCAFile != "" {
		if _, err := o.clientCAs(); err != nil {
			return nil, err
		}
		config.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			pool, err := o.clientCAs()
			if err != nil {
				return nil, err
			}
			return &tls.Config{GetCertificate: getCertificate, MinVersion: tls.VersionTLS12,
				ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}, nil
		}
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(config))}, nil
}

// keyPair reads the serving certificate and key.
func (o *ServingOptions) keyPair() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the autoscaler API's TLS key pair: %w", err)
	}
	return &cert, nil
}

// clientCAs reads --autoscaler-tls-client-ca-file.
func (o *ServingOptions) clientCAs() (*x509.CertPool, error) {
	pem, err := os.ReadFile(o.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("reading --autoscaler-tls-client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--autoscaler-tls-client-ca-file %s holds no PEM certificate", o.ClientCAFile)
	}
	return pool, nil
}

// Serve runs the CloudProvider service on the bind address until ctx is done.
func (o *ServingOptions) Serve(ctx context.Context, server protos.CloudProviderServer) error {
	opts, err := o.ServerOptions()
	if err != nil {
		return err
	}
	listener, err := net.Listen("tcp", o.BindAddress)
	if err != nil {
		return fmt.Errorf("autoscaler API: %w", err)
	}
	g := grpc.NewServer(append(opts, grpc.ChainUnaryInterceptor(boundErrors, recoverPanics))...)
	protos.RegisterCloudProviderServer(g, server)
	go func() {
		<-ctx.Done()
		g.GracefulStop()
	}()
	klog.FromContext(ctx).Info("Serving cluster-autoscaler's externalgrpc API", "address", listener.Addr().String(), "tls", len(opts) > 0)
	if err := g.Serve(listener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// errorMessageLimit bounds the message of an error the server answers
// with. cluster-autoscaler logs each failed call's message and may keep it
// in its status ConfigMap; the messages quote what a caller sent (a node
// group id, a Node's name and provider ID) and what the API server answered.
const errorMessageLimit = 2048

// boundErrors answers every failed call with its message rid of anything of
// a credential's form and cut to errorMessageLimit bytes, its code kept.
func boundErrors(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err == nil {
		return resp, nil
	}
	answer := status.Convert(err)
	return resp, status.Error(answer.Code(), redact.Cut(redact.Shapes(answer.Message()), errorMessageLimit))
}

// recoverPanics answers a call whose handler panicked with Internal, the
// panic logged with its stack, instead of letting it take the process
// down: the server answers about NodeSets tenants write, and the process
// is the nodeset-controller's too.
func recoverPanics(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			klog.FromContext(ctx).Error(fmt.Errorf("%v", r), "Recovered from a panic", "method", info.FullMethod, "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "%s panicked: %v", info.FullMethod, r)
		}
	}()
	return handler(ctx, req)
}
