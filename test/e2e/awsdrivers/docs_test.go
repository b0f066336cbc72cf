package awsdrivers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/eksasg"
	"nodeset.dev/nodeset/drivers/eksmanaged"
	"nodeset.dev/nodeset/pkg/controller/nodeclass"
	"nodeset.dev/nodeset/pkg/resolve"
	"nodeset.dev/nodeset/test/framework"
)

// docBlock is one fenced block of a Markdown file.
type docBlock struct {
	file, lang, text string
	line             int
}

var fence = regexp.MustCompile("^```([a-z]*)\\s*$")

// docBlocks are the fenced blocks of the Markdown files matching pattern.
func docBlocks(t *testing.T, pattern string) []docBlock {
	t.Helper()
	files, err := filepath.Glob(pattern)
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var out []docBlock
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		var open *docBlock
		scanner := bufio.NewScanner(bytes.NewReader(data))
		for n := 1; scanner.Scan(); n++ {
			line := scanner.Text()
			m := fence.FindStringSubmatch(line)
			switch {
			case open == nil && m != nil:
				open = &docBlock{file: filepath.Base(file), lang: m[1], line: n}
			case open != nil && line == "```":
				out = append(out, *open)
				open = nil
			case open != nil:
				open.text += line + "\n"
			}
		}
		require.Nil(t, open, "%s: a block is not closed", file)
	}
	return out
}

// commands are the command lines of a shell block, continuations joined.
func commands(text string) []string {
	var out []string
	current := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || (line == "" && current == "") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			current += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		current += line
		if current != "" {
			out = append(out, current)
		}
		current = ""
	}
	return out
}

// TestDocManifests keeps docs/drivers/*.md working as written: every YAML
// block is applied to the real API server with server-side dry run (so it
// cannot drift from the schema), every NodeClass passes the node
// controller's own checks (SpecErrors and, for the AWS drivers, the
// driver's Validate) and every NodeSet of a class in the same file resolves
// against it (overrides allowed); every kubectl command runs with
// --dry-run=server, every node-controller command line uses only flags the
// node controller has, and every hack/ script named exists.
func TestDocManifests(t *testing.T) {
	ctx := context.Background()
	cp := framework.Shared(t)
	cfg := cp.AdminConfig()
	require.NoError(t, framework.InstallRBAC(ctx, cp))
	kube := kubernetes.NewForConfigOrDie(cfg)
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	client, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	kubeconfig, err := cp.WriteKubeconfig(framework.AdminName)
	require.NoError(t, err)
	bins, err := framework.BuildCommands(ctx, filepath.Join(cp.Dir, "bin"), "./cmd/node-controller")
	require.NoError(t, err)
	help, _ := exec.Command(bins["node-controller"], "--help").CombinedOutput()
	require.Contains(t, string(help), "--cluster-name")
	validators := map[string]drivers.Driver{
		nodesetv1alpha1.DriverEKSASG:     eksasg.New(eksasg.Options{}),
		nodesetv1alpha1.DriverEKSManaged: eksmanaged.New(eksmanaged.Options{}),
	}
	ensureNamespace := func(name string) {
		_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	ensureNamespace("nodeset-system")

	objects, commandLines := 0, 0
	classes := map[string]map[string]*nodesetv1alpha1.NodeClass{} // file -> name -> class
	for _, block := range docBlocks(t, filepath.Join(root, "docs", "drivers", "*.md")) {
		where := block.file + ":" + strconv.Itoa(block.line)
		switch block.lang {
		case "yaml":
			decoder := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(block.text), 4096)
			for {
				obj := &unstructured.Unstructured{}
				err := decoder.Decode(&obj.Object)
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err, where)
				if len(obj.Object) == 0 {
					continue
				}
				gvk := obj.GroupVersionKind()
				mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				require.NoError(t, err, "%s: %s", where, gvk)
				resource := dynamic.ResourceInterface(client.Resource(mapping.Resource))
				if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
					require.NotEmpty(t, obj.GetNamespace(), "%s: %s %s names no namespace", where, obj.GetKind(), obj.GetName())
					ensureNamespace(obj.GetNamespace())
					resource = client.Resource(mapping.Resource).Namespace(obj.GetNamespace())
				}
				_, err = resource.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if apierrors.IsAlreadyExists(err) {
					err = nil
				}
				require.NoError(t, err, "%s: %s %s is refused by the API server", where, obj.GetKind(), obj.GetName())
				objects++
				switch obj.GetKind() {
				case "NodeClass":
					class := &nodesetv1alpha1.NodeClass{}
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, class), where)
					require.NoError(t, nodeclass.SpecErrors(&class.Spec), "%s: NodeClass %s is refused by the node controller", where, class.Name)
					if d := validators[class.Spec.Driver]; d != nil {
						require.NoError(t, d.Validate(ctx, drivers.Class{Name: class.Name, Spec: class.Spec}), "%s: NodeClass %s is refused by driver %s", where, class.Name, class.Spec.Driver)
					}
					if classes[block.file] == nil {
						classes[block.file] = map[string]*nodesetv1alpha1.NodeClass{}
					}
					classes[block.file][class.Name] = class
				case "NodeSet":
					set := &nodesetv1alpha1.NodeSet{}
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, set), where)
					if class := classes[block.file][set.Spec.NodeClassName]; class != nil {
						_, err := resolve.EffectiveSpec(class, set)
						require.NoError(t, err, "%s: NodeSet %s/%s is refused by its class %s", where, set.Namespace, set.Name, class.Name)
					}
				}
			}
		case "sh":
			for _, line := range commands(block.text) {
				line = strings.TrimSuffix(strings.TrimSpace(line), "&")
				fields := strings.Fields(line)
				commandLines++
				switch fields[0] {
				case "kubectl":
					args := append(fields[1:], "--dry-run=server", "--kubeconfig="+kubeconfig)
					out, err := exec.Command(cp.Kubectl(), args...).CombinedOutput()
					require.NoError(t, err, "%s: %s\n%s", where, line, out)
				case "node-controller":
					for _, f := range fields[1:] {
						name, _, _ := strings.Cut(f, "=")
						require.True(t, strings.HasPrefix(name, "--"), "%s: %q is not a flag", where, f)
						assert.Regexp(t, `(?m)^\s+(-[a-z], )?`+regexp.QuoteMeta(name)+`[ =]`, string(help), "%s: node-controller has no flag %s", where, name)
					}
				default:
					require.True(t, strings.HasPrefix(fields[0], "hack/"), "%s: the test does not know how to check %q", where, line)
					info, err := os.Stat(filepath.Join(root, fields[0]))
					require.NoError(t, err, "%s: %s", where, line)
					assert.NotZero(t, info.Mode()&0o111, "%s: %s is not executable", where, fields[0])
				}
			}
		}
	}
	assert.GreaterOrEqual(t, objects, 8)
	assert.GreaterOrEqual(t, commandLines, 5)
	t.Logf("%d objects and %d command lines of docs/drivers checked", objects, commandLines)
}
