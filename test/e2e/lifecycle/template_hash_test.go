package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/resolve"
	"nodeset.dev/nodeset/test/framework"
)

// templateHashGolden holds the template hashes of deploy/examples and
// testdata/template-hash-fixtures.yaml as this version computes them.
const templateHashGolden = "testdata/template-hashes.json"

// templateHashPrefix renames the objects of the examples, which other tests
// of the package also create. Names are not hashed.
const templateHashPrefix = "tmplhash-"

// TestTemplateHashesStable guards upgrades of nodeset itself: every Node
// carries nodeset.dev/template-hash, and a NodeSet's Nodes with another hash
// than the one the new version computes are replaced. The test creates every
// NodeClass and NodeSet of deploy/examples and of
// testdata/template-hash-fixtures.yaml (every driver section, most fields
// set, some schema defaults left to the API server), reads them back as the
// API server serves them (with the CRDs' defaults), and compares each
// NodeSet's template hash, and that of a plain NodeSet of each NodeClass,
// with testdata/template-hashes.json.
//
// A hash changes when the JSON of the effective driver section, parameters,
// node templates or tenancy changes for the same stored objects: a new API
// field without omitempty, a schema default added to a field (the API server
// applies it to objects already stored), a change in resolve.EffectiveSpec or
// resolve.TemplateHash. If the change is meant, regenerate the file with
//
//	NODESET_UPDATE_GOLDEN=1 NODESET_KUBE_BIN=... go test -run TestTemplateHashesStable ./test/e2e/lifecycle/
//
// and say in the release notes that the upgrade replaces the Nodes.
func TestTemplateHashesStable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := framework.Shared(t).AdminConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	_, client := clients(t)
	root, err := framework.RepoRoot()
	require.NoError(t, err)

	files, err := filepath.Glob(filepath.Join(root, "deploy", "examples", "*.yaml"))
	require.NoError(t, err)
	sort.Strings(files)
	files = append(files, filepath.Join("testdata", "template-hash-fixtures.yaml"))

	type storedSet struct{ key, namespace, name string }
	var classes, namespaces []string
	var sets []storedSet
	gvrs := map[string]schema.GroupVersionResource{
		"Namespace": {Version: "v1", Resource: "namespaces"},
		"NodeClass": schema.GroupVersion(nodesetv1alpha1.GroupVersion).WithResource("nodeclasses"),
		"NodeSet":   schema.GroupVersion(nodesetv1alpha1.GroupVersion).WithResource("nodesets"),
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, s := range sets {
			_ = client.NodesetV1alpha1().NodeSets(s.namespace).Delete(ctx, s.name, metav1.DeleteOptions{})
		}
		for _, name := range classes {
			_ = client.NodesetV1alpha1().NodeClasses().Delete(ctx, name, metav1.DeleteOptions{})
		}
		for _, name := range namespaces {
			_ = dyn.Resource(gvrs["Namespace"]).Delete(ctx, name, metav1.DeleteOptions{})
		}
	})
	for _, file := range files {
		objs, err := framework.ReadObjects(file)
		require.NoError(t, err)
		for _, obj := range objs {
			gvr, ok := gvrs[obj.GetKind()]
			if !ok {
				continue
			}
			key := fmt.Sprintf("%s %s %s", filepath.Base(file), obj.GetKind(), obj.GetName())
			if obj.GetNamespace() != "" {
				key = fmt.Sprintf("%s %s %s/%s", filepath.Base(file), obj.GetKind(), obj.GetNamespace(), obj.GetName())
			}
			renameForHashTest(t, obj)
			_, err := dyn.Resource(gvr).Namespace(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{FieldValidation: "Strict"})
			if apierrors.IsAlreadyExists(err) && obj.GetKind() == "Namespace" {
				err = nil
			}
			require.NoError(t, err, key)
			switch obj.GetKind() {
			case "Namespace":
				namespaces = append(namespaces, obj.GetName())
			case "NodeClass":
				classes = append(classes, obj.GetName())
			case "NodeSet":
				sets = append(sets, storedSet{key: key, namespace: obj.GetNamespace(), name: obj.GetName()})
			}
		}
	}

	// Read back as stored and served, and hash.
	got := map[string]string{}
	sections := map[string]bool{}
	stored := map[string]*nodesetv1alpha1.NodeClass{}
	for _, name := range classes {
		class, err := client.NodesetV1alpha1().NodeClasses().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		stored[name] = class
		sections[resolve.SectionName(&class.Spec)] = true
		effective, err := resolve.EffectiveSpec(class, nil)
		require.NoError(t, err, name)
		got["NodeClass "+strings.TrimPrefix(name, templateHashPrefix)+" (plain NodeSet)"] = resolve.TemplateHash(&effective, &nodesetv1alpha1.NodeSet{})
	}
	for _, s := range sets {
		set, err := client.NodesetV1alpha1().NodeSets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
		require.NoError(t, err)
		class := stored[set.Spec.NodeClassName]
		require.NotNil(t, class, "%s: NodeClass %s not among the examples", s.key, set.Spec.NodeClassName)
		effective, err := resolve.EffectiveSpec(class, set)
		require.NoError(t, err, s.key)
		got[s.key] = resolve.TemplateHash(&effective, set)
	}
	for _, section := range []string{"simulated", "dockerMachine", "eksAutoscalingGroup", "eksManagedNodeGroup", "parameters"} {
		require.True(t, sections[section], "no NodeClass with spec.%s: the golden hashes must cover every driver section", section)
	}

	if os.Getenv("NODESET_UPDATE_GOLDEN") == "1" {
		raw, err := json.MarshalIndent(got, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(templateHashGolden, append(raw, '\n'), 0o644))
		t.Logf("wrote %s (%d hashes)", templateHashGolden, len(got))
		return
	}
	raw, err := os.ReadFile(templateHashGolden)
	require.NoError(t, err, "regenerate with NODESET_UPDATE_GOLDEN=1")
	want := map[string]string{}
	require.NoError(t, json.Unmarshal(raw, &want))
	var changed, added, removed []string
	for key, hash := range got {
		switch old, ok := want[key]; {
		case !ok:
			added = append(added, key)
		case old != hash:
			changed = append(changed, fmt.Sprintf("%s: %s, was %s", key, hash, old))
		}
	}
	for key := range want {
		if _, ok := got[key]; !ok {
			removed = append(removed, key)
		}
	}
	sort.Strings(changed)
	sort.Strings(added)
	sort.Strings(removed)
	if len(changed) > 0 {
		t.Errorf("template hashes changed for objects stored unchanged:\n  %s\n"+
			"An upgrade to this version replaces every Node of every RollingUpdate NodeSet of such a class "+
			"(the Nodes' nodeset.dev/template-hash no longer matches). Causes: a new API field without omitempty, "+
			"a schema default added to an existing field, a change in resolve.EffectiveSpec or resolve.TemplateHash. "+
			"Keep the hash stable; if the change is meant, regenerate %s with NODESET_UPDATE_GOLDEN=1 "+
			"and say in the release notes that upgrading replaces the Nodes.",
			strings.Join(changed, "\n  "), templateHashGolden)
	}
	if len(added) > 0 || len(removed) > 0 {
		t.Errorf("examples without a golden hash: %v; golden hashes without an example: %v. "+
			"Regenerate %s with NODESET_UPDATE_GOLDEN=1 (no hash of an object that is still there may change).",
			added, removed, templateHashGolden)
	}
}

