package lifecycle

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// TestARestartedControllerGivesABootingMachineItsWholeRegistrationTimeout:
// the node controller is away (here killed; an API server outage does the
// same) while a new machine boots, for longer than the class's
// registration timeout. The outage that kept the controller away kept the
// machine's kubelet from registering too (the simulated kubelets run in
// the node controller; a real one cannot reach an API server that is
// down). Back, the controller gives the machine the whole registration
// timeout from its start, as it gives a NotReady Node the whole unhealthy
// timeout: the machine registers a few seconds later and is kept, not
// deleted and made again.
func TestARestartedControllerGivesABootingMachineItsWholeRegistrationTimeout(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ns := createNamespace(t, "slowboot")
	const timeout = 30 * time.Second
	createClass(t, "slowboot-sim", func(class *nodesetv1alpha1.NodeClass) {
		// Registers 15s after the controller is back (below).
		class.Spec.Simulated.BootDelay = &metav1.Duration{Duration: timeout + 15*time.Second}
		class.Spec.RegistrationTimeout = &metav1.Duration{Duration: timeout}
	})
	createSet(t, ns, "slow", "slowboot-sim", 1)
	var node string
	var created time.Time
	eventually(t, time.Minute, "the machine recorded on its Node", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "slow")
		if err != nil || len(nodes) != 1 {
			return false, fmt.Sprint(len(nodes), " nodes ", err)
		}
		at, err := time.Parse(time.RFC3339, nodes[0].Annotations[nodesetv1alpha1.AnnotationMachineCreated])
		node, created = nodes[0].Name, at
		return err == nil && nodes[0].Spec.ProviderID != "", "no machine recorded yet"
	})
	c.node.Kill(syscall.SIGKILL)
	// Away past the registration deadline: the Node is overdue when the
	// controller comes back.
	eventually(t, 2*timeout, "the Node's registration deadline passed", func(context.Context) (bool, string) {
		return time.Now().After(created.Add(timeout + 5*time.Second)), "not overdue yet"
	})
	require.NoError(t, c.node.Start())

	eventually(t, 2*time.Minute, "the machine registered", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "" // replaced: told below
		}
		if err != nil {
			return false, err.Error()
		}
		if n.DeletionTimestamp != nil {
			return true, "" // being replaced: told below
		}
		return nodeutil.IsReady(n) && !nodeutil.HasStartupTaint(n), "not registered yet"
	})
	n, err := kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err == nil {
		assert.Nil(t, n.DeletionTimestamp, "the Node whose kubelet the outage kept away is not replaced")
	} else {
		t.Errorf("the Node whose kubelet the outage kept away is gone: %v", err)
	}
	events, err := kube.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + node + ",reason=" + nodecontroller.ReasonRegistrationTimeout})
	require.NoError(t, err)
	assert.Empty(t, events.Items, "no RegistrationTimeout")
	scale(t, ns, "slow", 0)
	eventually(t, time.Minute, "scaled to 0", converged(c, t, ns, "slow", 0))
}
