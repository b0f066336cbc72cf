package lifecycle

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestKubernetesNodeAnnotationsAreNotTheTenants: the kubelet keeps its CSI
// drivers' node IDs in the Node annotation csi.volume.kubernetes.io/nodeid
// and refuses to register any CSI driver while the value there does not
// parse: on a Shared class, a tenant that put "{" there would have other
// tenants' pods with CSI volumes scheduled onto its Nodes and never
// started. Annotations of the kubernetes.io and k8s.io domains are what
// Kubernetes's own components write and read on a Node (that one, the
// kubelet's object cache TTL, attach and detach): a NodeSet is refused
// them, with the webhook and without it, except cluster-autoscaler's
// (scale-down-disabled), which is the tenant's.
func TestKubernetesNodeAnnotationsAreNotTheTenants(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	ns := createNamespace(t, "hostile5-annotations")
	createClass(t, "hostile5-annotations", nil)
	waitClassValid(t, "hostile5-annotations")
	_, tenantCS := tenant(t, "tenant-a", ns)
	sets := tenantCS.NodesetV1alpha1().NodeSets(ns)
	annotated := func(name, key, value string) *nodesetv1alpha1.NodeSet {
		set := tenantSet(name, "hostile5-annotations", 1)
		set.Spec.Template.Annotations = map[string]string{key: value}
		return set
	}
	const field = `spec.template.annotations key "csi.volume.kubernetes.io/nodeid"`

	_, err := sets.Create(ctx, annotated("csi", "csi.volume.kubernetes.io/nodeid", "{"), metav1.CreateOptions{})
	require.Error(t, err, "the webhook refuses it")
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), field)
	for key, value := range map[string]string{"node.alpha.kubernetes.io/ttl": "86400", "volumes.kubernetes.io/controller-managed-attach-detach": "true"} {
		_, err := sets.Create(ctx, annotated("other", key, value), metav1.CreateOptions{})
		assert.Error(t, err, "%s: refused", key)
	}
	_, err = sets.Create(ctx, annotated("autoscaled", "cluster-autoscaler.kubernetes.io/scale-down-disabled", "true"), metav1.CreateOptions{})
	require.NoError(t, err, "cluster-autoscaler's annotation is the tenant's")

	withoutWebhook(t)
	_, err = sets.Create(ctx, annotated("csi", "csi.volume.kubernetes.io/nodeid", "{"), metav1.CreateOptions{})
	require.NoError(t, err, "no webhook: the schema admits it")
	acceptedWith(t, ns, "csi", "InvalidTemplate", field)
	eventually(t, 2*time.Minute, "the set with cluster-autoscaler's annotation", converged(c, t, ns, "autoscaled", 1))
}
