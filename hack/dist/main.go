// Command dist packs the kubectl-nodeset binaries of make dist into the
// archives krew installs (tar.gz, zip for Windows; the binary and LICENSE if
// the repository has one), writes their sha256 sums, and fills the krew
// manifest template (deploy/krew/nodeset.yaml) with the version and sums.
//
//	go run ./hack/dist --bin-dir _output/dist/bin --out-dir _output/dist --version v0.1.0
//
// --bin-dir holds one directory per platform, <os>_<arch>, with
// kubectl-nodeset (kubectl-nodeset.exe on Windows) in it. Archives are
// reproducible: fixed times, owners and modes.
package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
	"time"
)

// archiveTime is the modification time of every file in the archives.
var archiveTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// member is one file of an archive.
type member struct {
	name    string
	mode    int64
	content []byte
}

func main() {
	binDir := flag.String("bin-dir", "_output/dist/bin", "Directory of <os>_<arch> directories with the built plugin.")
	outDir := flag.String("out-dir", "_output/dist", "Where the archives, sha256sums.txt and nodeset.yaml go.")
	version := flag.String("version", "", "Version of the plugin, v<semver>.")
	manifest := flag.String("manifest", "deploy/krew/nodeset.yaml", "The krew manifest template.")
	license := flag.String("license", "LICENSE", "License file put in every archive, if it exists.")
	flag.Parse()
	if err := run(*binDir, *outDir, *version, *manifest, *license); err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
}

func run(binDir, outDir, version, manifestTemplate, licenseFile string) error {
	if !strings.HasPrefix(version, "v") {
		return fmt.Errorf("--version %q does not start with v", version)
	}
	var license []byte
	if content, err := os.ReadFile(licenseFile); err == nil {
		license = content
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	platforms, err := os.ReadDir(binDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	sums := map[string]string{}
	for _, platform := range platforms {
		goos, goarch, ok := strings.Cut(platform.Name(), "_")
		if !platform.IsDir() || !ok {
			continue
		}
		binary := "kubectl-nodeset"
		if goos == "windows" {
			binary += ".exe"
		}
		content, err := os.ReadFile(filepath.Join(binDir, platform.Name(), binary))
		if err != nil {
			return err
		}
		members := []member{{name: binary, mode: 0o755, content: content}}
		if license != nil {
			members = append(members, member{name: "LICENSE", mode: 0o644, content: license})
		}
		name := "kubectl-nodeset_" + goos + "_" + goarch + ".tar.gz"
		pack := tarGz
		if goos == "windows" {
			name = "kubectl-nodeset_" + goos + "_" + goarch + ".zip"
			pack = zipped
		}
		archive, err := pack(members)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(outDir, name), archive, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(archive)
		sums[name] = hex.EncodeToString(sum[:])
	}
	if len(sums) == 0 {
		return fmt.Errorf("no <os>_<arch> directories in %s", binDir)
	}

	var list bytes.Buffer
	names := make([]string, 0, len(sums))
	for name := range sums {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&list, "%s  %s\n", sums[name], name)
	}
	if err := os.WriteFile(filepath.Join(outDir, "sha256sums.txt"), list.Bytes(), 0o644); err != nil {
		return err
	}

	filled, err := fillManifest(manifestTemplate, version, license != nil, sums)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(outDir, filepath.Base(manifestTemplate)), filled, 0o644)
}

// fillManifest executes the manifest template; every archive must be named
// in it, and it may name no other.
func fillManifest(path, version string, license bool, sums map[string]string) ([]byte, error) {
	used := map[string]bool{}
	tmpl, err := template.New(filepath.Base(path)).Option("missingkey=error").Funcs(template.FuncMap{
		"sha256": func(archive string) (string, error) {
			sum, ok := sums[archive]
			if !ok {
				return "", fmt.Errorf("the manifest names %s, which make dist did not build", archive)
			}
			used[archive] = true
			return sum, nil
		},
	}).ParseFiles(path)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, map[string]any{"Version": version, "License": license}); err != nil {
		return nil, err
	}
	for archive := range sums {
		if !used[archive] {
			return nil, fmt.Errorf("%s does not name %s", path, archive)
		}
	}
	return out.Bytes(), nil
}

func tarGz(members []member) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	for _, m := range members {
		header := &tar.Header{Name: m.name, Mode: m.mode, Size: int64(len(m.content)), ModTime: archiveTime,
			Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(header); err != nil {
			return nil, err
		}
		if _, err := tw.Write(m.content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func zipped(members []member) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, m := range members {
		header := &zip.FileHeader{Name: m.name, Method: zip.Deflate, Modified: archiveTime}
		header.SetMode(os.FileMode(m.mode))
		w, err := zw.CreateHeader(header)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(m.content); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
