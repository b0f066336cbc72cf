// Package image checks the Dockerfile as far as a machine without a Docker
// engine can: its build command, run here, makes static binaries that start
// with no C library (as distroless/static requires), its Go is the one the
// project builds with, and its stages are the images the manifests and the
// Makefile name.
package image

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/test/framework"
)

// dockerfile is the Dockerfile's instructions, continuation lines joined.
func dockerfile(t *testing.T, root string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	var out []string
	current := ""
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if current == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			current += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		out = append(out, current+trimmed)
		current = ""
	}
	return out
}

func TestDockerfileBuildsStaticBinariesForTheManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the three binaries as the Dockerfile does, minutes on two cores: not run with -short")
	}
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	instructions := dockerfile(t, root)

	// The build stage's Go is the toolchain this project is built with.
	from := regexp.MustCompile(`^FROM golang:([0-9.]+)-`).FindStringSubmatch(instructions[0])
	require.NotNil(t, from, "the first stage builds with a golang image: %s", instructions[0])
	assert.Equal(t, "go"+from[1], runtime.Version(), "the Dockerfile's Go and the toolchain the tests run with")

	// Its go build, run here as it runs there.
	var build string
	for _, in := range instructions {
		if strings.HasPrefix(in, "RUN ") && strings.Contains(in, "go build") {
			build = strings.TrimPrefix(in, "RUN ")
		}
	}
	require.NotEmpty(t, build, "a RUN go build instruction")
	out := t.TempDir()
	build = strings.NewReplacer("${TARGETOS}", runtime.GOOS, "${TARGETARCH}", runtime.GOARCH, "/out/", out+"/").Replace(build)
	cmd := exec.Command("bash", "-c", build)
	cmd.Dir = root
	output, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", build, output)

	stages := map[string]string{} // stage -> entrypoint
	for _, in := range instructions {
		if m := regexp.MustCompile(`^FROM (\S+) AS (\S+)$`).FindStringSubmatch(in); m != nil && m[2] != "build" {
			assert.True(t, strings.HasPrefix(m[1], "gcr.io/distroless/static"), "stage %s is distroless/static: %s", m[2], m[1])
			stages[m[2]] = ""
		}
		if m := regexp.MustCompile(`^ENTRYPOINT \["([^"]+)"\]$`).FindStringSubmatch(in); m != nil {
			for stage, entry := range stages {
				if entry == "" {
					stages[stage] = m[1]
				}
			}
		}
	}
	for _, name := range []string{"nodeset-controller", "node-controller"} {
		require.Contains(t, stages, name, "a stage per controller image")
		assert.Equal(t, "/usr/local/bin/"+name, stages[name])
		binary := filepath.Join(out, name)
		f, err := elf.Open(binary)
		require.NoError(t, err, name)
		for _, p := range f.Progs {
			assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s is static: no dynamic loader", name)
		}
		libs, err := f.ImportedLibraries()
		require.NoError(t, err)
		assert.Empty(t, libs, "%s needs no shared library", name)
		f.Close()
		// It starts: --help prints the flags and exits.
		help, _ := exec.Command(binary, "--help").CombinedOutput()
		assert.Contains(t, string(help), "--kubeconfig", "%s --help", name)
	}
	_, err = os.Stat(filepath.Join(out, "kubectl-nodeset"))
	assert.NoError(t, err, "the plugin binary is built too")

	// The Makefile builds those stages, and the manifests run those images.
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	manifests, err := os.ReadFile(filepath.Join(root, "deploy", "controllers", "controllers.yaml"))
	require.NoError(t, err)
	for name := range stages {
		assert.Contains(t, string(makefile), "--target "+name, "make image builds %s", name)
		assert.Contains(t, string(manifests), "image: "+name, "deploy/ runs %s", name)
	}
}
