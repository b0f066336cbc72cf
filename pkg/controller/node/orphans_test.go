package node

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
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

func TestCollectOrphansSkipsOnlyTheDriverWhoseListFails(t *testing.T) {
	f := newFixture(t, nil)
	synced(f)
	other := newRecordingDriver(nodesetv1alpha1.DriverDockerMachine)
	other.listErr = errors.New("throttled")
	other.machines = map[string]string{"dm-orphan": "test:///dm-orphan"}
	other.createdAt = map[string]int64{"dm-orphan": f.now.Add(-time.Hour).Unix()}
	f.controller.registry[other.name] = other
	f.driver.machines = map[string]string{"web-orphan": "test:///web-orphan"}
	f.driver.createdAt = map[string]int64{"web-orphan": f.now.Add(-time.Hour).Unix()}

	removed, err := f.controller.CollectOrphans(context.Background(), time.Minute)
	require.ErrorContains(t, err, "listing the machines of driver docker-machine: throttled")
	assert.Equal(t, []string{"web-orphan"}, removed, "the driver that listed is judged on its own list")
	assert.Empty(t, other.deletes, "the one whose List failed loses nothing")

	f.driver.machines = map[string]string{"web-orphan-2": "test:///web-orphan-2"}
	f.driver.createdAt = map[string]int64{"web-orphan-2": f.now.Add(-time.Hour).Unix()}
	other.listErr = nil
	f.controller.synced = []cache.InformerSynced{func() bool { return false }}
	_, err = f.controller.CollectOrphans(context.Background(), time.Minute)
	require.ErrorContains(t, err, "caches not synced")
	assert.Equal(t, []string{"web-orphan"}, f.driver.deletes, "nothing goes before the caches synced")
	assert.Empty(t, other.deletes)

	synced(f)
	removed, err = f.controller.CollectOrphans(context.Background(), time.Minute)
	require.NoError(t, err)
	sort.Strings(removed)
	assert.Equal(t, []string{"dm-orphan", "web-orphan-2"}, removed, "and the next good round collects")
}

// scopedGroupDriver is a recording group driver whose groups and stray
// machines live in scopes, each of which may fail to list.
type scopedGroupDriver struct {
	*recordingGroupDriver
	scopes     []string
	groupScope map[string]string // group name -> scope
	strays     map[string][]drivers.MachineStatus
	listErrs   map[string]error
	strayErrs  map[string]error
	terminated []string
}

func (d *scopedGroupDriver) GroupScopes(context.Context) []string { return d.scopes }

func (d *scopedGroupDriver) ListGroupsIn(_ context.Context, scope string) ([]drivers.GroupStatus, error) {
	if err := d.listErrs[scope]; err != nil {
		return nil, err
	}
	var out []drivers.GroupStatus
	for name, g := range d.groups {
		if d.groupScope[name] == scope {
			out = append(out, *g)
		}
	}
	return out, nil
}

func (d *scopedGroupDriver) ListStrayMachines(_ context.Context, scope string) ([]drivers.MachineStatus, error) {
	if err := d.strayErrs[scope]; err != nil {
		return nil, err
	}
	return d.strays[scope], nil
}

func (d *scopedGroupDriver) TerminateStrayMachine(_ context.Context, scope, providerID string) error {
	d.terminated = append(d.terminated, scope+" "+providerID)
	return nil
}

func TestOrphanCollectionSkipsOnlyTheScopeItCannotList(t *testing.T) {
	g := newGroupFixture(t, 1)
	synced(g.fixture)
	d := &scopedGroupDriver{recordingGroupDriver: g.group, scopes: []string{"us-east-1 (NodeClass good)", "zz-nowhere-9 (NodeClass broken)"},
		groupScope: map[string]string{}, strays: map[string][]drivers.MachineStatus{}, listErrs: map[string]error{}, strayErrs: map[string]error{}}
	g.controller.registry = drivers.Registry{d.Name(): d}
	good, broken := d.scopes[0], d.scopes[1]
	old := testNow.Add(-time.Hour).Unix()
	add := func(scope, name, set string) {
		g.group.groups[name] = &drivers.GroupStatus{Name: name, CreatedAt: old,
			Owner: drivers.Owner{Cluster: "test", Namespace: "team-a", Name: set, UID: types.UID("uid-" + set)}}
		d.groupScope[name] = scope
	}
	add(good, "orphan-good", "gone-1")
	add(broken, "orphan-broken", "gone-2")
	d.listErrs[broken] = errors.New("no such host")

	removed, err := g.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.ErrorContains(t, err, "zz-nowhere-9 (NodeClass broken): no such host")
	assert.Equal(t, []string{"orphan-good"}, removed, "a broken class stops only its own scope")
	assert.Equal(t, []string{"orphan-good"}, g.group.deleted)

	delete(d.listErrs, broken)
	removed, err = g.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"orphan-broken"}, removed)
}

