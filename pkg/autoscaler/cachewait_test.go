package autoscaler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// TestAScaleUpIsSeenByTheNextLoop: cluster-autoscaler reads a group's
// target size right after its own scale-up in the next loop; read from a
// cache that has not seen the write yet, it is the size from before, none
// of the scale-up counts as upcoming, and the same pods are scaled up for
// again. NodeGroupIncreaseSize answers once the cache holds its write.
func TestAScaleUpIsSeenByTheNextLoop(t *testing.T) {
	set := testSet(2)
	set.ResourceVersion = "10"
	f := newFixture(t, nil, set)
	written := set.DeepCopy()
	written.ResourceVersion = "11"
	written.Spec.Replicas = ptr.To[int32](5)
	// The API server answers the patch at once; the watch brings it to
	// the cache a little later. The fixed delay is the point: it is the
	// cache's lag. It must only stay under cacheWait (2 s), and a loaded
	// machine that delays the goroutine further makes the lag longer, the
	// case tested, not a false failure, up to that bound.
	f.nodesets.PrependReactor("patch", "nodesets", func(core.Action) (bool, runtime.Object, error) {
		go func() {
			time.Sleep(100 * time.Millisecond)
			_ = f.sets.Update(written.DeepCopy())
		}()
		return true, written.DeepCopy(), nil
	})
	ctx := context.Background()
	_, err := f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 3})
	require.NoError(t, err)
	target, err := f.server.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: "team-a/web"})
	require.NoError(t, err)
	assert.Equal(t, int32(5), target.GetTargetSize(), "the target size right after the scale-up")
}
