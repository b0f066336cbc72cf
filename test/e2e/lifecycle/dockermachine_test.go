package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
	"nodeset.dev/nodeset/pkg/kubestore"
	"nodeset.dev/nodeset/test/framework"
)

const dmCredential = "dm-s3cret-api-token"

// dockerMachineClass makes a docker-machine class of the fake plugin whose
// machines join over SSH through sshd, and returns the plugin's directory.
func dockerMachineClass(t *testing.T, name string, sshd *framework.SSHD) (machineDir, joinDir string) {
	t.Helper()
	ctx := context.Background()
	kube, _ := clients(t)
	machineDir, joinDir = t.TempDir(), t.TempDir()
	admin, err := framework.Shared(t).WriteKubeconfig(framework.AdminName)
	require.NoError(t, err)
	secretName := name + "-credentials"
	_, err = kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName},
		StringData: map[string]string{"token": dmCredential},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	createClass(t, name, func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Driver = nodesetv1alpha1.DriverDockerMachine
		c.Spec.Simulated = nil
		c.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: secretName}
		c.Spec.DockerMachine = &nodesetv1alpha1.DockerMachine{
			DriverName: fakeplugin.Name,
			Options: map[string]string{
				"fake-dir": machineDir, "fake-cpus": "4",
				"fake-ssh-port": fmt.Sprint(sshd.Port), "fake-ssh-user": sshd.User, "fake-ssh-key": sshd.KeyFile,
			},
			CredentialOptions: map[string]string{"fake-token": "token"},
			Provisioning: &nodesetv1alpha1.MachineProvisioning{
				Method: nodesetv1alpha1.ProvisioningSSH,
				Script: framework.JoinScript(joinDir, framework.Shared(t).Kubectl(), admin),
			},
		}
	})
	return machineDir, joinDir
}

// joinlessDockerMachineClass makes a docker-machine class of the fake
// plugin with its machines in dir, which never join (its registration
// timeout is 30 minutes), and its credentials Secret (class-credentials,
// token dmCredential), and waits for the class to be Valid.
func joinlessDockerMachineClass(t *testing.T, class, dir string) {
	t.Helper()
	kube, _ := clients(t)
	_, err := kube.CoreV1().Secrets("nodeset-system").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: class + "-credentials"},
		StringData: map[string]string{"token": dmCredential},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	createClass(t, class, func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Driver = nodesetv1alpha1.DriverDockerMachine
		c.Spec.Simulated = nil
		c.Spec.RegistrationTimeout = &metav1.Duration{Duration: 30 * time.Minute}
		c.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: class + "-credentials"}
		c.Spec.DockerMachine = &nodesetv1alpha1.DockerMachine{
			DriverName:        fakeplugin.Name,
			Options:           map[string]string{"fake-dir": dir},
			CredentialOptions: map[string]string{"fake-token": "token"},
		}
	})
	waitClassValid(t, class)
}

func pluginMachines(t *testing.T, dir string) []string {
	t.Helper()
	names, err := fakeplugin.MachineNames(dir)
	require.NoError(t, err)
	return names
}

