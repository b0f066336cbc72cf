// Package servingcerts provisions nodeset's TLS material inside the cluster,
// with no extra software: a self-signed CA kept in a Secret, serving
// certificates for the webhook and the autoscaler API Services, a client
// certificate for cluster-autoscaler, and the CA in the caBundle of the
// ValidatingWebhookConfiguration. Running it again changes nothing until a
// certificate nears its end or no longer fits; then it issues a new one.
package servingcerts

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// Keys of the Secrets: kubernetes.io/tls plus the CA that signed the pair.
const (
	CAKeyKey  = "ca.key"
	CACertKey = "ca.crt"
)

// ServingCertificate is a serving certificate for a Service, stored in Secret.
type ServingCertificate struct {
	Secret, Service string
}

// Options name what Provision makes. Every Secret lives in Namespace.
type Options struct {
	Namespace string
	// CASecret holds the CA (ca.crt, ca.key); only this provisioner reads it.
	CASecret string
	// Serving certificates, valid for the Service's in-cluster DNS names.
	Serving []ServingCertificate
	// ClientSecret gets a client certificate with common name ClientName,
	// signed by the CA, which the autoscaler API requires of its callers.
	ClientSecret, ClientName string
	// WebhookConfiguration is the ValidatingWebhookConfiguration whose
	// webhooks get the CA as caBundle; empty skips it.
	WebhookConfiguration string
	// ClusterDomain is the cluster's DNS domain (cluster.local).
	ClusterDomain string
	// Validity of issued certificates; one is issued again when less than a
	// third of it is left. The CA is valid for ten times as long.
	Validity time.Duration
	// WebhookWait bounds the wait for the webhook configuration to exist
	// (it may be applied after the Job starts).
	WebhookWait time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Provision makes or renews every certificate and injects the caBundle.
func Provision(ctx context.Context, kube kubernetes.Interface, opts Options) error {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ca, err := ensureCA(ctx, kube, opts)
	if err != nil {
		return err
	}
	for _, s := range opts.Serving {
		names := []string{s.Service, s.Service + "." + opts.Namespace, s.Service + "." + opts.Namespace + ".svc",
			s.Service + "." + opts.Namespace + ".svc." + opts.ClusterDomain}
		if err := ensureLeaf(ctx, kube, opts, ca, s.Secret, names[2], x509.ExtKeyUsageServerAuth, names); err != nil {
			return err
		}
	}
	if opts.ClientSecret != "" {
		if err := ensureLeaf(ctx, kube, opts, ca, opts.ClientSecret, opts.ClientName, x509.ExtKeyUsageClientAuth, nil); err != nil {
			return err
		}
	}
	if opts.WebhookConfiguration != "" {
		return injectCABundle(ctx, kube, opts, ca.certPEM)
	}
	return nil
}

type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// certPEM is what trusts the CA: its certificate, then the one of the CA
	// it replaced while that one is valid.
	certPEM []byte
}

func ensureCA(ctx context.Context, kube kubernetes.Interface, opts Options) (*authority, error) {
	secrets := kube.CoreV1().Secrets(opts.Namespace)
	secret, err := secrets.Get(ctx, opts.CASecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		certPEM, keyPEM, genErr := newCA(opts.Now(), 10*opts.Validity)
		if genErr != nil {
			return nil, genErr
		}
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: opts.CASecret, Namespace: opts.Namespace, Labels: labels()},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{CACertKey: certPEM, CAKeyKey: keyPEM},
		}
		secret, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // another run was first: use its CA
			secret, err = secrets.Get(ctx, opts.CASecret, metav1.GetOptions{})
		} else if err == nil {
			klog.FromContext(ctx).Info("Created the CA", "secret", klog.KObj(secret))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the CA Secret %s/%s: %w", opts.Namespace, opts.CASecret, err)
	}
	pair, err := tls.X509KeyPair(secret.Data[CACertKey], secret.Data[CAKeyKey])
	if err != nil {
		return nil, fmt.Errorf("the CA Secret %s/%s holds no usable CA: %w", opts.Namespace, opts.CASecret, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the CA Secret %s/%s: want an ECDSA key, have %T", opts.Namespace, opts.CASecret, pair.PrivateKey)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	now := opts.Now()
	if !cert.IsCA || now.After(cert.NotAfter) {
		return nil, fmt.Errorf("the CA Secret %s/%s holds no valid CA certificate (expires %s); delete it to have a new CA made",
			opts.Namespace, opts.CASecret, cert.NotAfter.Format(time.RFC3339))
	}
	if now.Add(10 * opts.Validity / 3).After(cert.NotAfter) {
		return renewCA(ctx, kube, opts, secret, cert)
	}
	return &authority{cert: cert, key: key, certPEM: trusted(secret.Data[CACertKey], now)}, nil
}

// renewCA replaces a CA with less than a third of its validity left by a new
// one, and keeps the old one's certificate after the new one's in ca.crt:
// what the old CA signed stays trusted until it expires.
func renewCA(ctx context.Context, kube kubernetes.Interface, opts Options, secret *corev1.Secret, old *x509.Certificate) (*authority, error) {
	certPEM, keyPEM, err := newCA(opts.Now(), 10*opts.Validity)
	if err != nil {
		return nil, err
	}
	secret = secret.DeepCopy()
	secret.Data = map[string][]byte{
		CACertKey: append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: old.Raw})...),
		CAKeyKey:  keyPEM,
	}
	// The resourceVersion read is the precondition: of two runs at once, one
	// renews and the other fails, to find the new CA when it runs again.
	if _, err := kube.CoreV1().Secrets(opts.Namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("renewing the CA in Secret %s/%s: %w", opts.Namespace, opts.CASecret, err)
	}
	klog.FromContext(ctx).Info("Renewed the CA; the old one stays trusted until it expires", "secret", klog.KObj(secret),
		"oldExpires", old.NotAfter.Format(time.RFC3339))
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: pair.PrivateKey.(*ecdsa.PrivateKey), certPEM: trusted(secret.Data[CACertKey], opts.Now())}, nil
}

