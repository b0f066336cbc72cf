package node

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

func synced(f *fixture) { f.controller.synced = []cache.InformerSynced{func() bool { return true }} }

func TestCollectOrphans(t *testing.T) {
	owned := setNode("web-owned", "sim")
	adopted := setNode("web-renamed", "sim")
	adopted.Spec.ProviderID = "test:///web-adopted"
	// A Node the informer has not seen yet.
	lagging := setNode("web-lagging", "sim")
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, owned, adopted)
	_, err := f.kube.CoreV1().Nodes().Create(context.Background(), lagging, metav1.CreateOptions{})
	require.NoError(t, err)
	synced(f)
	old, young := f.now.Add(-time.Hour).Unix(), f.now.Add(-time.Minute).Unix()
	f.driver.machines = map[string]string{
		"web-owned": "test:///web-owned", "web-adopted": "test:///web-adopted", "web-lagging": "test:///web-lagging",
		"web-orphan": "test:///web-orphan", "web-young": "test:///web-young", "web-ageless": "test:///web-ageless",
	}
	f.driver.createdAt = map[string]int64{"web-owned": old, "web-adopted": old, "web-lagging": old, "web-orphan": old, "web-young": young}

	removed, err := f.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"web-orphan"}, removed)
	assert.Equal(t, []string{"web-orphan"}, f.driver.deletes,
		"not a machine with a Node by name or providerID, one the cache has not caught up with, a young one or one of unknown age")
	remaining := make([]string, 0, len(f.driver.machines))
	for name := range f.driver.machines {
		remaining = append(remaining, name)
	}
	sort.Strings(remaining)
	assert.Equal(t, []string{"web-adopted", "web-ageless", "web-lagging", "web-owned", "web-young"}, remaining)
}

func TestCollectOrphansRemovesNothingWhenAListFails(t *testing.T) {
	f := newFixture(t, nil)
	synced(f)
	other := newRecordingDriver(nodesetv1alpha1.DriverDockerMachine)
	other.listErr = errors.New("throttled")
	f.controller.registry[other.name] = other
	f.driver.machines = map[string]string{"web-orphan": "test:///web-orphan"}
	f.driver.createdAt = map[string]int64{"web-orphan": f.now.Add(-time.Hour).Unix()}

	removed, err := f.controller.CollectOrphans(context.Background(), time.Minute)
	require.ErrorContains(t, err, "throttled")
	assert.Empty(t, removed)
	assert.Empty(t, f.driver.deletes, "one failed List stops the whole round")

	other.listErr = nil
	f.controller.synced = []cache.InformerSynced{func() bool { return false }}
	_, err = f.controller.CollectOrphans(context.Background(), time.Minute)
	require.ErrorContains(t, err, "caches not synced")
	assert.Empty(t, f.driver.deletes, "nor does anything go before the caches synced")

	synced(f)
	removed, err = f.controller.CollectOrphans(context.Background(), time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"web-orphan"}, removed, "and the next good round collects")
}
