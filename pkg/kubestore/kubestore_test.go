package kubestore

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/dockermachine"
	"nodeset.dev/nodeset/test/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{}))
}

// TestMachineRecords runs against a real API server: what matters is how
// it answers writes over a version.
func TestMachineRecords(t *testing.T) {
	ctx := context.Background()
	client := kubernetes.NewForConfigOrDie(framework.Shared(t).AdminConfig())
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "records"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	store := MachineRecords{Client: client, Namespace: "records"}
	_, err = store.Get(ctx, "web-abcde")
	assert.ErrorIs(t, err, drivers.ErrNotFound)

	record := dockermachine.Record{Name: "web-abcde", Plugin: "fake", Config: []byte(`{"MachineName":"web-abcde"}`),
		Owner: drivers.Owner{Cluster: "c", Namespace: "team-a", Name: "web", UID: "u1"}, CreatedAt: 1700000000,
		Credentials: map[string][]byte{"token": []byte("s3cret\n")}}
	require.NoError(t, store.Put(ctx, &record))
	assert.NotEmpty(t, record.Version, "Put sets the version it wrote")
	before := record
	record.Created = true
	require.NoError(t, store.Put(ctx, &record), "Put replaces the version it carries")
	got, err := store.Get(ctx, "web-abcde")
	require.NoError(t, err)
	assert.Equal(t, record, got)
	secret, err := client.CoreV1().Secrets("records").Get(ctx, "machine-web-abcde", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.SecretTypeOpaque, secret.Type)
	assert.Equal(t, "team-a", secret.Labels[nodesetv1alpha1.LabelNodeSetNamespace])

	// Writes decided on an older version fail and change nothing: a late
	// "not created yet" cannot overwrite "created", nor a late delete take
	// the record of a machine that is there.
	stale := before
	err = store.Put(ctx, &stale)
	assert.True(t, apierrors.IsConflict(err), "a Put over an older version conflicts: %v", err)
	fresh := dockermachine.Record{Name: "web-abcde", Plugin: "fake"}
	err = store.Put(ctx, &fresh)
	assert.True(t, apierrors.IsAlreadyExists(err), "a Put of a new record where one exists fails: %v", err)
	err = store.Delete(ctx, before)
	assert.True(t, apierrors.IsConflict(err), "a Delete at an older version conflicts: %v", err)
	got, err = store.Get(ctx, "web-abcde")
	require.NoError(t, err)
	assert.Equal(t, record, got, "the record is as the last current write left it")

	long := strings.Repeat("a", 250)
	require.NoError(t, store.Put(ctx, &dockermachine.Record{Name: long, Plugin: "fake"}))
	got, err = store.Get(ctx, long)
	require.NoError(t, err, "a name too long for a Secret is hashed")
	assert.Equal(t, long, got.Name)

	list, err := store.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	for _, r := range list {
		assert.NotEmpty(t, r.Version, "List gives versions too")
	}
	require.NoError(t, store.Delete(ctx, record))
	require.NoError(t, store.Delete(ctx, record), "Delete is idempotent")
	err = store.Put(ctx, &record)
	assert.True(t, apierrors.IsNotFound(err), "a Put over a version deleted since does not bring it back: %v", err)
	list, err = store.List(ctx)
	require.NoError(t, err)
	assert.Len(t, list, 1)
}

func TestBootstrapTokens(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	tokens := BootstrapTokens{Client: client, APIServerURL: "https://10.0.0.1:6443", CACert: []byte("CA"), TTL: time.Hour, Groups: "system:bootstrappers:nodeset"}
	first, err := tokens.Join(ctx, "web-abcde")
	require.NoError(t, err)
	assert.Regexp(t, `^[a-z0-9]{6}\.[a-z0-9]{16}$`, first.Token, "the bootstrap token format")
	assert.Equal(t, "https://10.0.0.1:6443", first.APIServerURL)
	assert.Equal(t, "Q0E=", first.CACertBase64)
	id := strings.Split(first.Token, ".")[0]
	secret, err := client.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.SecretTypeBootstrapToken, secret.Type)
	assert.Equal(t, "true", secret.StringData["usage-bootstrap-authentication"])
	expiry, err := time.Parse(time.RFC3339, secret.StringData["expiration"])
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(time.Hour), expiry, time.Minute)

	second, err := tokens.Join(ctx, "web-abcde")
	require.NoError(t, err, "joining again replaces the token")
	assert.NotEqual(t, first.Token, second.Token)
	other, err := tokens.Join(ctx, "web-fghij")
	require.NoError(t, err)
	assert.NotEqual(t, id, strings.Split(other.Token, ".")[0], "machines get their own tokens")

	require.NoError(t, tokens.Forget(ctx, "web-abcde"))
	require.NoError(t, tokens.Forget(ctx, "web-abcde"), "Forget is idempotent")
	list, err := client.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, list.Items, 1)
}
