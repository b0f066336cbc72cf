package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// helmLabels are the labels the chart adds to every object and the base has
// on none.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// drift renders each overlay of deploy/overlays and the chart with the
// equivalent values file of hack/chart/overlays, and fails when the two sets
// of objects differ in anything but what Helm adds.
func drift(paths layout) error {
	overlays, err := os.ReadDir(filepath.Join(paths.deploy, "overlays"))
	if err != nil {
		return err
	}
	var failures []string
	for _, overlay := range overlays {
		valuesFile := filepath.Join(paths.pairs, overlay.Name()+".yaml")
		if _, err := os.Stat(valuesFile); err != nil {
			failures = append(failures, fmt.Sprintf("overlay %s has no equivalent values file %s", overlay.Name(), valuesFile))
			continue
		}
		base, err := renderKustomize(filepath.Join(paths.deploy, "overlays", overlay.Name()))
		if err != nil {
			return fmt.Errorf("overlay %s: %w", overlay.Name(), err)
		}
		chart, err := renderChart(paths.chart, valuesFile)
		if err != nil {
			return fmt.Errorf("chart with %s: %w", valuesFile, err)
		}
		for _, d := range compareObjects(base, chart) {
			failures = append(failures, fmt.Sprintf("overlay %s vs chart with %s: %s", overlay.Name(), filepath.Base(valuesFile), d))
		}
	}
	if len(failures) > 0 {
		return fmt.Errorf("the chart and the kustomize manifests differ:\n  %s", strings.Join(failures, "\n  "))
	}
	fmt.Printf("nodeset-chart drift: the chart renders the same objects as deploy/overlays/{%s}\n", names(overlays))
	return nil
}

func names(entries []os.DirEntry) string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return strings.Join(out, ",")
}

// renderKustomize builds a kustomization as kubectl kustomize does.
func renderKustomize(dir string) ([]map[string]any, error) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	out, err := resources.AsYaml()
	if err != nil {
		return nil, err
	}
	return decodeObjects(out)
}

// renderChart renders the chart, CRDs included, as helm template does for
// release nodeset in namespace nodeset-system.
func renderChart(chartDir, valuesFile string) ([]map[string]any, error) {
	chart, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	values, err := chartutil.ReadValuesFile(valuesFile)
	if err != nil {
		return nil, err
	}
	install := action.NewInstall(&action.Configuration{})
	install.DryRun = true
	install.ClientOnly = true
	install.IncludeCRDs = true
	install.ReleaseName = "nodeset"
	install.Namespace = "nodeset-system"
	release, err := install.Run(chart, values)
	if err != nil {
		return nil, err
	}
	return decodeObjects([]byte(release.Manifest))
}

func decodeObjects(manifest []byte) ([]map[string]any, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var objects []map[string]any
	for {
		var obj map[string]any
		if err := decoder.Decode(&obj); errors.Is(err, io.EOF) {
			return objects, nil
		} else if err != nil {
			return nil, err
		}
		if obj != nil {
			objects = append(objects, obj)
		}
	}
}

// compareObjects reports the objects only one side has and, for the others,
// every field that differs, after normalize.
func compareObjects(base, chart []map[string]any) []string {
	want, have := map[string]map[string]any{}, map[string]map[string]any{}
	for _, obj := range base {
		// The chart leaves the namespace to helm install --create-namespace.
		if obj["kind"] == "Namespace" {
			continue
		}
		want[objectKey(obj)] = obj
	}
	for _, obj := range chart {
		normalize(obj)
		have[objectKey(obj)] = obj
	}
	var diffs []string
	for key, obj := range want {
		other, ok := have[key]
		if !ok {
			diffs = append(diffs, key+": only in the kustomize manifests")
			continue
		}
		diffValues(key, obj, other, &diffs)
	}
	for key := range have {
		if _, ok := want[key]; !ok {
			diffs = append(diffs, key+": only in the chart")
		}
	}
	sort.Strings(diffs)
	return diffs
}

func objectKey(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	key := fmt.Sprintf("%v %v", obj["kind"], meta["name"])
	if ns, ok := meta["namespace"]; ok {
		key = fmt.Sprintf("%v %v/%v", obj["kind"], ns, meta["name"])
	}
	return key
}

// certsJobName is the name of the chart's nodeset-certs Job, which ends in a
// hash of the Job's spec and the release revision (nodeset.certsJobName in
// the chart's _helpers.tpl).
var certsJobName = regexp.MustCompile(`^(nodeset-certs)-[0-9a-f]{10}$`)

// normalize takes away what Helm adds to an object of the chart: its labels,
// its helm.sh/ annotations, and the hash the certificate Job's name ends in.
func normalize(obj map[string]any) {
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		return
	}
	if labels, ok := meta["labels"].(map[string]any); ok {
		for _, l := range helmLabels {
			delete(labels, l)
		}
		if len(labels) == 0 {
			delete(meta, "labels")
		}
	}
	if annotations, ok := meta["annotations"].(map[string]any); ok {
		for k := range annotations {
			if strings.HasPrefix(k, "helm.sh/") {
				delete(annotations, k)
			}
		}
		if len(annotations) == 0 {
			delete(meta, "annotations")
		}
	}
	if obj["kind"] == "Job" {
		meta["name"] = certsJobName.ReplaceAllString(meta["name"].(string), "$1")
	}
}

// diffValues appends "path: want ... have ..." for each field of want and
// have that differs.
func diffValues(path string, want, have any, diffs *[]string) {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range h {
			keys[k] = true
		}
		for k := range keys {
			wv, wok := w[k]
			hv, hok := h[k]
			switch {
			case !hok:
				*diffs = append(*diffs, fmt.Sprintf("%s.%s: only in the kustomize manifests: %v", path, k, wv))
			case !wok:
				*diffs = append(*diffs, fmt.Sprintf("%s.%s: only in the chart: %v", path, k, hv))
			default:
				diffValues(path+"."+k, wv, hv, diffs)
			}
		}
		return
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			break
		}
		for i := range w {
			diffValues(fmt.Sprintf("%s[%d]", path, i), w[i], h[i], diffs)
		}
		return
	}
	if ws, ok := want.(string); ok {
		want = collapseBlankLines(ws)
	}
	if hs, ok := have.(string); ok {
		have = collapseBlankLines(hs)
	}
	if !reflect.DeepEqual(want, have) {
		*diffs = append(*diffs, fmt.Sprintf("%s: kustomize %v, chart %v", path, want, have))
	}
}

// collapseBlankLines drops empty lines: kustomize writes a folded (>-) scalar
// with more-indented lines (the CEL of the admission policy) back with a
// blank line before each, which the chart's copy does not have.
func collapseBlankLines(s string) string {
	for strings.Contains(s, "\n\n") {
		s = strings.ReplaceAll(s, "\n\n", "\n")
	}
	return s
}
