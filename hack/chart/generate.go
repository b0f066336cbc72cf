package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// admissionPolicies are the files of deploy/admission, in the order its
// kustomization lists them (its resources), that the chart's
// admissionPolicy value installs.
func admissionPolicies(deploy string) ([]string, error) {
	content, err := os.ReadFile(filepath.Join(deploy, "admission", "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var kustomization struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(content, &kustomization); err != nil {
		return nil, fmt.Errorf("deploy/admission/kustomization.yaml: %w", err)
	}
	if len(kustomization.Resources) == 0 {
		return nil, errors.New("deploy/admission/kustomization.yaml lists no resources")
	}
	return kustomization.Resources, nil
}

// generate writes (or, with check, compares) every file of the chart that is
// derived from another: the CRDs, the admission policies, Chart.yaml's version
// and appVersion, and README.md's values table.
func generate(paths layout, version string, check bool) error {
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(version) {
		return fmt.Errorf("--version %q is not v<semver>", version)
	}
	want := map[string][]byte{}

	crds, err := filepath.Glob(filepath.Join(paths.deploy, "crds", "*_*.yaml"))
	if err != nil {
		return err
	}
	if len(crds) == 0 {
		return errors.New("no CRDs in deploy/crds")
	}
	for _, crd := range crds {
		content, err := os.ReadFile(crd)
		if err != nil {
			return err
		}
		want[filepath.Join(paths.chart, "crds", filepath.Base(crd))] = content
	}

	// The admission policies, in the order deploy/admission lists them.
	files, err := admissionPolicies(paths.deploy)
	if err != nil {
		return err
	}
	var policies []string
	for _, name := range files {
		policy, err := os.ReadFile(filepath.Join(paths.deploy, "admission", name))
		if err != nil {
			return err
		}
		if bytes.Contains(policy, []byte("{{")) {
			return fmt.Errorf("deploy/admission/%s has {{, which Helm would read as a template action", name)
		}
		policies = append(policies, string(policy))
	}
	want[filepath.Join(paths.chart, "templates", "admission.yaml")] = []byte(
		"{{- /* Generated from deploy/admission/{" + strings.Join(files, ",") + "} by hack/update-chart.sh. */}}\n" +
			"{{- if .Values.admissionPolicy }}\n" + strings.Join(policies, "---\n") + "{{- end }}\n")

	chartFile := filepath.Join(paths.chart, "Chart.yaml")
	chart, err := os.ReadFile(chartFile)
	if err != nil {
		return err
	}
	chart = regexp.MustCompile(`(?m)^version: .*$`).ReplaceAll(chart, []byte("version: "+strings.TrimPrefix(version, "v")))
	chart = regexp.MustCompile(`(?m)^appVersion: .*$`).ReplaceAll(chart, []byte("appVersion: "+version))
	want[chartFile] = chart

	values, err := os.ReadFile(filepath.Join(paths.chart, "values.yaml"))
	if err != nil {
		return err
	}
	table, err := valuesTable(values)
	if err != nil {
		return fmt.Errorf("values.yaml: %w", err)
	}
	readmeFile := filepath.Join(paths.chart, "README.md")
	readme, err := os.ReadFile(readmeFile)
	if err != nil {
		return err
	}
	if want[readmeFile], err = replaceBetween(readme, "<!-- values-table:begin -->\n", "<!-- values-table:end -->", table); err != nil {
		return fmt.Errorf("README.md: %w", err)
	}

	// Files in crds/ that deploy/crds no longer has.
	present, err := filepath.Glob(filepath.Join(paths.chart, "crds", "*.yaml"))
	if err != nil {
		return err
	}
	var stale []string
	for _, f := range present {
		if _, ok := want[f]; !ok {
			stale = append(stale, f)
		}
	}

	var outdated []string
	for file, content := range want {
		have, err := os.ReadFile(file)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if bytes.Equal(have, content) {
			continue
		}
		if check {
			outdated = append(outdated, file)
			continue
		}
		if err := os.WriteFile(file, content, 0o644); err != nil {
			return err
		}
	}
	for _, f := range stale {
		if check {
			outdated = append(outdated, f+" (deleted from deploy/crds)")
			continue
		}
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	if len(outdated) > 0 {
		return fmt.Errorf("stale, run hack/update-chart.sh: %s", strings.Join(outdated, ", "))
	}
	return nil
}

// replaceBetween replaces what is between the begin and end markers of doc.
func replaceBetween(doc []byte, begin, end, replacement string) ([]byte, error) {
	s := string(doc)
	i := strings.Index(s, begin)
	j := strings.Index(s, end)
	if i < 0 || j < i {
		return nil, fmt.Errorf("no %q ... %q markers", strings.TrimSpace(begin), end)
	}
	return []byte(s[:i+len(begin)] + replacement + s[j:]), nil
}
