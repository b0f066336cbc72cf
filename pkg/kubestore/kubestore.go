// Package kubestore keeps what drivers need in the Kubernetes API, so that
// drivers themselves never talk to it: the docker-machine driver's saved
// machine configurations (Secrets in the node controller's namespace) and the
// per-machine bootstrap tokens new machines join with (Secrets in
// kube-system).
package kubestore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/dockermachine"
)

const (
	// LabelMachineDriver marks the Secrets holding machine records.
	LabelMachineDriver = "nodeset.dev/machine-driver"
	// AnnotationMachine names the machine a record Secret is for.
	AnnotationMachine = "nodeset.dev/machine"
	// AnnotationOwner holds the machine's owner, as JSON.
	AnnotationOwner = "nodeset.dev/owner"

	keyConfig    = "config.json"
	keyPlugin    = "plugin"
	keyCreated   = "created"
	keyProvision = "provisioned"
	keyCreatedAt = "createdAt"
	// keyCredentials holds the credential values the machine was made
	// with, as JSON (a map of key to base64 value).
	keyCredentials = "credentials.json"
)

// MachineRecords keeps docker-machine records as Secrets (a plugin's saved
// configuration can hold the options it was given, credentials included).
type MachineRecords struct {
	Client    kubernetes.Interface
	Namespace string
}

var _ dockermachine.Store = MachineRecords{}

// secretName is machine-<name>, or a hash of it when that is too long.
func secretName(machine string) string {
	name := "machine-" + machine
	if len(name) <= 253 {
		return name
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(machine))
	return name[:230] + "-" + strconv.FormatUint(h.Sum64(), 36)
}

// Get returns the record of a machine.
func (s MachineRecords) Get(ctx context.Context, name string) (dockermachine.Record, error) {
	secret, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, secretName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return dockermachine.Record{}, fmt.Errorf("machine %s: %w", name, drivers.ErrNotFound)
	}
	if err != nil {
		return dockermachine.Record{}, err
	}
	return recordFrom(secret)
}

func recordFrom(secret *corev1.Secret) (dockermachine.Record, error) {
	r := dockermachine.Record{
		Name:    secret.Annotations[AnnotationMachine],
		Plugin:  string(secret.Data[keyPlugin]),
		Config:  secret.Data[keyConfig],
		Created: string(secret.Data[keyCreated]) == "true",
		// Records written before provisioning was tracked were provisioned.
		Provisioned: string(secret.Data[keyProvision]) != "false",
		Version:     secret.ResourceVersion,
	}
	r.CreatedAt, _ = strconv.ParseInt(string(secret.Data[keyCreatedAt]), 10, 64)
	if credentials := secret.Data[keyCredentials]; len(credentials) > 0 {
		if err := json.Unmarshal(credentials, &r.Credentials); err != nil {
			return r, fmt.Errorf("secret %s/%s: %s: %w", secret.Namespace, secret.Name, keyCredentials, err)
		}
	}
	if owner := secret.Annotations[AnnotationOwner]; owner != "" {
		if err := json.Unmarshal([]byte(owner), &r.Owner); err != nil {
			return r, fmt.Errorf("secret %s/%s: owner: %w", secret.Namespace, secret.Name, err)
		}
	}
	return r, nil
}

// Put writes a machine's record over the version it carries: it creates
// a record with no Version (and fails if one exists), and replaces one only
// at its Version (a conflict if it changed, not found if it went).
func (s MachineRecords) Put(ctx context.Context, r *dockermachine.Record) error {
	owner, err := json.Marshal(r.Owner)
	if err != nil {
		return err
	}
	credentials, err := json.Marshal(r.Credentials)
	if err != nil {
		return err
	}
	labels := map[string]string{LabelMachineDriver: "docker-machine"}
	// The owner's labels (as on its Nodes) let people and tests select a
	// NodeSet's records; values that are not valid labels are left out.
	for key, value := range map[string]string{nodesetv1alpha1.LabelNodeSetNamespace: r.Owner.Namespace, nodesetv1alpha1.LabelNodeSet: r.Owner.Name} {
		if value != "" && len(validation.IsValidLabelValue(value)) == 0 {
			labels[key] = value
		}
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            secretName(r.Name),
			Namespace:       s.Namespace,
			Labels:          labels,
			Annotations:     map[string]string{AnnotationMachine: r.Name, AnnotationOwner: string(owner)},
			ResourceVersion: r.Version,
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			keyConfig:    r.Config,
			keyPlugin:    []byte(r.Plugin),
			keyCreated:   []byte(strconv.FormatBool(r.Created)),
			keyProvision: []byte(strconv.FormatBool(r.Provisioned)),
			keyCreatedAt: []byte(strconv.FormatInt(r.CreatedAt, 10)),
		},
	}
	if len(r.Credentials) > 0 {
		secret.Data[keyCredentials] = credentials
	}
	var written *corev1.Secret
	if r.Version == "" {
		written, err = s.Client.CoreV1().Secrets(s.Namespace).Create(ctx, secret, metav1.CreateOptions{})
	} else {
		written, err = s.Client.CoreV1().Secrets(s.Namespace).Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	r.Version = written.ResourceVersion
	return nil
}