// trusted returns the certificates of bundle that have not expired at now,
// in their order: the CA's own first, then the one it replaced.
func trusted(bundle []byte, now time.Time) []byte {
	var out []byte
	for rest := bundle; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return out
		}
		if cert, err := x509.ParseCertificate(block.Bytes); err == nil && !now.After(cert.NotAfter) {
			out = append(out, pem.EncodeToMemory(block)...)
		}
	}
}

// ensureLeaf keeps the Secret's certificate if the CA signed it for these
// names and usage and a third of its validity is left, and issues it again
// otherwise.
func ensureLeaf(ctx context.Context, kube kubernetes.Interface, opts Options, ca *authority, name, commonName string,
	usage x509.ExtKeyUsage, dnsNames []string) error {
	secrets := kube.CoreV1().Secrets(opts.Namespace)
	existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("secret %s/%s: %w", opts.Namespace, name, err)
	}
	found := err == nil
	if found && fits(existing, ca, usage, dnsNames, opts.Now().Add(opts.Validity/3)) {
		return nil
	}
	certPEM, keyPEM, err := issue(ca, opts.Now(), opts.Validity, commonName, usage, dnsNames)
	if err != nil {
		return err
	}
	data := map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, CACertKey: ca.certPEM}
	if !found {
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: opts.Namespace, Labels: labels()},
			Type:       corev1.SecretTypeTLS,
			Data:       data,
		}, metav1.CreateOptions{})
	} else {
		existing = existing.DeepCopy()
		existing.Data = data
		_, err = secrets.Update(ctx, existing, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", opts.Namespace, name, err)
	}
	klog.FromContext(ctx).Info("Issued a certificate", "secret", klog.KRef(opts.Namespace, name), "commonName", commonName, "dnsNames", dnsNames)
	return nil
}

// fits reports whether secret holds a key pair the CA signed for usage and
// dnsNames that is still valid at renewBy.
func fits(secret *corev1.Secret, ca *authority, usage x509.ExtKeyUsage, dnsNames []string, renewBy time.Time) bool {
	pair, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil || !bytes.Equal(secret.Data[CACertKey], ca.certPEM) {
		return false
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || renewBy.After(cert.NotAfter) || !slices.Equal(cert.DNSNames, dnsNames) {
		return false
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, CurrentTime: renewBy})
	return err == nil
}

func injectCABundle(ctx context.Context, kube kubernetes.Interface, opts Options, caPEM []byte) error {
	configs := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	// Applied in the same kubectl apply as the Job, it may not exist yet.
	err := wait.PollUntilContextTimeout(ctx, time.Second, opts.WebhookWait, true, func(ctx context.Context) (bool, error) {
		_, err := configs.Get(ctx, opts.WebhookConfiguration, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("ValidatingWebhookConfiguration %s did not appear within %s", opts.WebhookConfiguration, opts.WebhookWait)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		config, err := configs.Get(ctx, opts.WebhookConfiguration, metav1.GetOptions{})
		if err != nil {
			return err
		}
		config = config.DeepCopy()
		changed := false
		for i := range config.Webhooks {
			if !bytes.Equal(config.Webhooks[i].ClientConfig.CABundle, caPEM) {
				config.Webhooks[i].ClientConfig.CABundle = caPEM
				changed = true
			}
		}
		if !changed {
			return nil
		}
		if _, err := configs.Update(ctx, config, metav1.UpdateOptions{}); err != nil {
			return err
		}
		klog.FromContext(ctx).Info("Injected the CA into the webhook configuration", "configuration", opts.WebhookConfiguration)
		return nil
	})
}

func labels() map[string]string {
	return map[string]string{"app.kubernetes.io/part-of": "nodeset", "app.kubernetes.io/managed-by": "nodeset-certs"}
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA(now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "nodeset-ca", Organization: []string{"nodeset"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	return encode(der, key)
}

func issue(ca *authority, now time.Time, validity time.Duration, commonName string, usage x509.ExtKeyUsage, dnsNames []string) (certPEM, keyPEM []byte, err error) {
	if len(dnsNames) == 0 && usage == x509.ExtKeyUsageServerAuth {
		return nil, nil, errors.New("a serving certificate needs DNS names")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	return encode(der, key)
}

func encode(der []byte, key *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
