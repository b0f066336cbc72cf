package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/kubestore"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/test/framework"
)

// installPlugin builds test/plugins/docker-machine-driver-<driver>
// (rancher/machine's own driver, at the release go.mod pins) into the node
// controller's PATH.
func installPlugin(t *testing.T, driver string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := framework.BuildCommands(ctx, filepath.Join(framework.Shared(t).Dir, "bin"), "./test/plugins/docker-machine-driver-"+driver)
	require.NoError(t, err)
}

// exampleClass reads deploy/examples/40-nodeclass-docker-machine.yaml, the
// class users start from.
func exampleClass(t *testing.T) *nodesetv1alpha1.NodeClass {
	t.Helper()
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	objs, err := framework.ReadObjects(filepath.Join(root, "deploy", "examples", "40-nodeclass-docker-machine.yaml"))
	require.NoError(t, err)
	require.Len(t, objs, 1)
	var class nodesetv1alpha1.NodeClass
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, &class))
	return &class
}

// genericHost is what a class of createGenericClass adopts: the key of its
// loopback sshd, and the directory whose file "joined" its join scripts
// append their Node's name to.
type genericHost struct {
	key     []byte
	joinDir string
}

// createGenericClass creates the shipped example class named name, aimed
// at a new loopback sshd (its port and user; its key in a Secret of the
// class's name), with the join script replaced by one that stands in for
// the kubelet and mutate's changes, and waits until it is Valid.
func createGenericClass(t *testing.T, name string, mutate func(*nodesetv1alpha1.NodeClass)) genericHost {
	t.Helper()
	ctx := context.Background()
	kube, cs := clients(t)
	sshd, err := framework.StartSSHD(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(sshd.Stop)
	host := genericHost{joinDir: t.TempDir()}
	admin, err := framework.Shared(t).WriteKubeconfig(framework.AdminName)
	require.NoError(t, err)
	host.key, err = os.ReadFile(sshd.KeyFile)
	require.NoError(t, err)

	class := exampleClass(t)
	ref := class.Spec.CredentialsSecretRef
	ref.Name = name + "-ssh"
	_, err = kube.CoreV1().Secrets(ref.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: ref.Name},
		Data:       map[string][]byte{"ssh-private-key": host.key},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	class.Name = name
	class.Spec.DockerMachine.Options["generic-ssh-port"] = strconv.Itoa(sshd.Port)
	class.Spec.DockerMachine.Options["generic-ssh-user"] = sshd.User
	class.Spec.DockerMachine.Provisioning.Script = framework.JoinScript(host.joinDir, framework.Shared(t).Kubectl(), admin)
	class.Spec.RegistrationTimeout = &metav1.Duration{Duration: 2 * time.Minute}
	mutate(class)
	_, err = cs.NodesetV1alpha1().NodeClasses().Create(ctx, class, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.NodesetV1alpha1().NodeClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	waitClassValid(t, name)
	return host
}

// TestDockerMachineGenericDriver: the shipped example, with only the host's
// address, port and user changed (and the join script replaced by one that
// stands in for the kubelet), provisions through rancher/machine's real
// generic driver over a loopback sshd: each Node's machine is made, its
// join script runs with the key generic copied into the machine's store
// directory, scale-down removes exactly the chosen machine's record and
// files, a SIGKILL of the node controller in the middle of creations leaves
// nothing half-made, and deleting the NodeSet leaves nothing behind.
func TestDockerMachineGenericDriver(t *testing.T) {
	c := startControllers(t)
	installPlugin(t, "generic")
	ctx := context.Background()
	kube, cs := clients(t)
	ns := createNamespace(t, "dm-generic")
	storeDir := filepath.Join(framework.Shared(t).Dir, "docker-machine", "machines")
	host := createGenericClass(t, "generic-e2e", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.DockerMachine.Options["generic-ip-address"] = "127.0.0.1"
	})
	key, joinDir := host.key, host.joinDir

	records := func(ctx context.Context) ([]corev1.Secret, error) {
		list, err := kube.CoreV1().Secrets("nodeset-system").List(ctx, metav1.ListOptions{LabelSelector: kubestore.LabelMachineDriver + "," + nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns})
		if err != nil {
			return nil, err
		}
		return list.Items, nil
	}
	// machineFiles asserts what generic and nodeset keep for a machine.
	machineFiles := func(name string) {
		t.Helper()
		for _, file := range []string{filepath.Join(storeDir, name, "generic-ssh-key"), filepath.Join(storeDir, name, "nodeset-credentials", "generic-ssh-key")} {
			info, err := os.Stat(file)
			if assert.NoError(t, err, "%s: generic's copy of the key, and the file nodeset wrote for it", file) {
				assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), file)
			}
		}
	}

	createSet(t, ns, "metal", "generic-e2e", 2)
	eventually(t, 3*time.Minute, "2 generic nodes", converged(c, t, ns, "metal", 2))
	nodes, err := setNodes(ctx, t, ns, "metal")
	require.NoError(t, err)
	for _, n := range nodes {
		assert.Equal(t, "docker-machine://generic/"+n.Name, n.Spec.ProviderID)
		cond := findNodeCondition(&n, corev1.NodeReady)
		require.NotNil(t, cond)
		assert.Equal(t, "joined over SSH", cond.Message, "%s was made Ready by its join script, run over SSH with generic's key", n.Name)
		assert.Empty(t, n.Annotations[nodesetv1alpha1.AnnotationProvisioningError])
		machineFiles(n.Name)
	}
	list, err := records(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2, "a record per machine")
	for _, r := range list {
		assert.NotContains(t, string(r.Data["config.json"]), "PRIVATE KEY", "the record holds the key's path, not the key")
	}

	// Scale-down removes exactly the chosen machine: for generic there is
	// nothing to destroy, and its record and files go.
	chosen, kept := nodes[0].Name, nodes[1].Name
	_, err = kube.CoreV1().Nodes().Patch(ctx, chosen, "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"nodeset.dev/delete-node":"true"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	scale(t, ns, "metal", 1)
	eventually(t, 2*time.Minute, "1 node", converged(c, t, ns, "metal", 1))
	assert.Equal(t, []string{kept}, nodeNames(t, ns, "metal"))
	assert.NoDirExists(t, filepath.Join(storeDir, chosen), "the chosen machine's files are gone")
	machineFiles(kept)
	list, err = records(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, kept, list[0].Annotations[kubestore.AnnotationMachine], "only the chosen machine's record is gone")

	// A crash while machines are being made: SIGKILL the node controller as
	// soon as a new machine's record is written, then restart it.
	scale(t, ns, "metal", 3)
	eventually(t, time.Minute, "a new machine record", func(ctx context.Context) (bool, string) {
		list, err := records(ctx)
		if err != nil {
			return false, err.Error()
		}
		return len(list) > 1, fmt.Sprintf("%d records", len(list))
	})
	c.restart(t, c.node, syscall.SIGKILL)
	eventually(t, 3*time.Minute, "3 nodes after the crash", converged(c, t, ns, "metal", 3))
	for _, name := range nodeNames(t, ns, "metal") {
		machineFiles(name)
	}
	joined, err := os.ReadFile(filepath.Join(joinDir, "joined"))
	require.NoError(t, err)
	for _, name := range nodeNames(t, ns, "metal") {
		assert.Contains(t, strings.Fields(string(joined)), name, "%s joined", name)
	}

	// Deleting the NodeSet leaves no record, file or bootstrap token.
	names := nodeNames(t, ns, "metal")
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "metal", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "everything gone", func(ctx context.Context) (bool, string) {
		list, err := records(ctx)
		if err != nil || len(list) > 0 {
			return false, fmt.Sprintf("records left: %d %v", len(list), err)
		}
		for _, name := range names {
			if _, err := os.Stat(filepath.Join(storeDir, name)); err == nil {
				return false, "files left for " + name
			}
		}
		tokens, err := kube.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
		if err != nil || len(tokens.Items) > 0 {
			return false, fmt.Sprintf("bootstrap tokens left: %v %v", len(tokens.Items), err)
		}
		return true, ""
	})

	// No line of the key left the node controller.
	events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, line := range keyLines(key) {
		assert.NotContains(t, c.node.Logs(), line)
		for _, e := range events.Items {
			assert.NotContains(t, e.Message, line)
		}
	}
}

