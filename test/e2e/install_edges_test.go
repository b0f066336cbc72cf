package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/kubectlplugin"
	"nodeset.dev/nodeset/test/framework"
)

// TestChartValuesSchema: the chart refuses values it does not know, or of
// the wrong type, naming the key, instead of installing something else than
// was asked for (a mistyped drivers.enabled installs the simulated driver
// alone); and it accepts every key of its README's values table set to a
// value other than its default.
func TestChartValuesSchema(t *testing.T) {
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	framework.SkipIfShort(t, "helm, built from the Go module proxy")
	helm := filepath.Join(chartTools(t, root), "helm")
	chart := filepath.Join(root, "deploy", "charts", "nodeset")

	refused := []struct {
		name string
		args []string
		want []string
	}{
		{name: "a mistyped key", args: []string{"--set", "drivers.enable={docker-machine}"}, want: []string{"enable"}},
		{name: "a mistyped top-level key", args: []string{"--set", "nodesetControler.replicas=3"}, want: []string{"nodesetControler"}},
		{name: "a mistyped nested key", args: []string{"--set", "drivers.dockerMachine.persistence.storageClass=nfs-client",
			"--set", "drivers.enabled={docker-machine}"}, want: []string{"storageClass"}},
		{name: "replicas not a number", args: []string{"--set", "nodesetController.replicas=two"}, want: []string{"replicas"}},
		{name: "negative replicas", args: []string{"--set", "nodeController.replicas=-1"}, want: []string{"replicas"}},
		{name: "leaderElect a string", args: []string{"--set-string", "nodeController.leaderElect=false"}, want: []string{"leaderElect"}},
		{name: "extraArgs not a list", args: []string{"--set", "nodeController.extraArgs=-v=4"}, want: []string{"extraArgs"}},
		{name: "an unknown failurePolicy", args: []string{"--set", "webhook.failurePolicy=ignore"}, want: []string{"failurePolicy"}},
		{name: "a webhook timeout the API server refuses", args: []string{"--set", "webhook.timeoutSeconds=60"}, want: []string{"timeoutSeconds"}},
		// Values that reach a flag or a field another program parses: the
		// node controller would not start, or the API server would refuse
		// the CronJob halfway through the install.
		{name: "a poll interval without a unit", args: []string{"--set", "drivers.enabled={eks-asg}", "--set", "drivers.aws.clusterName=prod",
			"--set-string", "drivers.aws.groupPollInterval=30"}, want: []string{"groupPollInterval"}},
		{name: "a poll interval that is no duration", args: []string{"--set", "drivers.enabled={eks-asg}", "--set", "drivers.aws.clusterName=prod",
			"--set", "drivers.aws.groupPollInterval=often"}, want: []string{"groupPollInterval"}},
		{name: "a renew schedule that is no cron schedule", args: []string{"--set", "certificates.renewSchedule=weekly"}, want: []string{"renewSchedule"}},
		{name: "a renew schedule of four fields", args: []string{"--set", "certificates.renewSchedule=17 3 * *"}, want: []string{"renewSchedule"}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(helm, append([]string{"template", "nodeset", chart, "--namespace", "nodeset-system"}, tc.args...)...)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "helm template %s must be refused, rendered:\n%.2000s", strings.Join(tc.args, " "), out)
			for _, want := range tc.want {
				assert.Contains(t, string(out), want)
			}
		})
	}

	// Every documented key, none at its default.
	everything := `
global: {}
image:
  nodesetController: registry.example.com/nodeset-controller
  nodeController: registry.example.com/node-controller
  tag: v9.9.9
  pullPolicy: Always
imagePullSecrets: [{name: regcred}]
nodesetController:
  replicas: 3
  leaderElect: true
  resources: {requests: {cpu: 200m, memory: 128Mi}, limits: {memory: 1Gi}}
  extraArgs: ["--workers=8"]
  podAnnotations: {example.com/a: "b"}
  nodeSelector: {kubernetes.io/os: linux}
  tolerations: [{key: example.com/infra, operator: Exists, effect: NoSchedule}]
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: example.com/pool, operator: In, values: [infra]}]}]}}}
  priorityClassName: nodeset-critical
nodeController:
  replicas: 1
  leaderElect: false
  resources: {requests: {cpu: 50m, memory: 64Mi}}
  extraArgs: ["--unhealthy-timeout=10m"]
  serviceAccount: {annotations: {example.com/sa: "yes"}}
  podAnnotations: {example.com/c: "d"}
  nodeSelector: {kubernetes.io/os: linux}
  tolerations: []
  affinity: {podAntiAffinity: null}
  priorityClassName: ""
drivers:
  enabled: [docker-machine, eks-asg]
  dockerMachine:
    storePath: /var/lib/machines
    persistence:
      existingClaim: ""
      storageClassName: nfs-client
      accessModes: [ReadWriteOnce]
      size: 5Gi
    plugins:
      image: registry.example.com/plugins:v1
      command: ["/bin/cp", "-r", "/plugins/.", "/opt/nodeset/plugins/"]
  aws:
    clusterName: prod
    groupPollInterval: 1m
    roleArn: arn:aws:iam::111122223333:role/nodeset
certificates:
  provider: cert-manager
  renewSchedule: "0 4 * * *"
  certManager:
    issuerRef: {kind: ClusterIssuer, name: my-ca}
webhook:
  failurePolicy: Fail
  timeoutSeconds: 10
admissionPolicy: false
flowSchema: false
`
	file := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(file, []byte(everything), 0o644))
	manifest := run(t, helm, "template", "nodeset", chart, "--namespace", "nodeset-system", "-f", file)
	r := decodeRendered(t, manifest)
	replicas, _, _ := unstructured.NestedFieldNoCopy(r.get("Deployment", "nodeset-controller"), "spec", "replicas")
	assert.EqualValues(t, 3, replicas)
	assert.Contains(t, r.args(t, "node-controller"), "--drivers=docker-machine,eks-asg")
	assert.Contains(t, r.args(t, "node-controller"), "--leader-elect=false")
	assert.Equal(t, "registry.example.com/node-controller:v9.9.9", r.container(t, "node-controller")["image"])
	nodeset, node := r.podSpec(t, "nodeset-controller"), r.podSpec(t, "node-controller")
	assert.Equal(t, "nodeset-critical", nodeset["priorityClassName"])
	assert.NotContains(t, node, "priorityClassName", "an empty class sets none")
	affinity, _, _ := unstructured.NestedMap(nodeset, "affinity")
	assert.Contains(t, affinity, "nodeAffinity", "an affinity of one's own")
	assert.Contains(t, affinity, "podAntiAffinity", "keeps the replicas spread")
	assert.NotContains(t, node, "affinity", "podAntiAffinity: null drops the spread")
	assert.Zero(t, r.kinds["ValidatingAdmissionPolicy"])
	assert.Zero(t, r.kinds["FlowSchema"])
	out, err := exec.Command(helm, "lint", "--strict", chart, "--namespace", "nodeset-system", "-f", file).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// TestKubectlPluginStatusEventsOfThisNodeSet: kubectl nodeset status shows
