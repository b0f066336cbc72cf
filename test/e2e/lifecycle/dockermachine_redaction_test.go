package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
	"nodeset.dev/nodeset/pkg/kubestore"
)

// Planted credentials: distinctive values, one in each credential option,
// and a multi-line one given as a file.
const plantedToken = "planted-dm-token-Vq93Lx02"

var plantedKeyLines = []string{"PlantedDMKeyLineOne0123456789abcdefQWERTY", "PlantedDMKeyLineTwo0123456789abcdefASDFGH"}

func plantedKey() string {
	return "-----BEGIN OPENSSH PRIVATE KEY-----\n" + strings.Join(plantedKeyLines, "\n") + "\n-----END OPENSSH PRIVATE KEY-----\n"
}

// plantedForms are the texts that must appear nowhere: each value, as is and
// quoted, and each line of the multi-line one.
func plantedForms() []string {
	return append([]string{plantedToken, plantedKey(), strconv.Quote(plantedKey())}, plantedKeyLines...)
}

// TestDockerMachineCredentialsAppearNowhere plants distinctive values in
// every credential option of a class whose plugin quotes every value it was
// given in its output and its errors (fake-echo, and a failing Create, as
// generic did with a key given as a path), with the node controller logging
// at -v=6, and asserts that no value, nor any line of the multi-line one,
// appears in a Node, NodeSet or NodeClass, an Event, either controller's
// log, their metrics, /debug/machines, or any Secret but the credentials
// Secret and (for the value the plugin keeps in its saved configuration)
// the machine's own record.
func TestDockerMachineCredentialsAppearNowhere(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	kube, cs := clients(t)
	// The node controller at -v=6, where plugin output is logged.
	c.node.Kill(syscall.SIGKILL)
	args := slices.Clone(c.node.Args)
	c.node.Args = append(c.node.Args, "-v=6")
	require.NoError(t, c.node.Start())
	t.Cleanup(func() {
		c.node.Kill(syscall.SIGTERM)
		c.node.Args = args
		_ = c.node.Start()
	})
	readyCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	require.NoError(t, c.WaitReady(readyCtx))

	ns := createNamespace(t, "dm-planted")
	machineDir := t.TempDir()
	const secretName = "dm-planted-credentials"
	_, err := kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName},
		Data:       map[string][]byte{"token": []byte(plantedToken), "ssh-private-key": []byte(plantedKey())},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	createClass(t, "dm-planted", func(cl *nodesetv1alpha1.NodeClass) {
		cl.Spec.Driver = nodesetv1alpha1.DriverDockerMachine
		cl.Spec.Simulated = nil
		cl.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: secretName}
		cl.Spec.DockerMachine = &nodesetv1alpha1.DockerMachine{
			DriverName:            fakeplugin.Name,
			Options:               map[string]string{"fake-dir": machineDir, "fake-echo": "true", "fake-fail-create": "true"},
			CredentialOptions:     map[string]string{"fake-token": "token"},
			CredentialFileOptions: map[string]string{"fake-ssh-key": "ssh-private-key"},
		}
	})
	createSet(t, ns, "echo", "dm-planted", 1)

	// The plugin's echo reached the Node's annotation and Events, scrubbed.
	eventually(t, 2*time.Minute, "a scrubbed provisioning error", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "echo")
		if err != nil || len(nodes) == 0 {
			return false, fmt.Sprintf("nodes: %v", err)
		}
		msg := nodes[0].Annotations[nodesetv1alpha1.AnnotationProvisioningError]
		return strings.Contains(msg, "fake: out of machines") && strings.Contains(msg, "[redacted:token]"), msg
	})
	eventually(t, time.Minute, "the plugin's output in the log, scrubbed", func(context.Context) (bool, string) {
		return strings.Contains(c.node.Logs(), "fake: creating with"), "no plugin output logged yet"
	})

	// Then the plugin makes the machine: its record holds the
	// configuration the plugin saved.
	_, err = cs.NodesetV1alpha1().NodeClasses().Patch(ctx, "dm-planted", "application/merge-patch+json",
		[]byte(`{"spec":{"dockerMachine":{"options":{"fake-fail-create":"false"}}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "the machine made", func(context.Context) (bool, string) {
		machines, err := fakeplugin.Machines(machineDir)
		return err == nil && len(machines) == 1, fmt.Sprintf("machines %v %v", machines, err)
	})

	// Everything that stores or shows text.
	texts := map[string]string{}
	dump := func(what string, v any) {
		data, err := json.Marshal(v)
		require.NoError(t, err)
		texts[what] = string(data)
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	dump("Nodes", nodes)
	sets, err := cs.NodesetV1alpha1().NodeSets("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	dump("NodeSets", sets)
	classes, err := cs.NodesetV1alpha1().NodeClasses().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	dump("NodeClasses", classes)
	events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	dump("Events", events)
	texts["node-controller log"] = c.node.Logs()
	texts["nodeset-controller log"] = c.nodeset.Logs()
	for name, url := range map[string]string{
		"node-controller metrics":    fmt.Sprintf("http://127.0.0.1:%d/metrics", c.NodeMetricsPort),
		"nodeset-controller metrics": fmt.Sprintf("http://127.0.0.1:%d/metrics", c.NodeSetMetricsPort),
		"/debug/machines":            fmt.Sprintf("http://127.0.0.1:%d/debug/machines", c.NodeHealthPort),
	} {
		texts[name] = httpGet(t, url)
	}
	secrets, err := kube.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	recordOfMachine := ""
	for _, s := range secrets.Items {
		if s.Namespace == "nodeset-system" && s.Name == secretName {
			continue // the one that holds them
		}
		text, err := json.Marshal(s)
		require.NoError(t, err)
		if s.Labels[kubestore.LabelMachineDriver] != "" && s.Labels[nodesetv1alpha1.LabelNodeSetNamespace] == ns {
			// The machine's record must keep what the plugin saved,
			// fake-token included; never the key, which went as a file.
			recordOfMachine = s.Name
			for _, line := range append([]string{plantedKey()}, plantedKeyLines...) {
				assert.NotContains(t, string(text), line, "record %s", s.Name)
			}
			continue
		}
		texts["Secret "+s.Namespace+"/"+s.Name] = string(text)
	}
	require.NotEmpty(t, recordOfMachine, "the machine has a record")
	assert.Contains(t, texts["node-controller log"], "[redacted:", "the log shows where values were removed")
	for where, text := range texts {
		for _, planted := range plantedForms() {
			assert.NotContains(t, text, planted, where)
		}
	}

	// Cleanup: the machine goes with its NodeSet.
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "echo", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "the machine removed", func(context.Context) (bool, string) {
		machines, err := fakeplugin.Machines(machineDir)
		return err == nil && len(machines) == 0, fmt.Sprintf("machines %v %v", machines, err)
	})
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, url)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, body)
	return string(body)
}
