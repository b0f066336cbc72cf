package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/test/framework"
)

// The taints and the identity of k8s.io/cloud-provider's node controllers:
// api/well_known_taints.go, and the client name "node-controller" that
// app/controllermanager.go gives the cloud-node-lifecycle controller (its
// service account with --use-service-account-credentials).
const (
	cloudUninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"
	cloudShutdownTaint      = "node.cloudprovider.kubernetes.io/shutdown"
	cloudNodeLifecycleUser  = "system:serviceaccount:kube-system:node-controller"
)

// cloudModel answers as a cloud whose provider implements the Instances
// interface (not InstancesV2): a Node without spec.providerID is looked
// up by its name (cloudprovider.GetInstanceProviderID), and a name that no
// instance has is cloudprovider.InstanceNotFound, which
// ensureNodeExistsByProviderID turns into "does not exist". A providerID is
// answered from the machines the cloud has.
type cloudModel struct {
	mu       sync.Mutex
	machines func(providerID string) bool
	stopped  map[string]bool
	deleted  []string
	refused  []string
}

// monitorNodes is one pass of CloudNodeLifecycleController.MonitorNodes
// (k8s.io/cloud-provider controllers/nodelifecycle/node_lifecycle_controller.go),
// rule for rule: a Node whose Ready condition is True is left alone (and
// loses the shutdown taint); one without providerID that has the
// uninitialized taint is waited for a minute from its creation; every
// other is deleted if the cloud says its instance does not exist, and
// tainted node.cloudprovider.kubernetes.io/shutdown:NoSchedule if it says
// the instance is shut down.
func (m *cloudModel) monitorNodes(ctx context.Context, kube kubernetes.Interface) {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range nodes.Items {
		node := &nodes.Items[i]
		status := corev1.ConditionUnknown
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				status = c.Status
			}
		}
		if status == corev1.ConditionTrue {
			continue
		}
		if node.Spec.ProviderID == "" {
			uninitialized := slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
				return t.Key == cloudUninitializedTaint && t.Effect == corev1.TaintEffectNoSchedule
			})
			if uninitialized && time.Since(node.CreationTimestamp.Time) < time.Minute {
				continue
			}
		}
		m.mu.Lock()
		exists := node.Spec.ProviderID != "" && m.machines(node.Spec.ProviderID)
		shutdown := m.stopped[node.Spec.ProviderID]
		m.mu.Unlock()
		if !exists {
			err := kube.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{})
			m.mu.Lock()
			switch {
			case err == nil:
				m.deleted = append(m.deleted, fmt.Sprintf("%s (uid %s, providerID %q)", node.Name, node.UID, node.Spec.ProviderID))
			case apierrors.IsForbidden(err):
				m.refused = append(m.refused, err.Error())
			}
			m.mu.Unlock()
			continue
		}
		if shutdown && !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == cloudShutdownTaint }) {
			tainted := node.DeepCopy()
			tainted.Spec.Taints = append(tainted.Spec.Taints, corev1.Taint{Key: cloudShutdownTaint, Effect: corev1.TaintEffectNoSchedule})
			_, _ = kube.CoreV1().Nodes().Update(ctx, tainted, metav1.UpdateOptions{})
		}
	}
}

func (m *cloudModel) outcome() (deleted, refused []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.deleted), slices.Clone(m.refused)
}

