// Package admission serves the validating webhooks. For NodeSets it refuses
// at create and update time what the NodeSetController would report as
// Accepted=False, with the same reason and message; for NodeClasses, what the
// schema cannot check and the NodeClassController would report as
// Valid=False (tenantOverrides naming no field or a field inside a list,
// labels and taints the API server would refuse on a Node, an invalid
// namespace selector). An object that does not decode into the Go types is
// refused with the field that does not.
package admission

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	admissionv1 "k8s.io/api/admission/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/controller/nodeclass"
)

// Paths where the webhooks are served.
const (
	Path      = "/validate-nodeset"
	ClassPath = "/validate-nodeclass"
)

// Admitter decides on a NodeSet (old is nil on create), or on a change of
// its replicas through /scale: a refusal's reason and message, or "".
type Admitter interface {
	Admit(set, old *nodesetv1alpha1.NodeSet) (reason, message string)
	AdmitScale(namespace, name string, replicas int32) (reason, message string)
}

// Handler answers AdmissionReview requests for NodeSets.
func Handler(admitter Admitter) http.Handler {
	return review(func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return respond(admitter, req)
	})
}

// review decodes an AdmissionReview, answers it with decide and encodes the
// response.
func review(decide func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		review.Response = decide(review.Request)
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&review)
	})
}

func respond(admitter Admitter, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return resp
	}
	if req.SubResource == "scale" {
		scale := &autoscalingv1.Scale{}
		if err := json.Unmarshal(req.Object.Raw, scale); err != nil {
			return refuse(resp, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("decoding the Scale: %v", err))
		}
		if reason, message := admitter.AdmitScale(req.Namespace, req.Name, scale.Spec.Replicas); reason != "" {
			return refuse(resp, http.StatusForbidden, metav1.StatusReason(reason),
				fmt.Sprintf("NodeSet %s/%s: %s (%s)", req.Namespace, req.Name, message, reason))
		}
		return resp
	}
	set := &nodesetv1alpha1.NodeSet{}
	if err := decode(req.Object.Raw, set); err != nil {
		return refuse(resp, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("decoding the NodeSet: %v", err))
	}
	var old *nodesetv1alpha1.NodeSet
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		old = &nodesetv1alpha1.NodeSet{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			old = nil
		}
	}
	if set.Namespace == "" {
		set.Namespace = req.Namespace
	}
	if set.DeletionTimestamp != nil {
		return resp // never block the removal of finalizers
	}
	if len(set.Name) > validation.LabelValueMaxLength {
		return refuse(resp, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			fmt.Sprintf("NodeSet %s/%s: metadata.name: must be at most %d characters, the value of the %s label on the set's Nodes",
				set.Namespace, set.Name, validation.LabelValueMaxLength, nodesetv1alpha1.LabelNodeSet))
	}
	if key := newAnnotationWithPrefix(set, old, removedOptionPrefix); key != "" {
		return refuse(resp, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			"NodeSet %s/%s: metadata.annotations[%q]: per-NodeSet cluster-autoscaler options have no effect: cluster-autoscaler's externalgrpc client cannot carry them without also zeroing its max node startup time, so its own flags apply to every NodeSet (docs/autoscaler.md)",
			set.Namespace, set.Name, key))
	}
	if reason, message := admitter.Admit(set, old); reason != "" {
		return refuse(resp, http.StatusForbidden, metav1.StatusReason(reason), fmt.Sprintf("NodeSet %s/%s: %s (%s)", set.Namespace, set.Name, message, reason))
	}
	return resp
}

// ClassHandler answers AdmissionReview requests for NodeClasses.
func ClassHandler() http.Handler {
	return review(func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
		if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
			return resp
		}
		class := &nodesetv1alpha1.NodeClass{}
		if err := decode(req.Object.Raw, class); err != nil {
			return refuse(resp, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("decoding the NodeClass: %v", err))
		}
		if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
			old := &nodesetv1alpha1.NodeClass{}
			if err := json.Unmarshal(req.OldObject.Raw, old); err == nil {
				if equality.Semantic.DeepEqual(old.Spec, class.Spec) {
					return resp // metadata only: a class stored during an outage can still be deleted
				}
				if err := nodeclass.DriverChangeError(&old.Spec, &class.Spec); err != nil {
					return refuse(resp, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("NodeClass %s: %v", class.Name, err))
				}
			}
		}
		err := nodeclass.SpecErrors(&class.Spec)
		if err == nil && len(class.Name) > validation.LabelValueMaxLength {
			err = fmt.Errorf("metadata.name: must be at most %d characters, the value of the %s label on the class's Nodes",
				validation.LabelValueMaxLength, nodesetv1alpha1.LabelNodeClass)
		}
		if err != nil {
			return refuse(resp, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
				fmt.Sprintf("NodeClass %s: %v (%s)", class.Name, err, nodeclass.ReasonInvalidConfiguration))
		}
		resp.Warnings = nodeclass.OverrideWarnings(&class.Spec)
		return resp
	})
}

