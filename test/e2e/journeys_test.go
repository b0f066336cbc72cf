package e2e

import (
	"bytes"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/kubectlplugin"
	"nodeset.dev/nodeset/pkg/resolve"
	"nodeset.dev/nodeset/test/framework"
)

// TestJourneyPrinterColumnsShowZeros: a NodeSet scaled to zero reads
// 0 0 0 0 0 in kubectl get, as a Deployment's 0/0 does, and kubectl wait on
// its ready count returns. The status is written as the nodeset-controller
// writes it: the generated clientset's UpdateStatus of the Go type.
func TestJourneyPrinterColumnsShowZeros(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "columns")
	ensureClass(t, "columns-class")
	cs := clientset(t)
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "zero", Namespace: ns},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "columns-class", Replicas: ptr.To[int32](0)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	set.Status = nodesetv1alpha1.NodeSetStatus{
		ObservedGeneration: set.Generation,
		Replicas:           0,
		ReadyReplicas:      0,
		AvailableReplicas:  0,
		UpdatedReplicas:    0,
		Selector:           resolve.Selector(set).String(),
	}
	_, err = cs.NodesetV1alpha1().NodeSets(ns).UpdateStatus(ctx, set, metav1.UpdateOptions{})
	require.NoError(t, err)

	out := kubectl(t, "get", "nds", "zero", "-n", ns, "--no-headers")
	assert.Regexp(t, `^zero\s+columns-class\s+0\s+0\s+0\s+0\s+0\s+\S+\n$`, out,
		"CLASS, DESIRED, CURRENT, READY, UP-TO-DATE, AVAILABLE, AGE")
	out = kubectl(t, "get", "nds", "zero", "-n", ns,
		"-o", "jsonpath={.status.readyReplicas},{.status.availableReplicas},{.status.updatedReplicas}")
	assert.Equal(t, "0,0,0", out, "the counts are in the status at zero too")
}

