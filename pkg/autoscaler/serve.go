package autoscaler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/klog/v2"

	"nodeset.dev/nodeset/pkg/autoscaler/protos"
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
		"Address (host:port) to serve cluster-autoscaler's externalgrpc cloud-provider API on. Empty disables it.")
	fs.StringVar(&o.CertFile, "autoscaler-tls-cert-file", "", "TLS certificate for the autoscaler API (with --autoscaler-tls-key-file). Without it the API is plaintext.")
	fs.StringVar(&o.KeyFile, "autoscaler-tls-key-file", "", "TLS private key for the autoscaler API.")
	fs.StringVar(&o.ClientCAFile, "autoscaler-tls-client-ca-file", "",
		"CA bundle: when set, clients of the autoscaler API must present a certificate it signed.")
}

// ServerOptions are the gRPC options the serving options call for.
func (o *ServingOptions) ServerOptions() ([]grpc.ServerOption, error) {
	if o.CertFile == "" && o.KeyFile == "" {
		if o.ClientCAFile != "" {
			return nil, errors.New("--autoscaler-tls-client-ca-file needs --autoscaler-tls-cert-file and --autoscaler-tls-key-file")
		}
		return nil, nil
	}
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, errors.New("--autoscaler-tls-cert-file and --autoscaler-tls-key-file go together")
	}
	cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the autoscaler API's TLS key pair: %w", err)
	}
	config := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if o.ClientCAFile != "" {
		pem, err := os.ReadFile(o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("reading --autoscaler-tls-client-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--autoscaler-tls-client-ca-file %s holds no PEM certificate", o.ClientCAFile)
		}
		config.ClientCAs, config.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(config))}, nil
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
	g := grpc.NewServer(opts...)
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
