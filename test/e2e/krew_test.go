package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"

	"nodeset.dev/nodeset/test/framework"
)

// krewPlugin is the part of krew's Plugin manifest (v1alpha2) its validation
// looks at.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string         `json:"version"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description"`
		Caveats          string         `json:"caveats"`
		Homepage         string         `json:"homepage"`
		Platforms        []krewPlatform `json:"platforms"`
	} `json:"spec"`
}

type krewPlatform struct {
	Selector *metav1.LabelSelector `json:"selector"`
	URI      string                `json:"uri"`
	Sha256   string                `json:"sha256"`
	Bin      string                `json:"bin"`
	Files    []struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"files"`
}

var (
	krewSafeName = regexp.MustCompile(`^[\w-]+$`)
	krewSHA256   = regexp.MustCompile(`^[a-f0-9]{64}$`)
	// Names Windows reserves for devices, which krew refuses as plugin names.
	krewWindowsReserved = []string{"CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7",
		"COM8", "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9"}
	// The <os, arch> pairs krew runs on; every platform must select one, and
	// no pair may be selected by two platforms.
	krewPlatforms = [][2]string{{"windows", "386"}, {"windows", "amd64"}, {"windows", "arm64"}, {"linux", "386"},
		{"linux", "amd64"}, {"linux", "arm"}, {"linux", "arm64"}, {"linux", "ppc64le"}, {"linux", "s390x"},
		{"darwin", "amd64"}, {"darwin", "arm64"}}
)

// validateKrewManifest applies krew's rules for a plugin manifest (those of
// krew's index validation and of validate-krew-manifest, which krew-index
// runs) to the manifest file at path, and returns every rule it breaks.
func validateKrewManifest(path string, content []byte) []string {
	var p krewPlugin
	if err := yaml.UnmarshalStrict(content, &p); err != nil {
		return []string{"not a krew manifest: " + err.Error()}
	}
	var broken []string
	add := func(format string, args ...any) { broken = append(broken, fmt.Sprintf(format, args...)) }
	if filepath.Ext(path) != ".yaml" {
		add("the file name ends in %q, not .yaml", filepath.Ext(path))
	}
	name := strings.TrimSuffix(filepath.Base(path), ".yaml")
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" {
		add("apiVersion %q is not krew.googlecontainertools.github.com/v1alpha2", p.APIVersion)
	}
	if p.Kind != "Plugin" {
		add("kind %q is not Plugin", p.Kind)
	}
	if !krewSafeName.MatchString(name) {
		add("plugin name %q does not match %s", name, krewSafeName)
	}
	for _, reserved := range krewWindowsReserved {
		if strings.EqualFold(reserved, name) {
			add("plugin name %q is reserved on Windows", name)
		}
	}
	if p.Metadata.Name != name {
		add("metadata.name %q is not the file's name %q", p.Metadata.Name, name)
	}
	if p.Spec.ShortDescription == "" {
		add("spec.shortDescription is empty")
	}
	for field, limit := range map[string]int{"shortDescription": 70, "description": 80, "caveats": 80} {
		text := map[string]string{"shortDescription": p.Spec.ShortDescription, "description": p.Spec.Description,
			"caveats": p.Spec.Caveats}[field]
		for _, line := range strings.Split(text, "\n") {
			if len(line) > limit && strings.Contains(strings.TrimSpace(line), " ") {
				add("a line of spec.%s is longer than %d characters: %q", field, limit, line)
			}
		}
	}
	if p.Spec.Version == "" {
		add("spec.version is empty")
	} else if !strings.HasPrefix(p.Spec.Version, "v") {
		add("spec.version %q does not start with v", p.Spec.Version)
	} else if _, err := version.ParseSemantic(p.Spec.Version); err != nil {
		add("spec.version %q is not semantic: %v", p.Spec.Version, err)
	}
	if len(p.Spec.Platforms) == 0 {
		add("spec.platforms is empty")
	}
	for i, pl := range p.Spec.Platforms {
		for _, problem := range validateKrewPlatform(pl) {
			add("spec.platforms[%d]: %s", i, problem)
		}
	}
	for _, osArch := range krewPlatforms {
		var matching []int
		for i, pl := range p.Spec.Platforms {
			if krewSelects(pl.Selector, osArch) {
				matching = append(matching, i)
			}
		}
		if len(matching) > 1 {
			add("spec.platforms %v all select %s/%s", matching, osArch[0], osArch[1])
		}
	}
	return broken
}

func validateKrewPlatform(pl krewPlatform) []string {
	var broken []string
	if pl.URI == "" {
		broken = append(broken, "uri is empty")
	}
	if !krewSHA256.MatchString(pl.Sha256) {
		broken = append(broken, fmt.Sprintf("sha256 %q does not match %s", pl.Sha256, krewSHA256))
	}
	if pl.Bin == "" {
		broken = append(broken, "bin is empty")
	}
	if len(pl.Files) == 0 {
		broken = append(broken, "files is empty")
	}
	for _, f := range pl.Files {
		if f.From == "" || f.To == "" {
			broken = append(broken, fmt.Sprintf("files entry %+v needs from and to", f))
		}
		if filepath.Clean(f.To) != f.To {
			broken = append(broken, fmt.Sprintf("files[].to %q is not a clean path", f.To))
		}
	}
	switch sel := pl.Selector; {
	case sel == nil:
		broken = append(broken, "selector is missing")
	case sel.MatchLabels == nil && len(sel.MatchExpressions) == 0:
		broken = append(broken, "selector is empty")
	case sel.MatchLabels != nil && len(sel.MatchLabels) == 0:
		broken = append(broken, "selector.matchLabels is given but empty")
	case sel.MatchExpressions != nil && len(sel.MatchExpressions) == 0:
		broken = append(broken, "selector.matchExpressions is given but empty")
	default:
		for key := range sel.MatchLabels {
			if key != "os" && key != "arch" {
				broken = append(broken, fmt.Sprintf("selector key %q is neither os nor arch", key))
			}
		}
		for _, e := range sel.MatchExpressions {
			if e.Key != "os" && e.Key != "arch" {
				broken = append(broken, fmt.Sprintf("selector key %q is neither os nor arch", e.Key))
			}
		}
		selects := false
		for _, osArch := range krewPlatforms {
			selects = selects || krewSelects(sel, osArch)
		}
		if !selects {
			broken = append(broken, fmt.Sprintf("selector %v selects no platform krew runs on", sel))
		}
	}
	return broken
}

func krewSelects(sel *metav1.LabelSelector, osArch [2]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set{"os": osArch[0], "arch": osArch[1]})
}

// TestKrewManifestRules checks that validateKrewManifest refuses what krew refuses.
func TestKrewManifestRules(t *testing.T) {
	const sum = "4d638eea828b73f15cba14a81e51945f29ce18200f29568cb57f597108297974"
	valid := func() string {
		return `apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata: {name: nodeset}
spec:
  version: v0.1.0
  shortDescription: Create, scale and inspect NodeSets
  platforms:
  - selector: {matchLabels: {os: linux, arch: amd64}}
    uri: https://example.com/a.tar.gz
    sha256: ` + sum + `
    bin: kubectl-nodeset
    files: [{from: kubectl-nodeset, to: .}]
`
	}
	tests := []struct {
		name, file, replace, with, want string
	}{
		{name: "valid", file: "nodeset.yaml"},
		{name: "file name", file: "other.yaml", want: `metadata.name "nodeset" is not the file's name "other"`},
		{name: "extension", file: "nodeset.yml", want: "not .yaml"},
		{name: "api version", file: "nodeset.yaml", replace: "v1alpha2", with: "v1alpha1", want: "apiVersion"},
		{name: "version without v", file: "nodeset.yaml", replace: "version: v0.1.0", with: "version: 0.1.0", want: "does not start with v"},
		{name: "version not semver", file: "nodeset.yaml", replace: "version: v0.1.0", with: "version: v0.1", want: "not semantic"},
		{name: "short sha256", file: "nodeset.yaml", replace: sum, with: sum[:40], want: "sha256"},
		{name: "upper-case sha256", file: "nodeset.yaml", replace: sum, with: strings.ToUpper(sum), want: "sha256"},
		{name: "no bin", file: "nodeset.yaml", replace: "bin: kubectl-nodeset", with: "bin: ''", want: "bin is empty"},
		{name: "no files", file: "nodeset.yaml", replace: "files: [{from: kubectl-nodeset, to: .}]", with: "files: []", want: "files is empty"},
		{name: "unclean to", file: "nodeset.yaml", replace: "to: .}", with: "to: ./bin/}", want: "not a clean path"},
		{name: "selector key", file: "nodeset.yaml", replace: "os: linux,", with: "os: linux, distro: debian,", want: `"distro"`},
		{name: "selects nothing", file: "nodeset.yaml", replace: "os: linux", with: "os: plan9", want: "selects no platform"},
		{name: "overlap", file: "nodeset.yaml", replace: "{matchLabels: {os: linux, arch: amd64}}", with: "{matchLabels: {os: linux}}",
			want: "all select"},
		{name: "unknown field", file: "nodeset.yaml", replace: "bin:", with: "binary: x\n    bin:", want: "not a krew manifest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			manifest := valid()
			if tc.replace != "" {
				manifest = strings.Replace(manifest, tc.replace, tc.with, 1)
			}
			if tc.name == "overlap" {
				manifest += strings.Replace(strings.SplitAfter(valid(), "platforms:\n")[1], "a.tar.gz", "b.tar.gz", 1)
			}
			broken := validateKrewManifest(tc.file, []byte(manifest))
			if tc.want == "" {
				assert.Empty(t, broken)
				return
			}
			assert.Contains(t, strings.Join(broken, "\n"), tc.want)
		})
	}
}

