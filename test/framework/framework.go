package framework

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// shared is the control plane of the running test binary, set by Run.
var shared *ControlPlane

// Shared is the control plane Run started for the test binary. Under -short
// Run starts none and Shared skips the calling test: every test that talks
// to the API server reaches it through here.
func Shared(t testing.TB) *ControlPlane {
	t.Helper()
	SkipIfShort(t, "a control plane (etcd, kube-apiserver)")
	if shared == nil {
		t.Fatal("framework: no control plane: the package's TestMain calls framework.Run")
	}
	return shared
}

// SkipIfShort skips the test under -short, saying what it needs.
func SkipIfShort(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: not run with -short", needs)
	}
}

// TestUsers are the identities every test control plane authenticates, besides the admin.
var TestUsers = []string{"nodeset-controller", "node-controller", KubeletsName, "tenant-a", "tenant-b"}

// KubeletsName is the user the node controller's simulated kubelets run as.
// It is in the system:nodes group, as real kubelets are, so that the API
// server's priority and fairness puts their Node and Lease writes in the
// node-high priority level (the system-node-high FlowSchema), apart from
// the controllers'.
const KubeletsName = "nodeset-simulated-kubelets"

// Run is a TestMain body: it starts one control plane for the test binary,
// installs the CRDs from deploy/crds, runs the tests and tears it all down.
// The control plane's directory (etcd, audit log, logs) is kept when a test
// fails, or always with NODESET_KEEP=1. Under -short it builds and starts
// nothing and runs the tests, which skip when they ask for Shared.
//
//	func TestMain(m *testing.M) { os.Exit(framework.Run(m, framework.Options{})) }
func Run(m *testing.M, opts Options) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = KubeBinaries(ctx, root); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "nodeset-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts.Dir = dir
	if opts.Users == nil {
		opts.Users = TestUsers
	}
	start := time.Now()
	cp, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		dumpLogs(dir)
		return 1
	}
	if err := InstallCRDs(ctx, cp.AdminConfig(), filepath.Join(root, "deploy", "crds")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		cp.Stop()
		dumpLogs(dir)
		return 1
	}
	fmt.Fprintf(os.Stderr, "framework: control plane at %s ready in %s\n", cp.Host, time.Since(start).Round(time.Millisecond))
	shared = cp
	code := m.Run()
	cp.Stop()
	if code == 0 && os.Getenv("NODESET_KEEP") == "" {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "framework: control-plane state and logs kept in %s\n", dir)
	}
	return code
}

// RepoRoot finds the repository root: the directory of the go.mod of module
// nodeset.dev/nodeset, from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(raw, []byte("module nodeset.dev/nodeset\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("framework: no nodeset.dev/nodeset go.mod above the working directory")
		}
		dir = parent
	}
}

// KubeBinaries builds (or finds in the cache) the pinned control-plane
// binaries with hack/kube-binaries.sh and returns their directory.
func KubeBinaries(ctx context.Context, root string) (string, error) {
	if dir := os.Getenv("NODESET_KUBE_BIN"); dir != "" {
		return dir, nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "kube-binaries.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("framework: hack/kube-binaries.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates or updates every CRD in dir and waits until each is Established.
func InstallCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("framework: no CRDs in %s", dir)
	}
	var names []string
	published := map[string][]string{} // OpenAPI v3 path -> kinds it must describe
	for _, file := range files {
		objs, err := ReadObjects(file)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			names = append(names, obj.GetName())
			group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "kind")
			versions, _, _ := unstructured.NestedSlice(obj.Object, "spec", "versions")
			for _, v := range versions {
				if name, ok := v.(map[string]any)["name"].(string); ok {
					path := "/openapi/v3/apis/" + group + "/" + name
					published[path] = append(published[path], kind)
				}
			}
			existing, err := client.Resource(crdGVR).Get(ctx, obj.GetName(), metav1.GetOptions{})
			if err == nil {
				obj.SetResourceVersion(existing.GetResourceVersion())
				_, err = client.Resource(crdGVR).Update(ctx, obj, metav1.UpdateOptions{})
			} else {
				_, err = client.Resource(crdGVR).Create(ctx, obj, metav1.CreateOptions{})
			}
			if err != nil {
				return fmt.Errorf("framework: installing CRD %s: %w", obj.GetName(), err)
			}
		}
	}
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			crd, err := client.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conditions {
				cond, _ := c.(map[string]any)
				if cond["type"] == "Established" && cond["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("framework: CRD %s not Established: %w", name, err)
		}
	}
	// kubectl explain and client-side validation read OpenAPI v3, which the
	// API server publishes a moment after the CRDs are Established.
	rc, err := rest.RESTClientFor(restConfigForRaw(cfg))
	if err != nil {
		return err
	}
	for path, kinds := range published {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			body, err := rc.Get().AbsPath(path).DoRaw(ctx)
			if err != nil {
				return false, nil
			}
			for _, kind := range kinds {
				if !bytes.Contains(body, []byte("."+kind+`"`)) {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("framework: OpenAPI %s does not describe %v: %w", path, kinds, err)
		}
	}
	return nil
}

// restConfigForRaw is cfg set up for raw GETs of non-resource paths.
func restConfigForRaw(cfg *rest.Config) *rest.Config {
	raw := rest.CopyConfig(cfg)
	raw.GroupVersion = &schema.GroupVersion{}
	raw.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(scheme.Scheme, scheme.Codecs).WithoutConversion()
	return raw
}

// ReadObjects decodes every YAML document in file into an unstructured object.
func ReadObjects(file string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var objs []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(obj.Object) == 0 || obj.GetKind() == "Kustomization" {
			continue // kustomize's own file, not an object
		}
		objs = append(objs, obj)
	}
}

func dumpLogs(dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, log := range logs {
		raw, _ := os.ReadFile(log)
		if len(raw) > 3000 {
			raw = raw[len(raw)-3000:]
		}
		fmt.Fprintf(os.Stderr, "==== %s (tail)\n%s\n", log, raw)
	}
}
