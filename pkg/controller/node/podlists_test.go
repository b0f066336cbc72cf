package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
)

func podOn(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: node}}
}

// podListsFixture counts the pod lists, by whether they name a node, and
// holds the first one until release is closed.
type podListsFixture struct {
	kube             *kubefake.Clientset
	lists            *PodLists
	perNode, allPods atomic.Int32
	release          chan struct{}
	started          chan struct{}
}

func newPodListsFixture(objects ...runtime.Object) *podListsFixture {
	f := &podListsFixture{kube: kubefake.NewClientset(objects...), release: make(chan struct{}), started: make(chan struct{})}
	var first sync.Once
	f.kube.PrependReactor("list", "pods", func(action core.Action) (bool, runtime.Object, error) {
		if action.(core.ListAction).GetListRestrictions().Fields.Empty() {
			f.allPods.Add(1)
		} else {
			f.perNode.Add(1)
		}
		first.Do(func() {
			close(f.started)
			<-f.release
		})
		return false, nil, nil
	})
	f.lists = NewPodLists(f.kube)
	return f
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestOneNodeIsListedByItself(t *testing.T) {
	f := newPodListsFixture(podOn("a", "node-1"), podOn("b", "node-2"))
	close(f.release)
	pods, err := f.lists.OnNode(context.Background(), "node-1")
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, names(pods))
	assert.Equal(t, int32(1), f.perNode.Load())
	assert.Zero(t, f.allPods.Load())
}

func TestNodesAskedDuringARoundShareTheNextRead(t *testing.T) {
	f := newPodListsFixture(podOn("a", "node-0"))
	// The first question starts a read, held open.
	firstDone := make(chan []corev1.Pod)
	go func() {
		pods, _ := f.lists.OnNode(context.Background(), "node-0")
		firstDone <- pods
	}()
	<-f.started
	// A pod bound now, after the read began: the questions asked from here
	// on must see it, the first need not.
	require.NoError(t, f.kube.Tracker().Add(podOn("late", "node-3")))
	results := make([][]corev1.Pod, 6)
	var wg sync.WaitGroup
	for i := 1; i < 6; i++ {
		wg.Go(func() {
			pods, err := f.lists.OnNode(context.Background(), fmt.Sprintf("node-%d", i))
			assert.NoError(t, err)
			results[i] = pods
		})
	}
	// Let them all queue behind the running read.
	require.Eventually(t, func() bool {
		f.lists.mu.Lock()
		defer f.lists.mu.Unlock()
		return f.lists.next != nil && len(f.lists.next.nodes) == 5
	}, 10*time.Second, time.Millisecond)
	close(f.release)
	assert.Equal(t, []string{"a"}, names(<-firstDone))
	wg.Wait()
	assert.Equal(t, []string{"late"}, names(results[3]), "read after the question")
	for i, pods := range results {
		if i != 3 {
			assert.Empty(t, pods, "node-%d", i)
		}
	}
	assert.Equal(t, int32(1), f.perNode.Load(), "the first question alone")
	assert.Equal(t, int32(1), f.allPods.Load(), "five questions, one list of every pod")
}

func TestABigClusterIsAskedNodeByNode(t *testing.T) {
	f := newPodListsFixture(podOn("a", "node-1"), podOn("b", "node-2"))
	close(f.release)
	f.lists.seen = 10 * podPage // a full list would take 11 requests
	r := map[string]bool{"node-1": true, "node-2": true, "node-3": true}
	pods, err := f.lists.read(context.Background(), r)
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, names(pods["node-1"]))
	assert.Equal(t, []string{"b"}, names(pods["node-2"]))
	assert.Equal(t, int32(3), f.perNode.Load())
	assert.Zero(t, f.allPods.Load())

	f.lists.seen = 2
	_, err = f.lists.read(context.Background(), r)
	require.NoError(t, err)
	assert.Equal(t, int32(1), f.allPods.Load(), "a small cluster: one list for three nodes")
}
