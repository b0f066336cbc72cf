package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TestChartCertsJobNameFollowsItsTemplate: Argo CD, and whoever pipes helm
// template into kubectl apply, renders the chart as release revision 1 every
// time. The certificate Job's name still changes whenever its pod template
// does (a new image), so applying the new rendering over the old one creates
// a new Job instead of changing the old one's immutable template; and it
// stays the same when nothing of the Job changes, so applying the same
// rendering again, or one that changes other objects only, leaves the Job
// alone. Both renderings are applied in turn to an API server of the test's
// own, as a GitOps tool syncing two commits does.
func TestChartCertsJobNameFollowsItsTemplate(t *testing.T) {
	root := mustRepoRoot(t)
	helm := filepath.Join(chartTools(t, root), "helm")
	chart := filepath.Join(root, "deploy", "charts", "nodeset")

	render := func(t *testing.T, values ...string) (manifest, jobName string) {
		t.Helper()
		args := []string{"template", "nodeset", chart, "--namespace", "nodeset-system"}
		for _, v := range values {
			args = append(args, "--set", v)
		}
		manifest = run(t, helm, args...)
		var jobs []*unstructured.Unstructured
		for _, obj := range decodeRendered(t, manifest).objects {
			if obj.GetKind() == "Job" {
				jobs = append(jobs, obj)
			}
		}
		require.Len(t, jobs, 1, "one certificate Job")
		jobName = jobs[0].GetName()
		assert.True(t, strings.HasPrefix(jobName, "nodeset-certs-"), jobName)
		assert.Empty(t, validation.IsDNS1123Label(jobName), "%s is a DNS-1123 label (63 characters at most), as a Job's name must be", jobName)
		return manifest, jobName
	}

	before, beforeName := render(t, "image.tag=v0.0.1")
	_, again := render(t, "image.tag=v0.0.1")
	assert.Equal(t, beforeName, again, "the same values name the same Job")
	for _, unrelated := range []string{"nodesetController.replicas=3", "certificates.renewSchedule=0 4 * * *", "flowSchema=false"} {
		_, name := render(t, "image.tag=v0.0.1", unrelated)
		assert.Equal(t, beforeName, name, "%s does not change the Job, nor its name", unrelated)
	}
	for _, changed := range []string{"image.pullPolicy=Always", "image.nodesetController=registry.example.com/nodeset-controller",
		"imagePullSecrets[0].name=regcred"} {
		_, name := render(t, "image.tag=v0.0.1", changed)
		assert.NotEqual(t, beforeName, name, "%s changes the Job's pod template, and its name", changed)
	}
	after, afterName := render(t, "image.tag=v0.0.2")
	assert.NotEqual(t, beforeName, afterName, "a new image is a new Job")

	c := newKustomizeCluster(t)
	c.mustSh(t, root, "kubectl create namespace nodeset-system")
	apply := func(t *testing.T, manifest string) (string, error) {
		t.Helper()
		file := filepath.Join(t.TempDir(), "rendered.yaml")
		require.NoError(t, os.WriteFile(file, []byte(manifest), 0o644))
		return c.sh(root, "kubectl apply -f "+file)
	}
	image := func(job string) string {
		return c.mustSh(t, root, "kubectl -n nodeset-system get job/"+job+" -o jsonpath='{.spec.template.spec.containers[0].image}'")
	}

	out, err := apply(t, before)
	require.NoError(t, err, "the first rendering applies:\n%s", out)
	assert.Equal(t, "ghcr.io/nodeset-dev/nodeset-controller:v0.0.1", image(beforeName))
	out, err = apply(t, before)
	require.NoError(t, err, "the same rendering applies again:\n%s", out)
	assert.Contains(t, out, "job.batch/"+beforeName+" unchanged")

	// The Job of the first rendering is still there, as it is for an hour
	// after it finished (no kubelet runs it here).
	out, err = apply(t, after)
	require.NoError(t, err, "the rendering with a new image applies over the one before:\n%s", out)
	assert.NotContains(t, out, "field is immutable")
	assert.Equal(t, "ghcr.io/nodeset-dev/nodeset-controller:v0.0.2", image(afterName), "the new image's Job runs")
	assert.Equal(t, "ghcr.io/nodeset-dev/nodeset-controller:v0.0.1", image(beforeName), "the old Job is left as it was")
}
