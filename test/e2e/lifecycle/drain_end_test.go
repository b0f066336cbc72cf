package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestTheDrainsEndIsRecordedWhateverWasWrittenMeanwhile: a machine that
// takes a while to go has the drain's end recorded on its Node, so that the
// next look (or a restarted controller) goes straight on deprovisioning
// instead of draining again. Another writer's change to the Node while the
// driver is asked (kube-controller-manager's taint as the kubelet stops, a
// label) does not make that record fail: by the second Delete of the
// machine, the Node says its drain finished.
func TestTheDrainsEndIsRecordedWhateverWasWrittenMeanwhile(t *testing.T) {
	kube, _ := clients(t)
	const node = "static-faulty-slowdel-1"
	driver := newFaultyDriver("faulty-slowdel")
	var mu sync.Mutex
	deletes := 0
	var recordedAtSecond *bool
	driver.deleting = func(name string) error {
		ctx := context.Background()
		mu.Lock()
		defer mu.Unlock()
		deletes++
		switch deletes {
		case 1:
			// Another writer changes the Node while its machine is asked to go.
			patch := []byte(`{"metadata":{"labels":{"example.com/written-meanwhile":"true"}}}`)
			if _, err := kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("the test's write: %w", err)
			}
			return drivers.ErrInProgress
		case 2:
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("the test's read: %w", err)
			}
			recorded := n.Annotations[nodesetv1alpha1.AnnotationDrainFinished] != ""
			recordedAtSecond = &recorded
			return drivers.ErrInProgress
		}
		return nil
	}
	runNodeController(t, driver)
	createFaultyClass(t, "static-faulty-slowdel", driver.name)
	createLoneNode(t, node, "static-faulty-slowdel")
	eventually(t, 30*time.Second, "the Node's machine recorded", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.Spec.ProviderID != "", "no providerID yet"
	})

	require.NoError(t, kube.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, "the Node and its machine gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(driver.names()) == 0, fmt.Sprintf("Node: %v; machines: %v", err, driver.names())
	})
	mu.Lock()
	defer mu.Unlock()
	require.NotNil(t, recordedAtSecond, "the machine was asked to go %d time(s)", deletes)
	require.True(t, *recordedAtSecond, "the drain's end was not recorded after the first Delete: the Node was drained again")
}
