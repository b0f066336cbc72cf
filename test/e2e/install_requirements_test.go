package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nodeset.dev/nodeset/test/framework"
)

// TestInstallNodeRestrictionCheck: docs/install.md's check of what
// Dedicated tenancy needs of kube-apiserver, run as written, tells an API
// server with the NodeRestriction admission plugin (and the Node
// authorization mode, which every control plane of the tests has) from one
// without it, with the answers the document quotes; and it writes nothing.
func TestInstallNodeRestrictionCheck(t *testing.T) {
	root := mustRepoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	require.NoError(t, err)
	check := shellBlockAfter(t, string(doc), "(a server-side dry run: nothing is written):")
	const refused = "is not allowed to modify labels: node-restriction.kubernetes.io/nodeset-probe"
	const accepted = "labeled (server dry run)"
	text := strings.Join(strings.Fields(string(doc)), " ")
	require.True(t, strings.Contains(text, refused), "docs/install.md quotes the answer with NodeRestriction: %s", refused)
	require.True(t, strings.Contains(text, accepted), "and the one without: %s", accepted)
	shared := framework.Shared(t)

	tests := []struct {
		name    string
		plugins []string
		want    string
	}{
		{name: "NodeRestriction", plugins: []string{"NodeRestriction"}, want: refused},
		{name: "without NodeRestriction", want: accepted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cp, err := framework.Start(ctx, framework.Options{Dir: t.TempDir(), BinDir: shared.BinDir, AdmissionPlugins: tc.plugins})
			require.NoError(t, err)
			t.Cleanup(cp.Stop)
			kube := kubernetes.NewForConfigOrDie(cp.AdminConfig())
			_, err = kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}, metav1.CreateOptions{})
			require.NoError(t, err)

			cmd := exec.CommandContext(ctx, "bash", "-uo", "pipefail", "-c", check)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.KubeconfigPath,
				"PATH="+filepath.Dir(cp.Kubectl())+":"+os.Getenv("PATH"))
			out, _ := cmd.CombinedOutput()
			t.Logf("docs/install.md's check answered: %s", out)
			assert.Contains(t, string(out), tc.want, "docs/install.md's check, verbatim:\n%s", check)

			node, err := kube.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
			require.NoError(t, err)
			assert.NotContains(t, node.Labels, "node-restriction.kubernetes.io/nodeset-probe", "the check writes nothing")
		})
	}
}