// TestJourneyHelm follows docs/install.md with Helm on a cluster of its own
// (the chart installs the CRDs itself there): install of a release before
// this one, the documented upgrade to this chart and its CRDs, as written
// (the new CRDs and the new chart's defaults in place, the injected
// caBundle kept), an upgrade with changed values, a rollback, an uninstall
// with NodeSets still present, an install over what it left, and the
// documented uninstall, as written.
func TestJourneyHelm(t *testing.T) {
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	shared := framework.Shared(t)
	helm := filepath.Join(chartTools(t, root), "helm")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp, err := framework.Start(ctx, framework.Options{Dir: t.TempDir(), BinDir: shared.BinDir})
	require.NoError(t, err)
	t.Cleanup(cp.Stop)

	sh := func(script string) (string, error) {
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.KubeconfigPath, "HELM_CACHE_HOME="+t.TempDir(),
			"HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir(),
			"PATH="+filepath.Dir(helm)+":"+filepath.Dir(cp.Kubectl())+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mustSh := func(script string) string {
		t.Helper()
		out, err := sh(script)
		require.NoError(t, err, "%s\n%s", script, out)
		return out
	}

	// The release before: this chart, with CRDs that differ from the
	// repository's in one description, as two releases' CRDs do.
	prev := filepath.Join(t.TempDir(), "nodeset")
	require.NoError(t, os.CopyFS(prev, os.DirFS(filepath.Join(root, "deploy", "charts", "nodeset"))))
	crd := filepath.Join(prev, "crds", "nodeset.dev_nodesets.yaml")
	raw, err := os.ReadFile(crd)
	require.NoError(t, err)
	const newText, oldText = "replicas is the number of nodes wanted.", "replicas is how many nodes."
	require.Contains(t, string(raw), newText)
	require.NoError(t, os.WriteFile(crd, []byte(strings.Replace(string(raw), newText, oldText, 1)), 0o644))
	// It had no flowSchema value yet (a release adds values, with defaults).
	require.NoError(t, os.Remove(filepath.Join(prev, "templates", "flowschema.yaml")))
	for file, drop := range map[string]*regexp.Regexp{
		"values.yaml":        regexp.MustCompile(`(?m)^# -- Install the FlowSchemas.*\nflowSchema: true\n`),
		"values.schema.json": regexp.MustCompile(`,\s*"flowSchema": \{\s*"type": "boolean"\s*\}`),
	} {
		raw, err := os.ReadFile(filepath.Join(prev, file))
		require.NoError(t, err)
		require.Regexp(t, drop, string(raw))
		require.NoError(t, os.WriteFile(filepath.Join(prev, file), drop.ReplaceAll(raw, nil), 0o644))
	}

	// The certificate Job, as the release's notes name it: its name is a
	// hash of its spec and the release revision.
	certsJob := func() string {
		t.Helper()
		m := regexp.MustCompile(`job/(nodeset-certs-[0-9a-f]+)`).FindStringSubmatch(mustSh("helm get notes nodeset -n nodeset-system"))
		require.NotNil(t, m, "the notes name the certificate Job")
		mustSh("kubectl -n nodeset-system get job/" + m[1])
		return m[1]
	}

	mustSh("helm install nodeset " + prev + " -n nodeset-system --create-namespace")
	installed := certsJob()
	mustSh("kubectl wait --for=condition=Established crd/nodesets.nodeset.dev crd/nodeclasses.nodeset.dev --timeout=60s")
	replicasDoc := func() string {
		return mustSh(`kubectl get crd nodesets.nodeset.dev -o jsonpath='{.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.replicas.description}'`)
	}
	assert.Contains(t, replicasDoc(), oldText)
	// nodeset-certs puts the CA in the webhooks' caBundle; no pod runs
	// here, so it is put there as it would.
	caBundle := "Y2EtYnVuZGxl"
	mustSh(`kubectl patch validatingwebhookconfiguration nodeset.dev --type=json -p '[` +
		`{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":"` + caBundle + `"},` +
		`{"op":"add","path":"/webhooks/1/clientConfig/caBundle","value":"` + caBundle + `"}]'`)
	// A tenant's NodeSet (the webhook has no endpoint and fails open).
	mustSh(`kubectl create namespace team-a && kubectl create -f deploy/examples/10-nodeclass-simulated.yaml ` +
		`&& kubectl create -f deploy/examples/50-nodeset-web.yaml`)
	caBundles := func() string {
		return mustSh(`kubectl get validatingwebhookconfiguration nodeset.dev -o jsonpath='{.webhooks[*].clientConfig.caBundle}'`)
	}

	// Upgrading, as written.
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	require.NoError(t, err)
	upgrade := shellBlockAfter(t, string(doc), "apply the new ones after an upgrade:")
	out, err := sh(upgrade)
	require.NoError(t, err, "docs/install.md's upgrade, verbatim:\n%s\n%s", upgrade, out)
	assert.Contains(t, replicasDoc(), newText, "the new CRDs are in place")
	upgraded := certsJob()
	assert.NotEqual(t, installed, upgraded, "an upgrade runs the certificate Job again")
	// The new release's defaults apply to what was not set: its FlowSchemas
	// are installed.
	out, err = sh("kubectl get flowschema nodeset-controllers nodeset-leader-election")
	assert.NoError(t, err, "the upgrade installs what the new chart installs by default:\n%s", out)
	assert.Equal(t, caBundle+" "+caBundle, caBundles(), "an upgrade does not clear the injected caBundle")
	notes := mustSh("helm get notes nodeset -n nodeset-system")
	assert.Contains(t, notes, "kubectl apply --server-side --force-conflicts -f", "the notes' CRD step works as the docs' does")

	// Changed values: the docker-machine driver, then back.
	mustSh(`helm upgrade nodeset deploy/charts/nodeset -n nodeset-system --reset-then-reuse-values ` +
		`--set 'drivers.enabled={simulated,docker-machine}' ` +
		`--set drivers.dockerMachine.plugins.image=registry.example.com/docker-machine-plugins:v1`)
	assert.Contains(t, mustSh(`kubectl -n nodeset-system get deployment node-controller -o jsonpath='{.spec.template.spec.containers[0].args}'`),
		"--drivers=simulated,docker-machine")
	mustSh("kubectl -n nodeset-system get pvc/docker-machine-store")
	assert.NotEqual(t, upgraded, certsJob(), "each upgrade runs the certificate Job again")
	assert.Equal(t, caBundle+" "+caBundle, caBundles())
	mustSh("helm rollback nodeset 2 -n nodeset-system")
	args := mustSh(`kubectl -n nodeset-system get deployment node-controller -o jsonpath='{.spec.template.spec.containers[0].args}'`)
	assert.Contains(t, args, "--drivers=simulated")
	assert.NotContains(t, args, "docker-machine")
	mustSh("kubectl -n nodeset-system get pvc/docker-machine-store") // machines' keys are kept
	assert.Equal(t, caBundle+" "+caBundle, caBundles(), "a rollback does not clear the injected caBundle")

	// Uninstalling with NodeSets present leaves the CRDs, the NodeClasses
	// and NodeSets, and the store claim, as the docs say.
	mustSh("helm uninstall nodeset -n nodeset-system")
	for _, obj := range []string{"crd/nodesets.nodeset.dev", "crd/nodeclasses.nodeset.dev", "nodeclass/sim-small",
		"-n team-a nodeset/web", "-n nodeset-system pvc/docker-machine-store"} {
		mustSh("kubectl get " + obj)
	}
	for _, obj := range []string{"-n nodeset-system deployment/nodeset-controller", "validatingwebhookconfiguration/nodeset.dev"} {
		out, err := sh("kubectl get " + obj)
		require.Error(t, err, "%s goes with the release: %s", obj, out)
		assert.Contains(t, out, "NotFound")
	}

	// "Install nodeset again and the controllers finish the job": over the
	// CRDs, NodeSets and store claim the last release left.
	mustSh(`helm install nodeset deploy/charts/nodeset -n nodeset-system --create-namespace ` +
		`--set 'drivers.enabled={simulated,docker-machine}' ` +
		`--set drivers.dockerMachine.plugins.image=registry.example.com/docker-machine-plugins:v1`)
	mustSh("kubectl -n nodeset-system get deployment/nodeset-controller pvc/docker-machine-store")
	certsJob()

	// And the uninstall of docs/install.md, as written (no controller runs
	// here, so the NodeSets hold no finalizer).
	mustSh("kubectl delete nodesets --all -A")
	uninstall := shellBlockAfter(t, string(doc), "Each command waits for the deletions it asks for")
	out, err = sh(uninstall)
	require.NoError(t, err, "docs/install.md's uninstall, verbatim:\n%s\n%s", uninstall, out)
	for _, obj := range []string{"crd/nodesets.nodeset.dev", "namespace/nodeset-system", "validatingwebhookconfiguration/nodeset.dev"} {
		out, err := sh("kubectl get " + obj)
		require.Error(t, err, "%s is gone: %s", obj, out)
		assert.Contains(t, out, "NotFound")
	}
}

// TestJourneyPluginSetTakesTheFieldsType: kubectl nodeset create --set
// writes a value as its field's type: a string field gets the text as
// typed, even when it reads as a number or a boolean (a Kubernetes version
// of an EKS managed node group, a team tag of the shipped batch-spot
// class), while numbers and lists still reach the fields that take them;
// a value its field cannot take is refused naming the --set it came from.
func TestJourneyPluginSetTakesTheFieldsType(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "plugin-set")
	raw, err := os.ReadFile(filepath.Join(mustRepoRoot(t), "deploy", "examples", "30-nodeclass-eks-managed.yaml"))
	require.NoError(t, err)
	class := &nodesetv1alpha1.NodeClass{}
	require.NoError(t, yaml.UnmarshalStrict(raw, class))
	class.Name = "plugin-set-managed"
	class.Spec.TenantOverrides = []string{"version", "tags", "instanceTypes", "updateConfig.maxUnavailablePercentage"}
	_, err = clientset(t).NodesetV1alpha1().NodeClasses().Create(ctx, class, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}

	args := []string{"-n", ns, "create", "ml", "--class", "plugin-set-managed", "--set", "version=1.30",
		"--set", "tags.team=42", "--set", "tags.billing=true", "--set", `instanceTypes=["g5.xlarge","g5.2xlarge"]`,
		"--set", "updateConfig.maxUnavailablePercentage=50"}
	out := runPlugin(t, append(args, "--dry-run=client", "-o", "yaml")...)
	var printed nodesetv1alpha1.NodeSet
	require.NoError(t, yaml.UnmarshalStrict([]byte(out), &printed), out)
	section := printed.Spec.EKSManagedNodeGroup
	require.NotNil(t, section, out)
	assert.Equal(t, "1.30", section.Version, "the text as typed, not the number 1.3")
	assert.Equal(t, map[string]string{"team": "42", "billing": "true"}, section.Tags)
	assert.Equal(t, []string{"g5.xlarge", "g5.2xlarge"}, section.InstanceTypes)
	require.NotNil(t, section.UpdateConfig)
	assert.Equal(t, ptr.To[int32](50), section.UpdateConfig.MaxUnavailablePercentage)
	assert.Equal(t, "nodeset.nodeset.dev/ml created (server dry run)\n", runPlugin(t, append(args, "--dry-run=server")...))

	ensureClass(t, "plugin-set-sim")
	for _, tc := range []struct{ set, want string }{
		{"capacity.cpu=abc", `--set "capacity.cpu=abc": `},
		{"instanceTyp=x", `--set "instanceTyp=x": json: unknown field "instanceTyp"`},
	} {
		var stdout, stderr bytes.Buffer
		cmd := kubectlplugin.Command(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &stdout, ErrOut: &stderr})
		cmd.SetArgs([]string{"--kubeconfig=" + framework.Shared(t).KubeconfigPath, "-n", ns, "create", "sim",
			"--class", "plugin-set-sim", "--set", tc.set, "--dry-run=client"})
		err := cmd.ExecuteContext(ctx)
		require.Error(t, err, "--set %s must be refused:\n%s", tc.set, stdout.String())
		assert.Contains(t, kubectlplugin.ErrorText(err), tc.want)
	}
}

