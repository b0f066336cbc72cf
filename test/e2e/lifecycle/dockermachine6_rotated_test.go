package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

// TestDockerMachineOrphanGoesWithItsClassCurrentCredentials: a static
// Node's finalizer is removed by hand and the Node deleted, which leaves
// its machine; meanwhile its class's credential is rotated and the one the
// machine was made with revoked (the fake plugin's cloud refuses it).
// Orphan collection removes the machine with its class's credential as the
// Secret has it now: with the one it saved, it could never be removed.
func TestDockerMachineOrphanGoesWithItsClassCurrentCredentials(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	kube, _ := clients(t)
	const name, class, rotated = "dm6-orphan", "dm6-class", "dm6-r0tated-api-token"
	dir := t.TempDir()
	secret := class + "-credentials"
	joinlessDockerMachineClass(t, class, dir)
	_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: class}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "the Node's machine", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.Spec.ProviderID != "", "no providerID yet"
	})
	require.Equal(t, []string{name}, pluginMachines(t, dir))

	// Deleted behind nodeset's back; the credential rotated and the old
	// one revoked meanwhile.
	c.node.Kill(syscall.SIGTERM)
	_, err = kube.CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json",
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
	_, err = kube.CoreV1().Secrets("nodeset-system").Patch(ctx, secret, "application/merge-patch+json",
		[]byte(`{"stringData":{"token":"`+rotated+`"}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, fakeplugin.RevokedFile), []byte(dmCredential+"\n"), 0o600))
	require.NoError(t, c.node.Start())

	eventually(t, 2*time.Minute, "the orphan collected", func(ctx context.Context) (bool, string) {
		machines := pluginMachines(t, dir)
		return len(machines) == 0, fmt.Sprintf("machines %v", machines)
	})
	calls, err := fakeplugin.Calls(dir)
	require.NoError(t, err)
	require.Len(t, calls, 2)
	assert.Equal(t, "remove", calls[1].Op)
	assert.Equal(t, rotated, calls[1].Token, "removed with the class's credential as it is now")
	assert.NotContains(t, c.node.Logs(), rotated, "the credential stays out of the logs")
}
