package ha

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/pkg/kubestore"
	"nodeset.dev/nodeset/test/framework"
)

// TestNeverTwoReplicasChangeTheMachines runs two node-controller replicas
// serving docker-machine through the fake plugin's real RPC, sharing one
// store directory as the deployment's replicas share its ReadWriteMany
// volume. The leader is paused (SIGSTOP) while machines are being made and
// joined over SSH, and while a scale-down drains; each time the standby
// takes over and the woken leader exits. The plugin logs every machine it
// made or removed with the node controller process that asked: each
// process's calls form one unbroken run, and in the end the machines, their
// records and the Nodes are the same set, and deleting the NodeSet leaves
// none.
//
// What the fences cannot stop, and this test does not provoke, is a call a
// leader had decided and was frozen in the middle of sending: the plugin,
// not frozen, carries it out before the standby takes over.
func TestNeverTwoReplicasChangeTheMachines(t *testing.T) {
	ctx := context.Background()
	cp := framework.Shared(t)
	sshd, err := framework.StartSSHD(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(sshd.Stop)
	c, err := framework.NewControllers(ctx, cp, framework.ControllerOptions{})
	require.NoError(t, err)
	nodeStandby, _, err := c.Replica(c.Node)
	require.NoError(t, err)
	nodes := &replicas{name: "node-controller", all: [2]*framework.Process{c.Node, nodeStandby}}
	startAll(t, cp, c.NodeSet, c.Node, nodeStandby)
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	cs := versioned.NewForConfigOrDie(cp.AdminConfig())

	const ns = "ha-dm"
	machineDir := testPluginClass(ctx, t, cp, sshd, ns, "ha-dm", nil, func(spec *nodesetv1alpha1.NodeClassSpec) {
		// A drain behind a budget that allows no eviction gives up at
		// this timeout: what keeps a scale-down in flight for the pause.
		spec.Drain = &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 3 * time.Second}}
	})
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "ha-dm", Replicas: ptr.To[int32](0)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	current := 0
	for i, size := range []int32{4, 1, 3} {
		leader, standby := nodes.leader(t, kube)
		if int(size) < current {
			guard(t, kube, ns, fmt.Sprintf("guard-%d", i), nodeNamesOf(ctx, kube, ns, "web"))
		}
		scale(t, cs, ns, "web", size)
		inFlight(t, kube, ns, "web", current, int(size))
		current = int(size)
		nodes.pauseUntilTakeover(t, kube, leader, standby)
		eventually(t, 3*time.Minute, fmt.Sprintf("%d Ready nodes", size), func(ctx context.Context) (bool, string) {
			return readyNodes(ctx, kube, ns, "web", int(size))
		})
		names := nodeNamesOf(ctx, kube, ns, "web")
		sort.Strings(names)
		eventually(t, time.Minute, "a machine and a record per Node, no more", func(ctx context.Context) (bool, string) {
			machines, records := fakeMachines(t, machineDir), machineRecords(ctx, t, kube, ns)
			return equal(machines, names) && equal(records, names), fmt.Sprintf("Nodes %v, machines %v, records %v", names, machines, records)
		})
	}

	deleteSetWithItsMachines(ctx, t, kube, cs, ns, machineDir)

	// By the plugin's log, each node-controller process's machine changes
	// form one unbroken run.
	calls, err := fakeplugin.Calls(machineDir)
	require.NoError(t, err)
	runs, again := unbrokenRuns(calls, func(c fakeplugin.Call) string { return fmt.Sprintf("pid %d", c.Parent) },
		func(c fakeplugin.Call) string { return c.Op + "/" + c.Name })
	t.Logf("machines made and removed, by node-controller process runs:\n  %s", strings.Join(runs, "\n  "))
	assert.Empty(t, again, "node-controller processes that changed machines again after another had")
	assert.GreaterOrEqual(t, len(runs), 2, "a standby changed machines after a takeover")
}

// deleteSetWithItsMachines deletes the NodeSet web of namespace ns and
// testPluginClass creates the namespace ns and a docker-machine NodeClass
// named class on the test plugin (its credentials in a Secret of
// nodeset-system), whose machines join the control plane over SSH through
// sshd. options are added to the plugin's, edit may change the class's
// spec before it is created. It returns the plugin's machine directory.
func testPluginClass(ctx context.Context, t *testing.T, cp *framework.ControlPlane, sshd *framework.SSHD, ns, class string,
	options map[string]string, edit func(*nodesetv1alpha1.NodeClassSpec)) string {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	cs := versioned.NewForConfigOrDie(cp.AdminConfig())
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	secret := class + "-credentials"
	_, err = kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secret}, StringData: map[string]string{"token": class + "-token"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	admin, err := cp.WriteKubeconfig(framework.AdminName)
	require.NoError(t, err)
	machineDir, joinDir := t.TempDir(), t.TempDir()
	all := map[string]string{
		"fake-dir":      machineDir,
		"fake-ssh-port": fmt.Sprint(sshd.Port), "fake-ssh-user": sshd.User, "fake-ssh-key": sshd.KeyFile,
	}
	for k, v := range options {
		all[k] = v
	}
	spec := nodesetv1alpha1.NodeClassSpec{
		Driver:               nodesetv1alpha1.DriverDockerMachine,
		CredentialsSecretRef: &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: secret},
		DriverSections: nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{
			DriverName:        fakeplugin.Name,
			Options:           all,
			CredentialOptions: map[string]string{"fake-token": "token"},
			Provisioning: &nodesetv1alpha1.MachineProvisioning{
				Method: nodesetv1alpha1.ProvisioningSSH,
				Script: framework.JoinScript(joinDir, cp.Kubectl(), admin),
			},
		}},
	}
	if edit != nil {
		edit(&spec)
	}
	_, err = cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: spec}, metav1.CreateOptions{})
	require.NoError(t, err)
	return machineDir
}

// waits until the test plugin's machines in machineDir and their records
// are gone with it.
func deleteSetWithItsMachines(ctx context.Context, t *testing.T, kube kubernetes.Interface, cs versioned.Interface, ns, machineDir string) {
	t.Helper()
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "web", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "every machine and record gone with the NodeSet", func(ctx context.Context) (bool, string) {
		machines, records := fakeMachines(t, machineDir), machineRecords(ctx, t, kube, ns)
		return len(machines) == 0 && len(records) == 0, fmt.Sprintf("machines %v, records %v", machines, records)
	})
}

func fakeMachines(t *testing.T, dir string) []string {
	t.Helper()
	names, err := fakeplugin.MachineNames(dir)
	require.NoError(t, err)
	return names
}

// machineRecords are the names of the docker-machine records of the
// namespace's NodeSets.
func machineRecords(ctx context.Context, t *testing.T, kube kubernetes.Interface, namespace string) []string {
	t.Helper()
	list, err := kube.CoreV1().Secrets("nodeset-system").List(ctx, metav1.ListOptions{
		LabelSelector: kubestore.LabelMachineDriver + "," + nodesetv1alpha1.LabelNodeSetNamespace + "=" + namespace})
	require.NoError(t, err)
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Annotations[kubestore.AnnotationMachine])
	}
	sort.Strings(names)
	return names
}

func equal(a, b []string) bool {
	return strings.Join(a, ",") == strings.Join(b, ",")
}
