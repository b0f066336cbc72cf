package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// TestAutoscalerParallelDeleteNodes: cluster-autoscaler's scale-down deletes
// each node of a group in its own NodeGroupDeleteNodes call, all at once
// (--max-scale-down-parallelism, default 10; --node-deletion-batcher-interval,
// default 0, sends each at once). Every call must be carried out: one that
// fails makes cluster-autoscaler give the node back and count a failed
// scale-down for the group.
func TestAutoscalerParallelDeleteNodes(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca-parallel")
	createClass(t, "ca-parallel", twoCPUs)
	const start, parallel = 12, 10
	createAutoscaledSet(t, ns, "pool", "ca-parallel", 20)
	scale(t, ns, "pool", start)
	eventually(t, 3*time.Minute, fmt.Sprintf("%d nodes", start), converged(c, t, ns, "pool", start))
	nodes, err := setNodes(ctx, t, ns, "pool")
	require.NoError(t, err)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })

	ca := autoscalerClient(t, c)
	id := ns + "/pool"
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		failed  []string
		victims []string
		begin   = make(chan struct{})
	)
	for i := range parallel {
		node := nodes[i]
		victims = append(victims, node.Name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			// cluster-autoscaler's externalgrpc client gives each call 5 s.
			callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := ca.NodeGroupDeleteNodes(callCtx, &protos.NodeGroupDeleteNodesRequest{Id: id, Nodes: []*protos.ExternalGrpcNode{
				{Name: node.Name, ProviderID: node.Spec.ProviderID, Labels: node.Labels}}})
			if err != nil {
				mu.Lock()
				failed = append(failed, node.Name+": "+err.Error())
				mu.Unlock()
			}
		}()
	}
	close(begin)
	wg.Wait()
	assert.Empty(t, failed, "every DeleteNodes call is carried out")

	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "pool", metav1.GetOptions{})
	require.NoError(t, err)
	listed := set.Annotations[nodesetv1alpha1.AnnotationDeleteNodes]
	t.Logf("after %d parallel DeleteNodes: replicas %d, delete-nodes %q (names leave it as their Nodes go), failed %v",
		parallel, *set.Spec.Replicas, listed, failed)
	// What succeeded is exactly what was written: one decrement per node.
	assert.Equal(t, int32(start)-int32(parallel-len(failed)), *set.Spec.Replicas)
	for name := range strings.SplitSeq(listed, ",") {
		if name != "" {
			assert.Contains(t, victims, name, "only named nodes are listed")
		}
	}
	if len(failed) == 0 {
		eventually(t, 2*time.Minute, fmt.Sprintf("%d nodes left", start-parallel), converged(c, t, ns, "pool", start-parallel))
		left, err := setNodes(ctx, t, ns, "pool")
		require.NoError(t, err)
		for _, n := range left {
			assert.NotContains(t, victims, n.Name, "a named node stayed")
		}
	}
}