// TestKrewManifestFromDist packs stand-in binaries for every platform with the
// packer of make dist (hack/dist), checks the filled manifest against krew's
// rules, and installs each platform as krew would: the archive at the URI's
// name has the manifest's sha256, and its files operations leave bin, the
// binary of that platform, in the plugin's directory.
func TestKrewManifestFromDist(t *testing.T) {
	framework.SkipIfShort(t, "go run ./hack/dist")
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	binDir, outDir := t.TempDir(), t.TempDir()
	platforms := []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"}
	for _, p := range platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		bin := "kubectl-nodeset"
		if goos == "windows" {
			bin += ".exe"
		}
		dir := filepath.Join(binDir, goos+"_"+goarch)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, bin), []byte("kubectl-nodeset for "+p), 0o755))
	}
	license := filepath.Join(t.TempDir(), "LICENSE")
	require.NoError(t, os.WriteFile(license, []byte("a license"), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/dist", "--bin-dir", binDir, "--out-dir", outDir,
		"--version", "v0.1.0", "--manifest", "deploy/krew/nodeset.yaml", "--license", license)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	manifestFile := filepath.Join(outDir, "nodeset.yaml")
	content, err := os.ReadFile(manifestFile)
	require.NoError(t, err)
	assert.Empty(t, validateKrewManifest(manifestFile, content))
	var p krewPlugin
	require.NoError(t, yaml.Unmarshal(content, &p))
	assert.Equal(t, "v0.1.0", p.Spec.Version)

	sums, err := os.ReadFile(filepath.Join(outDir, "sha256sums.txt"))
	require.NoError(t, err)
	var selected []string
	for _, pl := range p.Spec.Platforms {
		osArch := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		selected = append(selected, osArch)
		t.Run(osArch, func(t *testing.T) {
			archive := path.Base(pl.URI)
			assert.Contains(t, pl.URI, "/v0.1.0/", "the release's download URL")
			data, err := os.ReadFile(filepath.Join(outDir, archive))
			require.NoError(t, err, "the archive the URI names")
			sum := sha256.Sum256(data)
			assert.Equal(t, hex.EncodeToString(sum[:]), pl.Sha256)
			assert.Contains(t, string(sums), pl.Sha256+"  "+archive)

			files := unpack(t, archive, data)
			installed := map[string][]byte{}
			for _, op := range pl.Files {
				matched := false
				for name, content := range files {
					if ok, _ := path.Match(op.From, name); ok {
						installed[path.Join(op.To, path.Base(name))] = content
						matched = true
					}
				}
				assert.True(t, matched, "files[].from %q matches a file of the archive", op.From)
			}
			assert.Equal(t, "kubectl-nodeset for "+osArch, string(installed[pl.Bin]), "bin is this platform's binary")
			assert.Equal(t, "a license", string(files["LICENSE"]), "the archive has the license")
			if pl.Selector.MatchLabels["os"] == "windows" {
				assert.True(t, strings.HasSuffix(pl.Bin, ".exe"), "Windows runs only .exe files")
			}
		})
	}
	sort.Strings(selected)
	sort.Strings(platforms)
	assert.Equal(t, platforms, selected, "one platform entry per archive make dist builds")
}

// unpack returns the regular files of a .tar.gz or .zip archive by name.
func unpack(t *testing.T, name string, data []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	if strings.HasSuffix(name, ".zip") {
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		require.NoError(t, err)
		for _, f := range zr.File {
			rc, err := f.Open()
			require.NoError(t, err)
			content, err := io.ReadAll(rc)
			require.NoError(t, err)
			require.NoError(t, rc.Close())
			files[f.Name] = content
		}
		return files
	}
	require.True(t, strings.HasSuffix(name, ".tar.gz"), name)
	gz, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	for {
		header, err := tr.Next()
		if err == io.EOF {
			return files
		}
		require.NoError(t, err)
		if header.Typeflag != tar.TypeReg {
			continue
		}
		if strings.HasPrefix(header.Name, "kubectl-nodeset") {
			assert.NotZero(t, header.Mode&0o111, "%s is executable", header.Name)
		}
		content, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[header.Name] = content
	}
}