func mustRepoRoot(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	return root
}

// TestJourneyDocsNameTestsThatExist: every test the guides name as the proof
// of a promise (docs/reliability.md's table, and the others) is a test of
// the repository, so that a reader can run it.
func TestJourneyDocsNameTestsThatExist(t *testing.T) {
	root := mustRepoRoot(t)
	defined := map[string]bool{}
	funcTest := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcTest.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, defined["TestJourneyDocsNameTestsThatExist"])
	named := regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")
	for _, doc := range []string{"README.md", "docs/getting-started.md", "docs/install.md", "docs/rollouts.md",
		"docs/reliability.md", "docs/observability.md"} {
		text, err := os.ReadFile(filepath.Join(root, doc))
		require.NoError(t, err)
		for _, m := range named.FindAllStringSubmatch(string(text), -1) {
			assert.True(t, defined[m[1]], "%s names %s, which is no test of the repository", doc, m[1])
		}
	}
}

// TestJourneyPluginClassesTellsADeletedClassTakesNoNewSet: kubectl nodeset
// classes answers "may this namespace use it" with no for a class being
// deleted (it waits for its NodeSets to go and takes no new one), rather
// than the yes its allowedNamespaces alone would give; a class the namespace
// may not use reads no as before.
func TestJourneyPluginClassesTellsADeletedClassTakesNoNewSet(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "plugin-deleting")
	cs := clientset(t)
	// A finalizer of the test's own holds the deleted class, as the
	// controller's nodeset.dev/in-use does while NodeSets use it.
	const hold = "e2e.nodeset.dev/hold"
	newClass := func(name string, allowed *nodesetv1alpha1.AllowedNamespaces) {
		_, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{
			ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{hold}},
			Spec: nodesetv1alpha1.NodeClassSpec{
				Driver:            nodesetv1alpha1.DriverSimulated,
				DriverSections:    nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}},
				AllowedNamespaces: allowed,
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = cs.NodesetV1alpha1().NodeClasses().Patch(context.Background(), name, types.JSONPatchType,
				[]byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
			_ = cs.NodesetV1alpha1().NodeClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	suffix := ns[len("plugin-deleting-"):]
	kept, deleting, elsewhere := "kept-"+suffix, "deleting-"+suffix, "elsewhere-"+suffix
	newClass(kept, nil)
	newClass(deleting, nil)
	newClass(elsewhere, &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{"other"}})
	for _, name := range []string{deleting, elsewhere} {
		require.NoError(t, cs.NodesetV1alpha1().NodeClasses().Delete(ctx, name, metav1.DeleteOptions{}))
	}

	out := runPlugin(t, "-n", ns, "classes")
	row := func(name string) string {
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, name+" ") {
				return line
			}
		}
		t.Fatalf("kubectl nodeset classes lists no %s:\n%s", name, out)
		return ""
	}
	assert.Regexp(t, `\syes$`, row(kept))
	assert.Regexp(t, `\sno \(being deleted\)$`, row(deleting), "a class being deleted takes no new NodeSet")
	assert.Regexp(t, `\sno$`, row(elsewhere), "a class for other namespaces reads no, deleted or not")
}

