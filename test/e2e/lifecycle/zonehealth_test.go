package lifecycle

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// TestANodeCountsInZoneHealthOnlyOnceRegistered: kube-controller-manager's
// node lifecycle controller leaves a Node labelled
// node.kubernetes.io/exclude-disruption out of its zone's health, which
// otherwise counts every Node not Ready, a Node whose machine is still
// booting included, and stops tainting a zone's unreachable Nodes
// NoExecute when too many are. Each Node of a NodeSet is created with the
// label, as the API server stores it, and has it no more once its machine
// registered.
func TestANodeCountsInZoneHealthOnlyOnceRegistered(t *testing.T) {
	c := startControllers(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kube, _ := clients(t)
	ns := createNamespace(t, "zonehealth")
	createClass(t, "zonehealth-sim", nil)

	// The label each Node of the set had when the watch first saw it.
	var mu sync.Mutex
	created := map[string]string{}
	factory := informers.NewSharedInformerFactory(kube, 0)
	informer := factory.Core().V1().Nodes().Informer()
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok || node.Labels[nodesetv1alpha1.LabelNodeSet] != "zoned" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		created[node.Name] = node.Labels[nodeutil.LabelExcludeDisruption]
	}})
	require.NoError(t, err)
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	require.True(t, cache.WaitForCacheSync(ctx.Done(), informer.HasSynced))

	createSet(t, ns, "zoned", "zonehealth-sim", 2)
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "zoned", 2))
	names := nodeNames(t, ns, "zoned")
	require.Len(t, names, 2)
	for _, name := range names {
		mu.Lock()
		label, seen := created[name]
		mu.Unlock()
		assert.True(t, seen, "%s seen created", name)
		assert.Equal(t, nodeutil.StartupExcludeDisruption, label, "%s created out of its zone's health", name)
		node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		require.True(t, nodeutil.IsReady(node) && !nodeutil.HasStartupTaint(node), "%s registered", name)
		assert.NotContains(t, node.Labels, nodeutil.LabelExcludeDisruption, "%s counts in its zone's health once registered", name)
	}
}