// renameForHashTest prefixes the names of namespaces and classes (and the
// references to them), so that the examples do not meet the objects of
// other tests, and sets a NodeSet's replicas to 0 so that no controller
// makes Nodes of it. Neither names nor replicas are hashed.
func renameForHashTest(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	switch obj.GetKind() {
	case "Namespace", "NodeClass":
		obj.SetName(templateHashPrefix + obj.GetName())
		if list, ok, _ := unstructured.NestedStringSlice(obj.Object, "spec", "allowedNamespaces", "namespaces"); ok {
			for i := range list {
				list[i] = templateHashPrefix + list[i]
			}
			require.NoError(t, unstructured.SetNestedStringSlice(obj.Object, list, "spec", "allowedNamespaces", "namespaces"))
		}
	case "NodeSet":
		obj.SetNamespace(templateHashPrefix + obj.GetNamespace())
		class, _, _ := unstructured.NestedString(obj.Object, "spec", "nodeClassName")
		require.NoError(t, unstructured.SetNestedField(obj.Object, templateHashPrefix+class, "spec", "nodeClassName"))
		require.NoError(t, unstructured.SetNestedField(obj.Object, int64(0), "spec", "replicas"))
		if _, ok, _ := unstructured.NestedMap(obj.Object, "spec", "autoscaling"); ok {
			require.NoError(t, unstructured.SetNestedField(obj.Object, int64(0), "spec", "autoscaling", "minReplicas"))
		}
	}
}
