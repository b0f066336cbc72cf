package framework

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// CA is a certificate authority for tests: it issues serving and client
// certificates for loopback servers.
type CA struct {
	// PEM is the CA certificate.
	PEM  []byte
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

// NewCA makes a CA valid for ten years.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}, nil
}

// Issue signs a certificate for commonName with the given usage (server or
// client auth); a server certificate is valid for 127.0.0.1, localhost and
// the extra DNS names. It returns the certificate and its key in PEM form.
func (ca *CA) Issue(commonName string, usage x509.ExtKeyUsage, dnsNames ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		template.DNSNames = append([]string{"localhost"}, dnsNames...)
		template.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// writeCerts writes a CA (certificate and key), a serving certificate for the
// API server signed by it, and a service-account signing key into dir. It returns the CA
// certificate in PEM form.
func writeCerts(dir string) ([]byte, error) {
	ca, err := NewCA("nodeset-local-ca")
	if err != nil {
		return nil, err
	}
	servingCert, servingKey, err := ca.Issue("kube-apiserver", x509.ExtKeyUsageServerAuth,
		"kubernetes", "kubernetes.default", "kubernetes.default.svc")
	if err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	caKey, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"ca.crt": ca.PEM,
		// kube-controller-manager signs approved CSRs with it.
		"ca.key":      pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: caKey}),
		"serving.crt": servingCert,
		"serving.key": servingKey,
		"sa.key":      pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return ca.PEM, nil
}

// MutualTLS is what a test of a server that asks for client certificates
// needs: the server's files, and clients with and without the right CA.
type MutualTLS struct {
	// ServerCert, ServerKey and ClientCA are files: the server's key pair
	// (for localhost and 127.0.0.1) and the CA its clients must present a
	// certificate of.
	ServerCert, ServerKey, ClientCA string
	// Roots trusts the server's certificate.
	Roots *x509.CertPool
	// Client has a certificate of ClientCA; Stranger one of another CA.
	Client, Stranger tls.Certificate
}

// NewMutualTLS issues the certificates of a MutualTLS into dir, the server's
// and the client's named server and client.
func NewMutualTLS(dir, server, client string) (*MutualTLS, error) {
	ca, err := NewCA(server + "-ca")
	if err != nil {
		return nil, err
	}
	other, err := NewCA("other-ca")
	if err != nil {
		return nil, err
	}
	out := &MutualTLS{Roots: x509.NewCertPool()}
	out.Roots.AppendCertsFromPEM(ca.PEM)
	serverCert, serverKey, err := ca.Issue(server, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	for path, data := range map[*string][]byte{&out.ServerCert: serverCert, &out.ServerKey: serverKey, &out.ClientCA: ca.PEM} {
		*path = filepath.Join(dir, fmt.Sprintf("%s-%d.pem", server, serial.Add(1)))
		if err := os.WriteFile(*path, data, 0o600); err != nil {
			return nil, err
		}
	}
	for pair, issuer := range map[*tls.Certificate]*CA{&out.Client: ca, &out.Stranger: other} {
		certPEM, keyPEM, err := issuer.Issue(client, x509.ExtKeyUsageClientAuth)
		if err != nil {
			return nil, err
		}
		if *pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return nil, err
		}
	}
	return out, nil
}