// TestJourneyPluginClassesValidIsOfTheCurrentGeneration: the VALID column of
// kubectl nodeset classes is the node controller's verdict on the class as it
// is: after an edit it reads Unknown until that generation is judged (while
// the nodeset controller accepts no new NodeSet of it), not the True of the
// generation before.
func TestJourneyPluginClassesValidIsOfTheCurrentGeneration(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "plugin-valid")
	cs := clientset(t)
	name := "valid-" + ns[len("plugin-valid-"):]
	class, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver:         nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.NodesetV1alpha1().NodeClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	row := func() string {
		t.Helper()
		out := runPlugin(t, "-n", ns, "classes")
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, name+" ") {
				return line
			}
		}
		t.Fatalf("kubectl nodeset classes lists no %s:\n%s", name, out)
		return ""
	}
	assert.Regexp(t, `\sUnknown\s+yes$`, row(), "no verdict yet")

	// The verdict on generation 1, written as the node controller writes it.
	class.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeClassValid, Status: metav1.ConditionTrue,
		Reason: "Valid", Message: "driver simulated accepts the configuration",
		ObservedGeneration: class.Generation, LastTransitionTime: metav1.Now()}}
	class, err = cs.NodesetV1alpha1().NodeClasses().UpdateStatus(ctx, class, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Regexp(t, `\sTrue\s+yes$`, row(), "the verdict on the current generation")

	edited, err := cs.NodesetV1alpha1().NodeClasses().Patch(ctx, name, types.MergePatchType,
		[]byte(`{"spec":{"simulated":{"instanceType":"sim.large"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.Greater(t, edited.Generation, class.Generation)
	assert.Regexp(t, `\sUnknown\s+yes$`, row(), "an edit not judged yet has no verdict")
}
