package eksasg

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestCredentialsAsSecretsAreMadeFromFiles: a Secret made with
// `kubectl create secret generic --from-file=aws_access_key_id=...` from
// files that end with a newline (as editors and `echo` write them) holds
// each key with a newline after it. AWS keys never contain white space, so
// it is not part of the key: the class works. A key that is nothing but
// white space is a missing key, refused naming the Secret and the key, and
// never replaced by the node controller's own identity.
func TestCredentialsAsSecretsAreMadeFromFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newWorld(t)
	configs := awscloud.NewAWSConfigs(awscloud.SDKConfig{Endpoint: w.endpoint, MaxAttempts: 2})
	d := New(Options{Cluster: "prod", Clients: awscloud.ClientsFrom(configs), Clusters: NewClusterLookup(configs)})
	withCredentials := func(credentials map[string][]byte) drivers.Class {
		c := w.class()
		c.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "aws-credentials"}
		c.Credentials = credentials
		return c
	}

	fromFiles := withCredentials(map[string][]byte{awscloud.CredentialAccessKeyID: []byte("testing\n"),
		awscloud.CredentialSecretAccessKey: []byte("testing\n"), awscloud.CredentialSessionToken: []byte(" testing-token\r\n")})
	require.NoError(t, d.ValidateCloud(ctx, fromFiles), "a newline after a key is not part of it")
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "files", UID: "uid-files"}
	status, err := d.EnsureGroup(ctx, drivers.Group{Name: GroupName("prod", "team-a", "files"), Owner: owner, Class: fromFiles,
		Replicas: 1, MaxReplicas: 1, TemplateHash: "h"})
	require.NoError(t, err)
	assert.Len(t, status.Machines, 1)

	blank := withCredentials(map[string][]byte{awscloud.CredentialAccessKeyID: []byte(" \n"), awscloud.CredentialSecretAccessKey: []byte("testing")})
	err = d.ValidateCloud(ctx, blank)
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.ErrorContains(t, err, "spec.credentialsSecretRef: Secret nodeset-system/aws-credentials has an empty aws_access_key_id")
	assert.NotContains(t, err.Error(), "testing")
}
