package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/test/framework"
)

// kustomizeCluster is a control plane of the test's own (the kustomize
// installation brings the CRDs, and its uninstall takes them away) and a
// shell on it, as the user of docs/install.md has one.
type kustomizeCluster struct {
	cp  *framework.ControlPlane
	ctx context.Context
}

func newKustomizeCluster(t *testing.T) *kustomizeCluster {
	t.Helper()
	shared := framework.Shared(t)
	// A bound on the whole test, control plane start included, not a wait:
	// the uninstall test takes about a minute, but on a machine running
	// other control planes beside it, it ran past 5 minutes in kubectl
	// delete, which waits for nodeset-system's deletion.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	cp, err := framework.Start(ctx, framework.Options{Dir: t.TempDir(), BinDir: shared.BinDir})
	require.NoError(t, err)
	t.Cleanup(cp.Stop)
	return &kustomizeCluster{cp: cp, ctx: ctx}
}

// sh runs script with bash -euo pipefail in dir, with kubectl on the PATH.
func (c *kustomizeCluster) sh(dir, script string) (string, error) {
	cmd := exec.CommandContext(c.ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.cp.KubeconfigPath,
		"PATH="+filepath.Dir(c.cp.Kubectl())+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *kustomizeCluster) mustSh(t *testing.T, dir, script string) string {
	t.Helper()
	out, err := c.sh(dir, script)
	require.NoError(t, err, "%s\n%s", script, out)
	return out
}

// projectVersion is the Makefile's VERSION, the image tag of deploy/base.
func projectVersion(t *testing.T, root string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^VERSION \?= (\S+)$`).FindSubmatch(raw)
	require.NotNil(t, m, "the Makefile sets VERSION")
	return string(m[1])
}

// TestKustomizeUpgradeAsDocumented: a kustomize installation of the release
// before (deploy/ with the images of an earlier tag), upgraded to this one as
// docs/install.md says, runs this release's images everywhere, the
// certificate Job's too. The Job of the release before is still there, as it
// is for an hour after it finished: no kubelet runs it here.
func TestKustomizeUpgradeAsDocumented(t *testing.T) {
	root := mustRepoRoot(t)
	version := projectVersion(t, root)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	require.NoError(t, err)
	blocks := shellBlocksOfSection(t, string(doc), "## With kustomize")
	// The section's first block installs; a user upgrading runs what it
	// says last: the upgrade steps, or the install command again when it
	// gives none.
	install, upgrade := blocks[0], blocks[len(blocks)-1]
	c := newKustomizeCluster(t)

	// The release before: the same manifests, images of another tag.
	prev := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(prev, "deploy"), os.DirFS(filepath.Join(root, "deploy"))))
	base := filepath.Join(prev, "deploy", "base", "kustomization.yaml")
	raw, err := os.ReadFile(base)
	require.NoError(t, err)
	require.Contains(t, string(raw), "newTag: "+version)
	require.NoError(t, os.WriteFile(base, []byte(strings.ReplaceAll(string(raw), "newTag: "+version, "newTag: v0.0.0-before")), 0o644))

	c.mustSh(t, prev, install)
	image := func(object string) string {
		return c.mustSh(t, root, `kubectl -n nodeset-system get `+object+` -o jsonpath='{.spec.template.spec.containers[0].image}'`)
	}
	require.Equal(t, "ghcr.io/nodeset-dev/nodeset-controller:v0.0.0-before", image("job/nodeset-certs"))

	out, err := c.sh(root, upgrade)
	require.NoError(t, err, "docs/install.md's kustomize upgrade, verbatim:\n%s\n%s", upgrade, out)
	assert.Equal(t, "ghcr.io/nodeset-dev/nodeset-controller:"+version, image("job/nodeset-certs"),
		"the certificates are checked by this release's nodeset-certs")
	assert.Equal(t, "ghcr.io/nodeset-dev/nodeset-controller:"+version, image("deployment/nodeset-controller"))
	assert.Equal(t, "ghcr.io/nodeset-dev/node-controller:"+version, image("deployment/node-controller"))
}

// TestKustomizeUninstallAsDocumented: docs/install.md's kustomize uninstall,
// run as written once the cluster is empty, succeeds and leaves no CRD and
// no nodeset-system, also after the certificate Job went an hour after it
// finished (as the TTL controller deletes it; no kubelet runs it here).
func TestKustomizeUninstallAsDocumented(t *testing.T) {
	root := mustRepoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	require.NoError(t, err)
	install := shellBlocksOfSection(t, string(doc), "## With kustomize")[0]
	// The uninstall command of the Uninstalling section, in a block or in
	// the text.
	uninstalling := string(doc)[strings.Index(string(doc), "## Uninstalling"):]
	uninstall := regexp.MustCompile("kubectl delete -k deploy/overlays/simulated[^`\n#]*").FindString(uninstalling)
	require.NotEmpty(t, uninstall, "docs/install.md says how to uninstall with kustomize")
	c := newKustomizeCluster(t)

	c.mustSh(t, root, install)
	c.mustSh(t, root, "kubectl -n nodeset-system delete job nodeset-certs")

	out, err := c.sh(root, uninstall)
	require.NoError(t, err, "docs/install.md's kustomize uninstall, verbatim:\n%s\n%s", uninstall, out)
	for _, obj := range []string{"crd/nodesets.nodeset.dev", "crd/nodeclasses.nodeset.dev", "namespace/nodeset-system",
		"validatingwebhookconfiguration/nodeset.dev", "clusterrole/nodeset:nodeset-controller"} {
		out, err := c.sh(root, "kubectl get "+obj)
		require.Error(t, err, "%s is gone once the uninstall returns: %s", obj, out)
		assert.Contains(t, out, "NotFound")
	}
}

// shellBlocksOfSection returns the ```sh blocks of doc's section that starts
// at heading and ends at the next heading of its level.
func shellBlocksOfSection(t *testing.T, doc, heading string) []string {
	t.Helper()
	i := strings.Index(doc, heading+"\n")
	require.GreaterOrEqual(t, i, 0, "the document has the section %q", heading)
	section := doc[i+len(heading):]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var blocks []string
	for _, part := range strings.Split(section, "```sh\n")[1:] {
		end := strings.Index(part, "```")
		require.GreaterOrEqual(t, end, 0)
		blocks = append(blocks, part[:end])
	}
	require.NotEmpty(t, blocks, "the section %q has commands", heading)
	return blocks
}