// removedOptionPrefix is the prefix of the per-NodeSet cluster-autoscaler
// option annotations of earlier releases, which can take no effect.
const removedOptionPrefix = "cluster-autoscaler.nodeset.dev/"

// newAnnotationWithPrefix is an annotation key with prefix that the set has
// and old (nil on create) did not, or "": an annotation already there is
// left alone, so an object stored before can still be updated and deleted.
func newAnnotationWithPrefix(set, old *nodesetv1alpha1.NodeSet, prefix string) string {
	for key := range set.Annotations {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		if old == nil {
			return key
		}
		if _, had := old.Annotations[key]; !had {
			return key
		}
	}
	return ""
}

func refuse(resp *admissionv1.AdmissionResponse, code int32, reason metav1.StatusReason, message string) *admissionv1.AdmissionResponse {
	resp.Allowed = false
	resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message}
	return resp
}

// ServingOptions say where the webhook listens. The API server only calls
// webhooks over TLS, so a certificate is required.
type ServingOptions struct {
	BindAddress       string
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the webhook answer only clients with a
	// certificate it signed: the API server, given one for the webhook in
	// its AdmissionConfiguration. The answers are computed from every
	// namespace's NodeSets, and pods can reach the webhook's Service.
	ClientCAFile string
}

// AddFlags registers the webhook flags.
func (o *ServingOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.BindAddress, "webhook-bind-address", "", "Address (host:port) to serve the NodeSet validating webhook on (HTTPS). Empty disables it.")
	fs.StringVar(&o.CertFile, "webhook-cert-file", "", "TLS certificate of the webhook server.")
	fs.StringVar(&o.KeyFile, "webhook-key-file", "", "TLS private key of the webhook server.")
	fs.StringVar(&o.ClientCAFile, "webhook-client-ca-file", "",
		"CA bundle: when set, only clients with a certificate it signed (the API server, configured to present one) get answers from the webhook. "+
			"Without it anyone who reaches the port may ask about any namespace's NodeSets (docs/tenancy.md).")
}

// Serve runs the webhook until ctx is done. The key pair is read again on
// every handshake, so a rotated certificate is picked up without a restart.
func (o *ServingOptions) Serve(ctx context.Context, admitter Admitter) error {
	if o.CertFile == "" || o.KeyFile == "" {
		return errors.New("--webhook-bind-address needs --webhook-cert-file and --webhook-key-file")
	}
	if _, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile); err != nil {
		return fmt.Errorf("webhook certificate: %w", err)
	}
	if o.ClientCAFile != "" {
		if _, err := o.clientCAs(); err != nil {
			return err
		}
	}
	mux := http.NewServeMux()
	mux.Handle(Path, Handler(admitter))
	mux.Handle(ClassPath, ClassHandler())
	server := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         o.tlsConfig(),
	}
	listener, err := net.Listen("tcp", o.BindAddress)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	klog.FromContext(ctx).Info("Serving the validating webhooks", "address", listener.Addr().String(), "paths", []string{Path, ClassPath},
		"clientCertificates", o.ClientCAFile != "")
	if err := server.ServeTLS(listener, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// tlsConfig reads the key pair, and the client CA when there is one, again
// on every handshake, so rotated files need no restart.
func (o *ServingOptions) tlsConfig() *tls.Config {
	getCertificate := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		pair, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		return &pair, err
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCertificate}
	if o.ClientCAFile == "" {
		return config
	}
	config.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool, err := o.clientCAs()
		if err != nil {
			return nil, err
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCertificate, NextProtos: []string{"h2", "http/1.1"},
			ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}, nil
	}
	return config
}

// clientCAs reads --webhook-client-ca-file.
func (o *ServingOptions) clientCAs() (*x509.CertPool, error) {
	pem, err := os.ReadFile(o.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("reading --webhook-client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--webhook-client-ca-file %s holds no PEM certificate", o.ClientCAFile)
	}
	return pool, nil
}