// TestDockerMachineLifecycle: a NodeSet of a docker-machine class gets its
// machines from the plugin, through the real plugin RPC; they join over SSH
// under their Node's name; scale-down removes exactly the chosen machine; a
// node-controller crash in the middle of creations leaks nothing; deleting
// the NodeSet leaves no machine, record or bootstrap token.
func TestDockerMachineLifecycle(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	kube, cs := clients(t)
	sshd, err := framework.StartSSHD(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(sshd.Stop)
	ns := createNamespace(t, "dm")
	machineDir, joinDir := dockerMachineClass(t, "dm-fake", sshd)
	eventually(t, time.Minute, "class Valid", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "dm-fake", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
		if cond == nil || cond.Status != metav1.ConditionTrue {
			return false, fmt.Sprintf("Valid: %+v", cond)
		}
		return true, ""
	})

	createSet(t, ns, "web", "dm-fake", 2)
	eventually(t, 2*time.Minute, "2 docker-machine nodes", converged(c, t, ns, "web", 2))
	nodes, err := setNodes(ctx, t, ns, "web")
	require.NoError(t, err)
	assert.Equal(t, nodeNames(t, ns, "web"), pluginMachines(t, machineDir), "one plugin machine per Node, named after it")
	for _, n := range nodes {
		assert.Equal(t, "docker-machine://fake/"+n.Name, n.Spec.ProviderID)
		cond := findNodeCondition(&n, corev1.NodeReady)
		require.NotNil(t, cond)
		assert.Equal(t, "joined over SSH", cond.Message, "%s was made Ready by its own join script", n.Name)
	}
	joined, err := os.ReadFile(filepath.Join(joinDir, "joined"))
	require.NoError(t, err)
	assert.ElementsMatch(t, nodeNames(t, ns, "web"), strings.Fields(string(joined)), "each machine joined once, under its Node's name")
	machines, err := fakeplugin.Machines(machineDir)
	require.NoError(t, err)
	for name, m := range machines {
		assert.Equal(t, 4, m.CPUs, name)
		assert.Equal(t, dmCredential, m.Token, "%s got its credential option from the Secret", name)
	}
	records, err := kube.CoreV1().Secrets("nodeset-system").List(ctx, metav1.ListOptions{LabelSelector: kubestore.LabelMachineDriver + "," + nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns})
	require.NoError(t, err)
	assert.Len(t, records.Items, 2, "a record per machine")
	tokens, err := kube.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
	require.NoError(t, err)
	assert.Empty(t, tokens.Items, "bootstrap tokens are deleted once their machines registered")

	// Scale down removes exactly the chosen machine.
	chosen, kept := nodes[0].Name, nodes[1].Name
	_, err = kube.CoreV1().Nodes().Patch(ctx, chosen, "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"nodeset.dev/delete-node":"true"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	scale(t, ns, "web", 1)
	eventually(t, 2*time.Minute, "1 node", converged(c, t, ns, "web", 1))
	assert.Equal(t, []string{kept}, pluginMachines(t, machineDir), "the chosen machine, and only it, is gone")

	// A Node deleted behind nodeset's back (its finalizer removed by hand
	// while the node controller is down, which otherwise puts it back
	// before the delete lands) leaves its machine without a Node: orphan
	// collection removes it after --orphan-min-age (10s here), and a
	// replacement is made.
	c.node.Kill(syscall.SIGTERM)
	_, err = kube.CoreV1().Nodes().Patch(ctx, kept, "application/merge-patch+json",
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, kept, metav1.DeleteOptions{}))
	require.NoError(t, c.node.Start())
	eventually(t, 2*time.Minute, "the orphan collected and replaced", func(ctx context.Context) (bool, string) {
		machines := pluginMachines(t, machineDir)
		for _, m := range machines {
			if m == kept {
				return false, "the orphan " + kept + " is still there"
			}
		}
		return len(machines) == 1, fmt.Sprintf("machines %v", machines)
	})
	eventually(t, 2*time.Minute, "1 node after the orphan", converged(c, t, ns, "web", 1))
	eventuallyEvent(t, "web", "OrphanMachineDeleted")

	// A crash while machines are being made: SIGKILL the node controller as
	// soon as a new machine's record is written, then restart it.
	scale(t, ns, "web", 3)
	eventually(t, time.Minute, "a new machine record", func(ctx context.Context) (bool, string) {
		list, err := kube.CoreV1().Secrets("nodeset-system").List(ctx, metav1.ListOptions{LabelSelector: kubestore.LabelMachineDriver + "," + nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) > 1, fmt.Sprintf("%d records", len(list.Items))
	})
	c.restart(t, c.node, syscall.SIGKILL)
	eventually(t, 2*time.Minute, "3 nodes after the crash", converged(c, t, ns, "web", 3))
	assert.Equal(t, nodeNames(t, ns, "web"), pluginMachines(t, machineDir), "no machine leaked or doubled by the crash")

	// Deleting the NodeSet removes every machine, record and token.
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "web", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "everything gone", func(ctx context.Context) (bool, string) {
		if m := pluginMachines(t, machineDir); len(m) > 0 {
			return false, fmt.Sprintf("machines left: %v", m)
		}
		list, err := kube.CoreV1().Secrets("nodeset-system").List(ctx, metav1.ListOptions{LabelSelector: kubestore.LabelMachineDriver + "," + nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns})
		if err != nil || len(list.Items) > 0 {
			return false, fmt.Sprintf("records left: %v %v", len(list.Items), err)
		}
		tokens, err := kube.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
		if err != nil || len(tokens.Items) > 0 {
			return false, fmt.Sprintf("bootstrap tokens left: %v %v", len(tokens.Items), err)
		}
		return true, ""
	})

	// The credential never left the node controller.
	for name, text := range map[string]string{"nodeset-controller log": c.nodeset.Logs(), "node-controller log": c.node.Logs()} {
		assert.NotContains(t, text, dmCredential, name)
	}
	events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, e := range events.Items {
		assert.NotContains(t, e.Message, dmCredential)
	}
}

// TestDockerMachineBadOptions: a class whose options the plugin does not
// have, or of the wrong type, is Valid=False naming the option.
func TestDockerMachineBadOptions(t *testing.T) {
	startControllers(t)
	_, cs := clients(t)
	for name, options := range map[string]map[string]string{
		"dm-typo":      {"fake-dir": "/tmp", "fake-cpu": "4"},
		"dm-wrongtype": {"fake-dir": "/tmp", "fake-cpus": "four"},
	} {
		createClass(t, name, func(c *nodesetv1alpha1.NodeClass) {
			c.Spec.Driver = nodesetv1alpha1.DriverDockerMachine
			c.Spec.Simulated = nil
			c.Spec.DockerMachine = &nodesetv1alpha1.DockerMachine{DriverName: fakeplugin.Name, Options: options}
		})
	}
	want := map[string]string{
		"dm-typo":      `spec.dockerMachine.options[fake-cpu]: "fake-cpu" is not an option of plugin docker-machine-driver-fake`,
		"dm-wrongtype": `spec.dockerMachine.options[fake-cpus]: option "fake-cpus": "four" is not an integer`,
	}
	for name, message := range want {
		eventually(t, time.Minute, name+" Valid=False", func(ctx context.Context) (bool, string) {
			class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cond := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
			if cond == nil || cond.Status != metav1.ConditionFalse {
				return false, fmt.Sprintf("Valid: %+v", cond)
			}
			return strings.Contains(cond.Message, message), cond.Message
		})
		t.Logf("%s: Valid=False as expected", name)
	}
}

func findNodeCondition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}