// TestACloudControllerManagerWaitsForTheMachineNodesetIsMaking runs, beside
// both controllers and the shipped admission policies, a cloud controller
// manager's node lifecycle loop as its service account, against a cloud
// that finds a Node without providerID by its name. A NodeSet's Node has
// no providerID until its machine is recorded (here the provider-id wait,
// 10 s, then a boot of 20 s): the loop's deletes of it are refused by
// cloud-node-deletions.nodeset.dev, so the first Node the set made is the
// one that registers, and no machine is made and removed in a loop. Once
// the Node has a providerID the cloud is asked about that machine: a Node
// whose machine is gone may still be deleted by the loop, and an admin may
// delete a Node whose machine is being made.
func TestACloudControllerManagerWaitsForTheMachineNodesetIsMaking(t *testing.T) {
	p := startRestricted(t, 5*time.Minute, "ccm-team")
	ctx, kube, cs := p.ctx, p.kube, p.cs
	require.NoError(t, framework.InstallAdmissionPolicy(ctx, p.cp))
	// The API server applies a policy once its informer has it: a dry run
	// of a refused delete shows when.
	ccmConfig := rest.CopyConfig(p.cp.AdminConfig())
	ccmConfig.Impersonate = rest.ImpersonationConfig{UserName: cloudNodeLifecycleUser}
	ccm := kubernetes.NewForConfigOrDie(ccmConfig)
	held := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ccm-making", Finalizers: []string{nodesetv1alpha1.FinalizerTermination}}}
	_, err := kube.CoreV1().Nodes().Create(ctx, held, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = kube.CoreV1().Nodes().Patch(ctx, "ccm-making", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = kube.CoreV1().Nodes().Delete(ctx, "ccm-making", metav1.DeleteOptions{})
	})
	eventually(t, time.Minute, "the policy in force", func(ctx context.Context) (bool, string) {
		err := ccm.CoreV1().Nodes().Delete(ctx, "ccm-making", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return false, "a dry-run delete was allowed"
		}
		return apierrors.IsForbidden(err), err.Error()
	})

	// Nobody else is refused: an admin deletes a Node whose machine is
	// being made, which its finalizer holds until the machine is gone.
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, "ccm-making", metav1.DeleteOptions{}))
	made, err := kube.CoreV1().Nodes().Get(ctx, "ccm-making", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotNil(t, made.DeletionTimestamp, "an admin's delete goes through")
	_, err = kube.CoreV1().Nodes().Patch(ctx, "ccm-making", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "the hand-made Node gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, "ccm-making", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	const class = "ccm-sim"
	_, err = cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small",
				BootDelay: &metav1.Duration{Duration: 20 * time.Second}}}}},
		metav1.CreateOptions{})
	require.NoError(t, err)

	cloud := &cloudModel{machines: func(providerID string) bool { return strings.HasPrefix(providerID, "simulated:///") },
		stopped: map[string]bool{}}
	loopCtx, stopLoop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for loopCtx.Err() == nil {
			cloud.monitorNodes(loopCtx, ccm)
			select {
			case <-loopCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stopLoop(); <-loopDone })

	_, err = cs.NodesetV1alpha1().NodeSets("ccm-team").Create(ctx, &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: class, Replicas: ptr.To[int32](1)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	setNodes := metav1.ListOptions{LabelSelector: nodesetv1alpha1.LabelNodeSetNamespace + "=ccm-team," + nodesetv1alpha1.LabelNodeSet + "=web"}
	var first types.UID
	eventually(t, 2*time.Minute, "the set's Node registered", func(ctx context.Context) (bool, string) {
		if deleted, _ := cloud.outcome(); len(deleted) > 0 {
			t.Fatalf("the cloud controller manager deleted a Node nodeset was making a machine for: %v", deleted)
		}
		nodes, err := kube.CoreV1().Nodes().List(ctx, setNodes)
		if err != nil {
			return false, err.Error()
		}
		if len(nodes.Items) != 1 {
			return false, fmt.Sprintf("%d Nodes", len(nodes.Items))
		}
		n := nodes.Items[0]
		if first == "" {
			first = n.UID
		}
		ready := slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		})
		return ready && n.Spec.ProviderID != "", fmt.Sprintf("%s: providerID %q, ready %v", n.Name, n.Spec.ProviderID, ready)
	})
	nodes, err := kube.CoreV1().Nodes().List(ctx, setNodes)
	require.NoError(t, err)
	require.Len(t, nodes.Items, 1)
	registered := nodes.Items[0]
	assert.Equal(t, first, registered.UID, "the Node the set made first is the one whose machine registered")
	assert.Nil(t, registered.DeletionTimestamp)
	deleted, refused := cloud.outcome()
	assert.Empty(t, deleted)
	// The loop looked while the Node had no providerID, and was refused.
	assert.True(t, slices.ContainsFunc(refused, func(e string) bool {
		return strings.Contains(e, "ValidatingAdmissionPolicy 'cloud-node-deletions.nodeset.dev'") &&
			strings.Contains(e, cloudNodeLifecycleUser+" may not delete Node "+registered.Name+": nodeset is making its machine")
	}), "refusals: %v", refused)

	t.Run("a Node with a providerID is the cloud's to judge", func(t *testing.T) {
		err := ccm.CoreV1().Nodes().Delete(ctx, registered.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		assert.NoError(t, err, "a Node whose machine the cloud no longer has is deleted as before")
	})
}