// Delete removes a machine's record at the version it carries (any, when
// it carries none); a missing one is not an error, a changed one is.
func (s MachineRecords) Delete(ctx context.Context, r dockermachine.Record) error {
	opts := metav1.DeleteOptions{}
	if r.Version != "" {
		opts.Preconditions = &metav1.Preconditions{ResourceVersion: &r.Version}
	}
	err := s.Client.CoreV1().Secrets(s.Namespace).Delete(ctx, secretName(r.Name), opts)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("machine %s's record: %w", r.Name, err)
	}
	return nil
}

// List returns every record, or an error: never part of them.
func (s MachineRecords) List(ctx context.Context) ([]dockermachine.Record, error) {
	list, err := s.Client.CoreV1().Secrets(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelMachineDriver + "=docker-machine"})
	if err != nil {
		return nil, err
	}
	out := make([]dockermachine.Record, 0, len(list.Items))
	for i := range list.Items {
		r, err := recordFrom(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// BootstrapTokens makes one bootstrap token per machine, a Secret in
// kube-system named after the machine, valid for TTL.
type BootstrapTokens struct {
	Client kubernetes.Interface
	// APIServerURL and CACert are what machines join; from the node
	// controller's own client configuration unless set.
	APIServerURL string
	CACert       []byte
	TTL          time.Duration
	// Groups are extra groups the token authenticates as, besides
	// system:bootstrappers.
	Groups string
}

var _ dockermachine.Joiner = BootstrapTokens{}

// NewBootstrapTokens reads the API server address and CA from config.
func NewBootstrapTokens(client kubernetes.Interface, config *rest.Config, apiServerURL string, ttl time.Duration) (BootstrapTokens, error) {
	ca := config.CAData
	if len(ca) == 0 && config.CAFile != "" {
		data, err := os.ReadFile(config.CAFile)
		if err != nil {
			return BootstrapTokens{}, fmt.Errorf("reading the cluster CA: %w", err)
		}
		ca = data
	}
	if apiServerURL == "" {
		apiServerURL = config.Host
	}
	return BootstrapTokens{Client: client, APIServerURL: apiServerURL, CACert: ca, TTL: ttl,
		Groups: "system:bootstrappers:nodeset"}, nil
}

// tokenID is the 6-character id of a machine's token, derived from its name
// so the token can be deleted without listing Secrets.
func tokenID(machine string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(machine))
	id := strconv.FormatUint(uint64(h.Sum32()), 36)
	for len(id) < 6 {
		id = "0" + id
	}
	return id[len(id)-6:]
}

const tokenAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

func tokenSecret() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	for i := range b {
		b[i] = tokenAlphabet[int(b[i])%len(tokenAlphabet)]
	}
	return string(b), nil
}

// Join makes (or remakes) the machine's token.
func (b BootstrapTokens) Join(ctx context.Context, machine string) (dockermachine.JoinConfig, error) {
	id := tokenID(machine)
	secretPart, err := tokenSecret()
	if err != nil {
		return dockermachine.JoinConfig{}, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem,
			Annotations: map[string]string{AnnotationMachine: machine}},
		Type: corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "nodeset: joins machine " + machine,
			"token-id":                       id,
			"token-secret":                   secretPart,
			"expiration":                     time.Now().Add(b.TTL).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              b.Groups,
		},
	}
	// A token left from an earlier attempt is replaced: its secret part is
	// not readable, by design.
	if err := b.Forget(ctx, machine); err != nil {
		return dockermachine.JoinConfig{}, err
	}
	if _, err := b.Client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return dockermachine.JoinConfig{}, fmt.Errorf("creating bootstrap token %s: %w", id, err)
	}
	return dockermachine.JoinConfig{APIServerURL: b.APIServerURL, CACertBase64: base64.StdEncoding.EncodeToString(b.CACert),
		Token: id + "." + secretPart}, nil
}

// Forget deletes the machine's token.
func (b BootstrapTokens) Forget(ctx context.Context, machine string) error {
	err := b.Client.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, "bootstrap-token-"+tokenID(machine), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