// keyLines are the lines of a PEM key that are secret (not its armour).
func keyLines(key []byte) []string {
	var out []string
	for _, line := range strings.Split(string(key), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "-----") {
			out = append(out, line)
		}
	}
	return out
}

// TestDockerMachineATenantCannotTakeAnotherTenantsHost: the shipped example
// class, letting each NodeSet name its host (options.generic-ip-address in
// tenantOverrides) with one SSH key for the pool. Tenant A's NodeSet takes
// the loopback host; tenant B's NodeSet names the same host and gets no
// join script run there (which would make A's host join as B's Node): its
// Node says why, until A's NodeSet is gone, when B's Node joins.
func TestDockerMachineATenantCannotTakeAnotherTenantsHost(t *testing.T) {
	c := startControllers(t)
	installPlugin(t, "generic")
	ctx := context.Background()
	kube, cs := clients(t)
	host := createGenericClass(t, "generic-pool", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.TenantOverrides = []string{"options.generic-ip-address"}
	})

	onHost := func(ns string) {
		t.Helper()
		_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
			ObjectMeta: metav1.ObjectMeta{Name: "metal", Namespace: ns},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "generic-pool", Replicas: ptr.To[int32](1),
				DriverSections: nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{
					Options: map[string]string{"generic-ip-address": "127.0.0.1"}}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	teamA, teamB := createNamespace(t, "host-team-a"), createNamespace(t, "host-team-b")
	onHost(teamA)
	eventually(t, 3*time.Minute, "team A's Node on the host", converged(c, t, teamA, "metal", 1))
	hostOwner := nodeNames(t, teamA, "metal")[0]

	onHost(teamB)
	var refused string
	eventually(t, 2*time.Minute, "team B's Node refused the host", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, teamB, "metal")
		if err != nil || len(nodes) != 1 {
			return false, fmt.Sprintf("%d nodes (%v)", len(nodes), err)
		}
		refused = nodes[0].Name
		msg := nodes[0].Annotations[nodesetv1alpha1.AnnotationProvisioningError]
		return strings.Contains(msg, "the host there shows the SSH host key of a machine that is not of this NodeSet's namespace") &&
			!strings.Contains(msg, hostOwner), msg
	})
	joined, err := os.ReadFile(filepath.Join(host.joinDir, "joined"))
	require.NoError(t, err)
	assert.Equal(t, []string{hostOwner}, strings.Fields(string(joined)), "no join script ran for team B's Node")
	node, err := kube.CoreV1().Nodes().Get(ctx, hostOwner, metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, nodeutil.IsReady(node), "team A's Node is untouched")

	// Once team A's machine is gone, the host is free.
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(teamA).Delete(ctx, "metal", metav1.DeleteOptions{}))
	eventually(t, 3*time.Minute, "team B's Node on the host", converged(c, t, teamB, "metal", 1))
	assert.Equal(t, []string{refused}, nodeNames(t, teamB, "metal"))
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(teamB).Delete(ctx, "metal", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "team B's Node gone", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, teamB, "metal")
		return err == nil && len(nodes) == 0, fmt.Sprintf("%d nodes (%v)", len(nodes), err)
	})
}