// the events of the NodeSet it shows, as kubectl describe does, not those
// of an earlier NodeSet of the same name (Events outlive their object for
// an hour).
func TestKubectlPluginStatusEventsOfThisNodeSet(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "plugin-events")
	ensureClass(t, "plugin-events-class")
	cs, kube := clientset(t), kubeClient(t)
	newSet := func() *nodesetv1alpha1.NodeSet {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "plugin-events-class", Replicas: ptr.To[int32](1)},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		return set
	}
	event := func(set *nodesetv1alpha1.NodeSet, name, reason, message string) {
		now := metav1.NewTime(time.Now())
		_, err := kube.CoreV1().Events(ns).Create(ctx, &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			InvolvedObject: corev1.ObjectReference{APIVersion: nodesetv1alpha1.GroupVersion.String(), Kind: "NodeSet",
				Namespace: ns, Name: set.Name, UID: set.UID},
			Reason: reason, Message: message, Type: corev1.EventTypeWarning, Count: 1,
			FirstTimestamp: now, LastTimestamp: now, Source: corev1.EventSource{Component: "nodeset-controller"},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	old := newSet()
	event(old, "web.old", "LimitExceeded", "an event of the NodeSet that was deleted")
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "web", metav1.DeleteOptions{}))
	current := newSet()
	require.NotEqual(t, old.UID, current.UID)
	event(current, "web.current", "SuccessfulCreate", "an event of this NodeSet")

	out := runPlugin(t, "-n", ns, "status", "web")
	assert.Contains(t, out, "an event of this NodeSet")
	assert.NotContains(t, out, "an event of the NodeSet that was deleted", "the events are the shown NodeSet's")
	described := kubectl(t, "describe", "nodeset", "web", "-n", ns)
	assert.NotContains(t, described, "an event of the NodeSet that was deleted", "as kubectl describe shows them")
}