func TestStrayMachinesAreCollectedWhenTheirSetOrGroupIsGone(t *testing.T) {
	owned := setNode("ip-owned", "asg")
	owned.Spec.ProviderID = "aws:///zone-a/i-owned"
	g := newGroupFixture(t, 1, owned)
	synced(g.fixture)
	scope := "us-east-1 (NodeClass asg)"
	d := &scopedGroupDriver{recordingGroupDriver: g.group, scopes: []string{scope}, groupScope: map[string]string{},
		strays: map[string][]drivers.MachineStatus{}, listErrs: map[string]error{}, strayErrs: map[string]error{}}
	g.controller.registry = drivers.Registry{d.Name(): d}
	web := drivers.Owner{Cluster: "test", Namespace: "team-a", Name: "web", UID: "uid-web"}
	webGroup := drivers.GroupName(web)
	g.group.groups[webGroup] = &drivers.GroupStatus{Name: webGroup, CreatedAt: testNow.Unix(), Owner: web}
	d.groupScope[webGroup] = scope
	old, young := testNow.Add(-time.Hour).Unix(), testNow.Add(-time.Minute).Unix()
	stray := func(id string, owner drivers.Owner, created int64) drivers.MachineStatus {
		return drivers.MachineStatus{Name: "ip-" + id, ProviderID: "aws:///zone-a/i-" + id, Owner: owner, CreatedAt: created, State: drivers.MachineRunning}
	}
	gone := drivers.Owner{Cluster: "test", Namespace: "team-a", Name: "deleted", UID: "uid-deleted"}
	recreated := drivers.Owner{Cluster: "test", Namespace: "team-a", Name: "web", UID: "uid-old-web"}
	d.strays[scope] = []drivers.MachineStatus{
		stray("owned", gone, old),          // a Node still accounts for it: its termination is the Node's
		stray("young", gone, young),        // may be on its way into a group
		stray("detached", web, old),        // detached from the live group of a live NodeSet: left alone
		stray("set-gone", gone, old),       // its NodeSet is gone
		stray("recreated", recreated, old), // a NodeSet of the same name, made again
		stray("nobody", drivers.Owner{Cluster: "test"}, old),
	}

	d.strayErrs[scope] = errors.New("throttled")
	removed, err := g.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.ErrorContains(t, err, "throttled")
	assert.Empty(t, removed)
	assert.Empty(t, d.terminated, "nothing on a partial list")

	delete(d.strayErrs, scope)
	removed, err = g.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"aws:///zone-a/i-set-gone", "aws:///zone-a/i-recreated"}, removed)
	assert.ElementsMatch(t, []string{scope + " aws:///zone-a/i-set-gone", scope + " aws:///zone-a/i-recreated"}, d.terminated)

	t.Log("the group of a live NodeSet is gone: its stray goes too")
	delete(g.group.groups, webGroup)
	d.terminated = nil
	d.strays[scope] = []drivers.MachineStatus{stray("detached", web, old)}
	removed, err = g.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"aws:///zone-a/i-detached"}, removed)
}

// TestAGroupIsNotCollectedWhileNodesNameIt: a NodeSet deleted without
// waiting for its Nodes (its finalizers taken off) leaves its group and
// Nodes; the Nodes are deleted and drained, each machine terminated in the
// group. Orphan collection leaves the group alone until no Node names it,
// so no machine goes undrained with it.
func TestAGroupIsNotCollectedWhileNodesNameIt(t *testing.T) {
	g := newGroupFixture(t, 1)
	synced(g.fixture)
	old := testNow.Add(-time.Hour).Unix()
	g.group.groups["gone-group"] = &drivers.GroupStatus{Name: "gone-group", CreatedAt: old,
		Owner: drivers.Owner{Cluster: "test", Namespace: "team-a", Name: "gone", UID: "uid-gone"}}
	draining := setNode("gone-a", "asg")
	draining.Labels[nodesetv1alpha1.LabelNodeSet] = "gone"
	draining.Annotations = map[string]string{nodesetv1alpha1.AnnotationGroup: "gone-group"}
	require.NoError(t, g.nodeIndexer.Add(draining))

	removed, err := g.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	assert.Empty(t, removed, "a Node still names the group")
	assert.Empty(t, g.group.deleted)

	require.NoError(t, g.nodeIndexer.Delete(draining))
	removed, err = g.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"gone-group"}, removed, "collected once its last Node is gone")
}

// panickingLister is a machine driver whose List panics.
type panickingLister struct{ *recordingDriver }

