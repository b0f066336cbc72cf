package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/test/framework"
)

// restrictedPlane is a control plane of its own that runs the
// NodeRestriction admission plugin and the Node authorizer, as production
// clusters do, with both controllers running against it.
type restrictedPlane struct {
	ctx  context.Context
	cp   *framework.ControlPlane
	kube *kubernetes.Clientset
	cs   *versioned.Clientset
}

// startRestricted starts a restrictedPlane for at most timeout, with the
// namespaces made.
func startRestricted(t *testing.T, timeout time.Duration, namespaces ...string) *restrictedPlane {
	t.Helper()
	return startRestrictedWith(t, timeout, framework.ControllerOptions{}, namespaces...)
}

// startRestrictedWith is startRestricted with the controllers started with
// opts.
func startRestrictedWith(t *testing.T, timeout time.Duration, opts framework.ControllerOptions, namespaces ...string) *restrictedPlane {
	t.Helper()
	shared := framework.Shared(t)
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	cp, err := framework.Start(ctx, framework.Options{Dir: t.TempDir(), BinDir: shared.BinDir, Users: framework.TestUsers,
		AdmissionPlugins: []string{"NodeRestriction"}})
	require.NoError(t, err)
	t.Cleanup(cp.Stop)
	require.NoError(t, framework.InstallCRDs(ctx, cp.AdminConfig(), filepath.Join(root, "deploy", "crds")))
	c, err := framework.NewControllers(ctx, cp, opts)
	require.NoError(t, err)
	framework.FailOnCrash(t, c.NodeSet, c.Node)
	require.NoError(t, c.Start())
	t.Cleanup(c.Stop)
	require.NoError(t, c.WaitReady(ctx))

	p := &restrictedPlane{ctx: ctx, cp: cp, kube: kubernetes.NewForConfigOrDie(cp.AdminConfig()),
		cs: versioned.NewForConfigOrDie(cp.AdminConfig())}
	for _, ns := range namespaces {
		_, err := p.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	return p
}

// asKubelet is a client with the identity of the named Node's kubelet.
func (p *restrictedPlane) asKubelet(node string) kubernetes.Interface {
	cfg := rest.CopyConfig(p.cp.AdminConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
	return kubernetes.NewForConfigOrDie(cfg)
}

// loneRequest is a lone Node's request for a machine of class: the class
// label, and nothing else of nodeset's.
func loneRequest(name, class string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: class}}}
}

// applyClaimsPolicy applies the shipped kubelet-node-claims policy and
// waits until the API server serves it (its informer has it): until a
// kubelet's dry run of a lone request for a machine of class is refused.
func (p *restrictedPlane) applyClaimsPolicy(t *testing.T, class string) {
	t.Helper()
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	require.NoError(t, framework.Apply(p.ctx, p.cp.AdminConfig(), filepath.Join(root, "deploy", "admission", "kubelet-node-claims.yaml")))
	eventually(t, time.Minute, "the policy served", func(ctx context.Context) (bool, string) {
		_, err := p.asKubelet("claims-probe").CoreV1().Nodes().Create(ctx, loneRequest("claims-probe", class), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), fmt.Sprint(err)
	})
}

// relabel merges labels (a nil value removes the label) into the named
// Node's, as its own kubelet.
func (p *restrictedPlane) relabel(t *testing.T, node string, labels map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	require.NoError(t, err)
	_, err = p.asKubelet(node).CoreV1().Nodes().Patch(p.ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