// runPlugin runs kubectl-nodeset in-process as the admin and returns what it
// printed; it fails the test when the command fails.
func runPlugin(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := kubectlplugin.Command(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig=" + framework.Shared(t).KubeconfigPath}, args...))
	err := cmd.ExecuteContext(context.Background())
	require.NoError(t, err, "kubectl nodeset %s: %s%s", strings.Join(args, " "), errOut.String(), out.String())
	return out.String()
}

// TestUninstallFinalizerCleanup: docs/install.md says how to clean up a
// cluster whose controllers went before its NodeSets, Nodes and NodeClasses;
// its commands, run as written against the real API server, let every one of
// them go.
func TestUninstallFinalizerCleanup(t *testing.T) {
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	ctx := context.Background()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	require.NoError(t, err)
	script := shellBlockAfter(t, string(doc), "take the finalizers off:")

	ns := createNamespace(t, "uninstall")
	cs, kube := clientset(t), kubeClient(t)
	class, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "uninstall-left", Finalizers: []string{nodesetv1alpha1.FinalizerInUse}},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "left", Finalizers: []string{"nodeset.dev/nodes"}},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: class.Name, Replicas: ptr.To[int32](1)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	node, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "uninstall-left-1",
		Labels:     map[string]string{nodesetv1alpha1.LabelNodeClass: class.Name},
		Finalizers: []string{nodesetv1alpha1.FinalizerTermination}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// No controller runs: each deletion waits for its finalizer.
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, set.Name, metav1.DeleteOptions{}))
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}))
	require.NoError(t, cs.NodesetV1alpha1().NodeClasses().Delete(ctx, class.Name, metav1.DeleteOptions{}))
	stuck, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, class.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, stuck.DeletionTimestamp, "the class is Terminating")

	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+framework.Shared(t).KubeconfigPath,
		"PATH="+filepath.Dir(framework.Shared(t).Kubectl())+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", script, out)

	gone := func(get func() error) func() bool {
		return func() bool { return apierrors.IsNotFound(get()) }
	}
	assert.Eventually(t, gone(func() error {
		_, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, set.Name, metav1.GetOptions{})
		return err
	}), 30*time.Second, 100*time.Millisecond, "the NodeSet is gone")
	assert.Eventually(t, gone(func() error {
		_, err := kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		return err
	}), 30*time.Second, 100*time.Millisecond, "the Node is gone")
	assert.Eventually(t, gone(func() error {
		_, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, class.Name, metav1.GetOptions{})
		return err
	}), 30*time.Second, 100*time.Millisecond, "the NodeClass is gone")
}

// shellBlockAfter returns the first ```sh block of doc after the text after.
func shellBlockAfter(t *testing.T, doc, after string) string {
	t.Helper()
	i := strings.Index(doc, after)
	require.GreaterOrEqual(t, i, 0, "the document says %q", after)
	rest := doc[i:]
	start := strings.Index(rest, "```sh\n")
	require.GreaterOrEqual(t, start, 0, "a shell block follows %q", after)
	rest = rest[start+len("```sh\n"):]
	end := strings.Index(rest, "```")
	require.GreaterOrEqual(t, end, 0)
	return rest[:end]
}