func (panickingLister) List(context.Context) ([]drivers.MachineStatus, error) {
	panic("driver bug: list of a nil page")
}

// TestAPanickingListEndsTheRoundNotTheProcess: a driver's panic during
// orphan collection is this round's error, counted as panicked.
func TestAPanickingListEndsTheRoundNotTheProcess(t *testing.T) {
	f := newFixture(t, nil)
	synced(f)
	f.controller.registry[f.driver.Name()] = panickingLister{f.driver}
	var err error
	require.NotPanics(t, func() { _, err = f.controller.CollectOrphans(context.Background(), time.Minute) })
	require.ErrorContains(t, err, "orphan collection panicked: driver bug: list of a nil page")
	var rounds dto.Metric
	require.NoError(t, f.controller.metrics.orphanRounds.WithLabelValues(roundPanicked).Write(&rounds))
	assert.Equal(t, 1.0, rounds.GetCounter().GetValue(), "counted as panicked")
}

// TestOrphanCollectionAfterARestartScrubsTheClassesCredentials: right
// after a restart the controller has read no credentials (no Node of the
// class was provisioned or deleted yet); what orphan collection logs and
// returns of a driver's errors still carries none of its classes'.
func TestOrphanCollectionAfterARestartScrubsTheClassesCredentials(t *testing.T) {
	const planted = "planted-secret-5b1c2e"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "nodeset-system", Name: "sim-creds"},
		Data: map[string][]byte{"token": []byte(planted)}}
	sim, dm := testClass("sim"), testClass("dm")
	sim.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "sim-creds"}
	dm.Spec.Driver = nodesetv1alpha1.DriverDockerMachine
	dm.Spec.CredentialsSecretRef = sim.Spec.CredentialsSecretRef
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{sim, dm}, secret)
	synced(f)
	f.driver.machines = map[string]string{"web-orphan": "test:///web-orphan"}
	f.driver.createdAt = map[string]int64{"web-orphan": f.now.Add(-time.Hour).Unix()}
	f.driver.deleteErr = errors.New("delete refused for token " + planted)
	other := newRecordingDriver(nodesetv1alpha1.DriverDockerMachine)
	other.listErr = errors.New("list refused for token " + planted)
	f.controller.registry[other.name] = other

	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	_, err := f.controller.CollectOrphans(klog.NewContext(context.Background(), logger), 10*time.Minute)
	require.Error(t, err)
	assert.Equal(t, []string{"web-orphan"}, f.driver.deletes)
	logged := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	assert.Contains(t, logged, "Deleting an orphan machine")
	assert.Contains(t, err.Error(), "list refused")
	assert.NotContains(t, logged, planted)
	assert.NotContains(t, err.Error(), planted)
}

// TestAnOrphanGoesWithItsClassCurrentCredentials: an orphan machine is
// removed with the class it was made with as it is now, credentials read
// from its Secret now (the ones it was made with may be revoked); one
// whose class is gone, is now of another driver, or that names none is
// removed with no class, and so with what its driver saved.
func TestAnOrphanGoesWithItsClassCurrentCredentials(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "nodeset-system", Name: "sim-creds"},
		Data: map[string][]byte{"token": []byte("rotated-token")}}
	sim, moved := testClass("sim"), testClass("moved")
	sim.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "sim-creds"}
	moved.Spec.Driver = nodesetv1alpha1.DriverDockerMachine
	moved.Spec.CredentialsSecretRef = sim.Spec.CredentialsSecretRef
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{sim, moved}, secret)
	synced(f)
	old := f.now.Add(-time.Hour).Unix()
	f.driver.machines = map[string]string{"web-sim": "test:///web-sim", "web-gone": "test:///web-gone",
		"web-moved": "test:///web-moved", "web-unnamed": "test:///web-unnamed"}
	f.driver.createdAt = map[string]int64{"web-sim": old, "web-gone": old, "web-moved": old, "web-unnamed": old}
	f.driver.classes = map[string]string{"web-sim": "sim", "web-gone": "gone", "web-moved": "moved"}

	removed, err := f.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"web-sim", "web-gone", "web-moved", "web-unnamed"}, removed)
	got := f.driver.deletedWith["web-sim"]
	assert.Equal(t, "sim", got.Name)
	assert.Equal(t, sim.Spec, got.Spec)
	assert.Equal(t, map[string][]byte{"token": []byte("rotated-token")}, got.Credentials, "the Secret's credentials as they are now")
	for _, name := range []string{"web-gone", "web-moved", "web-unnamed"} {
		assert.Equal(t, drivers.Class{}, f.driver.deletedWith[name], "%s: no class", name)
	}
}
