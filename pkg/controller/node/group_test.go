package node

import (
	"context"
	"errors"
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/component"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// recordingGroupDriver is a GroupDriver holding its groups in memory; the
// eks-asg driver is tested against moto elsewhere.
type recordingGroupDriver struct {
	mu         sync.Mutex
	groups     map[string]*drivers.GroupStatus
	ensured    []drivers.Group
	terminated []string
	deleted    []string
	ensureErr  error
	listErr    error
	// pending makes DeleteGroup answer ErrInProgress this many times.
	pending int
	// updateID and updateStatus are the driver-native update EnsureGroup reports.
	updateID, updateStatus string
	// message is the problem EnsureGroup reports of the group.
	message string
	// templateHash is the template EnsureGroup says the group has taken.
	templateHash string
	// machineLabels and machineTaints are what EnsureGroup's new machines
	// say of their Nodes.
	machineLabels map[string]string
	machineTaints []corev1.Taint
}

func newGroupDriver() *recordingGroupDriver {
	return &recordingGroupDriver{groups: map[string]*drivers.GroupStatus{}}
}

func (d *recordingGroupDriver) Name() string                                  { return nodesetv1alpha1.DriverEKSASG }
func (d *recordingGroupDriver) Validate(context.Context, drivers.Class) error { return nil }
func (d *recordingGroupDriver) Capacity(context.Context, drivers.Class) (drivers.Capacity, error) {
	return drivers.Capacity{}, drivers.ErrNotImplemented
}

// EnsureGroup raises the group, adding machines i-<n> named ip-<n>.
func (d *recordingGroupDriver) EnsureGroup(_ context.Context, g drivers.Group) (drivers.GroupStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ensured = append(d.ensured, g)
	if d.ensureErr != nil {
		return drivers.GroupStatus{}, d.ensureErr
	}
	status, ok := d.groups[g.Name]
	if !ok {
		status = &drivers.GroupStatus{Name: g.Name, State: "ACTIVE", Owner: g.Owner}
		d.groups[g.Name] = status
	}
	for len(status.Machines) < int(g.Replicas) {
		n := len(d.groups)*100 + len(status.Machines) + len(d.terminated)
		status.Machines = append(status.Machines, drivers.MachineStatus{Name: fmt.Sprintf("ip-%d", n),
			ProviderID: fmt.Sprintf("aws:///zone-a/i-%d", n), State: drivers.MachineRunning, TemplateHash: g.TemplateHash, CreatedAt: testNow.Unix(),
			Labels: d.machineLabels, Taints: d.machineTaints})
	}
	status.DesiredSize = max(status.DesiredSize, g.Replicas)
	status.UpdateID, status.UpdateStatus, status.Message, status.TemplateHash = d.updateID, d.updateStatus, d.message, d.templateHash
	return *status, nil
}

func (d *recordingGroupDriver) DescribeGroup(_ context.Context, _ drivers.Class, name string) (drivers.GroupStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if status, ok := d.groups[name]; ok {
		return *status, nil
	}
	return drivers.GroupStatus{}, drivers.ErrNotFound
}

func (d *recordingGroupDriver) TerminateMachine(_ context.Context, _ drivers.Class, group, providerID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.terminated = append(d.terminated, group+" "+providerID)
	if status, ok := d.groups[group]; ok {
		before := len(status.Machines)
		status.Machines = slices.DeleteFunc(status.Machines, func(m drivers.MachineStatus) bool { return m.ProviderID == providerID })
		if len(status.Machines) < before {
			status.DesiredSize--
		}
	}
	return nil
}

func (d *recordingGroupDriver) DeleteGroup(_ context.Context, _ drivers.Class, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deleted = append(d.deleted, name)
	if d.pending > 0 {
		d.pending--
		return drivers.ErrInProgress
	}
	delete(d.groups, name)
	return nil
}

func (d *recordingGroupDriver) ListGroups(context.Context) ([]drivers.GroupStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.listErr != nil {
		return nil, d.listErr
	}
	var out []drivers.GroupStatus
	for _, g := range d.groups {
		out = append(out, *g)
	}
	return out, nil
}

func asgTestClass() *nodesetv1alpha1.NodeClass {
	return &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "asg", Generation: 1},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver: nodesetv1alpha1.DriverEKSASG,
			DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{
				ClusterName: "prod", Region: "us-east-1", ImageID: "ami-1", InstanceType: "t3.large", SubnetIDs: []string{"subnet-1"}}},
			RegistrationTimeout: &metav1.Duration{Duration: 10 * time.Minute},
		},
		Status: nodesetv1alpha1.NodeClassStatus{Conditions: []metav1.Condition{{Type: nodesetv1alpha1.NodeClassValid,
			Status: metav1.ConditionTrue, Reason: "Valid", ObservedGeneration: 1}}},
	}
}

// groupFixture is a node controller serving only the recording group
// driver, with the NodeSet team-a/web of class asg.
type groupFixture struct {
	*fixture
	group *recordingGroupDriver
	set   *nodesetv1alpha1.NodeSet
}

func newGroupFixture(t *testing.T, replicas int32, objects ...runtime.Object) *groupFixture {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{asgTestClass()}, objects...)
	g := &groupFixture{fixture: f, group: newGroupDriver()}
	f.controller.registry = drivers.Registry{g.group.Name(): g.group}
	f.controller.opts.NodeSets = f.nodesets
	g.set = &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", UID: "uid-web", Finalizers: []string{"nodeset.dev/nodes"}},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "asg", Replicas: ptr.To(replicas)},
		Status: nodesetv1alpha1.NodeSetStatus{Conditions: []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue,
			Reason: "Accepted", LastTransitionTime: metav1.NewTime(testNow)}}},
	}
	created, err := f.nodesets.NodesetV1alpha1().NodeSets("team-a").Create(context.Background(), g.set, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, f.setIndexer.Add(created))
	return g
}

// syncGroup runs one sync of the set's group and copies what it wrote into
// the caches, as the watches would.
func (g *groupFixture) syncGroup() error {
	err := g.controller.syncGroup(context.Background(), "team-a/web")
	set, getErr := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), "web", metav1.GetOptions{})
	if getErr == nil {
		require.NoError(g.t, g.setIndexer.Update(set))
	}
	nodes, listErr := g.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	require.NoError(g.t, listErr)
	for _, obj := range g.nodeIndexer.List() {
		require.NoError(g.t, g.nodeIndexer.Delete(obj))
	}
	for i := range nodes.Items {
		require.NoError(g.t, g.nodeIndexer.Add(&nodes.Items[i]))
	}
	return err
}

func (g *groupFixture) getSet() *nodesetv1alpha1.NodeSet {
	set, err := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(g.t, err)
	return set
}

func TestGroupSyncMakesANodePerMachineAndAdoptsTheKubeletsNode(t *testing.T) {
	// The kubelet of the group's second machine registered before the
	// controller made its Node.
	kubelets := markReady(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ip-101", Labels: map[string]string{"kubernetes.io/hostname": "ip-101"}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///zone-a/i-101"}})
	g := newGroupFixture(t, 2, kubelets)

	require.NoError(t, g.syncGroup())
	require.Len(t, g.group.ensured, 1)
	ensured := g.group.ensured[0]
	assert.EqualValues(t, 2, ensured.Replicas)
	assert.Equal(t, drivers.GroupName(drivers.Owner{Cluster: "test", Namespace: "team-a", Name: "web"}), ensured.Name)
	assert.Equal(t, drivers.Owner{Cluster: "test", Namespace: "team-a", Name: "web", UID: "uid-web"}, ensured.Owner)
	assert.NotEmpty(t, ensured.TemplateHash)

	made := g.get("ip-100")
	assert.Equal(t, "aws:///zone-a/i-100", made.Spec.ProviderID)
	assert.Equal(t, "web", made.Labels[nodesetv1alpha1.LabelNodeSet])
	assert.Equal(t, ensured.TemplateHash, made.Labels[nodesetv1alpha1.LabelTemplateHash])
	assert.Equal(t, ensured.Name, made.Annotations[nodesetv1alpha1.AnnotationGroup])
	assert.True(t, nodeutil.HasStartupTaint(made), "pods wait for the kubelet")
	assert.Contains(t, made.Finalizers, nodesetv1alpha1.FinalizerTermination)

	adopted := g.get("ip-101")
	assert.Equal(t, "web", adopted.Labels[nodesetv1alpha1.LabelNodeSet])
	assert.Equal(t, "ip-101", adopted.Labels["kubernetes.io/hostname"], "the kubelet's labels stay")
	assert.Contains(t, adopted.Finalizers, nodesetv1alpha1.FinalizerTermination)
	assert.False(t, nodeutil.HasStartupTaint(adopted), "a Ready kubelet's Node is not tainted again")
	assert.NotContains(t, adopted.Labels, nodeutil.LabelExcludeDisruption,
		"a Ready kubelet's Node is not kept out of the zone's health: no registration write would take the label off")
	assert.Equal(t, nodeutil.StartupExcludeDisruption, made.Labels[nodeutil.LabelExcludeDisruption], "a Node made before its kubelet is")
	nodes, err := g.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, nodes.Items, 2, "one Node per machine")

	set := g.getSet()
	assert.Contains(t, set.Finalizers, nodesetv1alpha1.FinalizerGroup, "the group is deleted before the NodeSet goes")
	require.NotNil(t, set.Status.Group)
	assert.Equal(t, ensured.Name, set.Status.Group.Name)
	assert.EqualValues(t, 2, ptr.Deref(set.Status.Group.DesiredSize, 0))

	// Nothing changes: nothing is written.
	before := len(g.kube.Actions()) + len(g.nodesets.Actions())
	require.NoError(t, g.syncGroup())
	writes := 0
	for _, a := range append(g.kube.Actions(), g.nodesets.Actions()...)[before:] {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			writes++
		}
	}
	assert.Zero(t, writes, "a sync with nothing to do writes nothing")
}

func TestGroupIsNotTouchedUntilTheSetIsAccepted(t *testing.T) {
	g := newGroupFixture(t, 2)
	set := g.getSet()
	set.Status.Conditions[0].Status = metav1.ConditionFalse
	_, err := g.nodesets.NodesetV1alpha1().NodeSets("team-a").UpdateStatus(context.Background(), set, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, g.setIndexer.Update(set))
	require.NoError(t, g.syncGroup())
	assert.Empty(t, g.group.ensured, "a NodeSet not Accepted (namespace, limits, overrides) gets no group")
}

func TestGroupErrorsReachStatusAndEvents(t *testing.T) {
	g := newGroupFixture(t, 2)
	g.group.ensureErr = fmt.Errorf("creating Auto Scaling group: %w: InsufficientInstanceCapacity", drivers.ErrOutOfCapacity)
	require.ErrorIs(t, g.syncGroup(), drivers.ErrOutOfCapacity, "retried with backoff")
	set := g.getSet()
	require.NotNil(t, set.Status.Group)
	assert.Contains(t, set.Status.Group.Message, "InsufficientInstanceCapacity")
	assert.Contains(t, g.events()[0], "Warning GroupFailed")

	g.group.ensureErr = nil
	require.NoError(t, g.syncGroup())
	assert.Empty(t, g.getSet().Status.Group.Message, "cleared once the group is fine")
}

func TestNodeOfAMachineThatLeftIsDeletedAfterAFreshLook(t *testing.T) {
	g := newGroupFixture(t, 2)
	require.NoError(t, g.syncGroup())
	// The cloud replaced i-100 (a spot interruption): the group's answer
	// no longer has it.
	name := drivers.GroupName(drivers.Owner{Cluster: "test", Namespace: "team-a", Name: "web"})
	g.group.mu.Lock()
	g.group.groups[name].Machines = g.group.groups[name].Machines[1:]
	g.group.groups[name].DesiredSize = 1
	g.group.mu.Unlock()
	require.NoError(t, g.syncGroup())
	_, err := g.kube.CoreV1().Nodes().Get(context.Background(), "ip-100", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the Node of the machine that left is deleted: %v", err)
	_, err = g.kube.CoreV1().Nodes().Get(context.Background(), "ip-101", metav1.GetOptions{})
	assert.NoError(t, err)
	assert.Empty(t, g.group.terminated, "nothing to terminate: the machine is gone")
}

func TestDeletedGroupNodeIsDrainedThenTerminatedInItsGroup(t *testing.T) {
	g := newGroupFixture(t, 2)
	require.NoError(t, g.syncGroup())
	groupName := g.group.ensured[0].Name
	// Deleted by its NodeSet (the fake API keeps it for its finalizer only
	// when told so).
	node := g.get("ip-100")
	node.DeletionTimestamp = &metav1.Time{Time: testNow}
	_, err := g.kube.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{})
	require.NoError(t, err)
	g.updateCache(g.get("ip-100"))

	g.kube.ClearActions()
	require.NoError(t, g.sync("ip-100")) // cordon; nothing to drain: terminate, release
	var writes []core.Action
	for _, a := range g.kube.Actions() {
		if a.GetResource().Resource == "nodes" && (a.GetVerb() == "update" || a.GetVerb() == "patch") {
			writes = append(writes, a)
		}
	}
	require.Len(t, writes, 2)
	assert.True(t, isCordon(writes[0]), "cordoned first")
	assert.True(t, isRelease(writes[1]), "and held until the machine is gone")
	assert.Equal(t, []string{groupName + " aws:///zone-a/i-100"}, g.group.terminated)
	assert.NotContains(t, g.get("ip-100").Finalizers, nodesetv1alpha1.FinalizerTermination)
	assert.EqualValues(t, 1, g.group.groups[groupName].DesiredSize, "the termination lowered the group by one")

	// A look at the group from before the termination does not bring the
	// Node back.
	g.group.mu.Lock()
	g.group.groups[groupName].Machines = append(g.group.groups[groupName].Machines,
		drivers.MachineStatus{Name: "ip-100", ProviderID: "aws:///zone-a/i-100", State: drivers.MachineRunning})
	g.group.mu.Unlock()
	require.NoError(t, g.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("nodes"), "", "ip-100"))
	set := g.getSet()
	set.Spec.Replicas = ptr.To[int32](1)
	_, err = g.nodesets.NodesetV1alpha1().NodeSets("team-a").Update(context.Background(), set, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, g.syncGroup())
	_, err = g.kube.CoreV1().Nodes().Get(context.Background(), "ip-100", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a machine just terminated gets no Node")
}

func TestDeletedSetDeletesItsGroupOnceItsNodesAreGone(t *testing.T) {
	g := newGroupFixture(t, 1)
	require.NoError(t, g.syncGroup())
	groupName := g.group.ensured[0].Name
	set := g.getSet()
	set.DeletionTimestamp = &metav1.Time{Time: testNow}
	require.NoError(t, g.setIndexer.Update(set))
	require.NoError(t, g.controller.syncGroup(context.Background(), "team-a/web"))
	assert.Empty(t, g.group.deleted, "its Node is still there (being drained)")

	g.deleteCache("ip-100")
	g.group.pending = 1
	require.NoError(t, g.controller.syncGroup(context.Background(), "team-a/web"))
	assert.Contains(t, g.getSet().Finalizers, nodesetv1alpha1.FinalizerGroup, "held while the group is being deleted")
	require.NoError(t, g.controller.syncGroup(context.Background(), "team-a/web"))
	assert.Equal(t, []string{groupName, groupName}, g.group.deleted)
	assert.NotContains(t, g.getSet().Finalizers, nodesetv1alpha1.FinalizerGroup)
}

func TestOrphanGroupsAreCollectedOnlyWhenTheirSetIsGone(t *testing.T) {
	g := newGroupFixture(t, 1)
	synced(g.fixture)
	old, young := testNow.Add(-time.Hour).Unix(), testNow.Add(-time.Minute).Unix()
	add := func(name, namespace, set string, uid types.UID, created int64) {
		g.group.groups[name] = &drivers.GroupStatus{Name: name, CreatedAt: created,
			Owner: drivers.Owner{Cluster: "test", Namespace: namespace, Name: set, UID: uid}}
	}
	add("live", "team-a", "web", "uid-web", old)
	add("recreated", "team-a", "web", "uid-old-web", old) // a set of the same name, deleted and made again
	add("orphan", "team-a", "gone", "uid-gone", old)
	add("young", "team-a", "gone-too", "uid-2", young)

	g.group.listErr = errors.New("throttled")
	removed, err := g.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.ErrorContains(t, err, "throttled")
	assert.Empty(t, removed)
	assert.Empty(t, g.group.deleted, "nothing goes while a list fails")

	g.group.listErr = nil
	removed, err = g.controller.CollectOrphans(context.Background(), 10*time.Minute)
	require.NoError(t, err)
	slices.Sort(removed)
	assert.Equal(t, []string{"orphan", "recreated"}, removed)
	assert.Contains(t, g.group.groups, "live")
	assert.Contains(t, g.group.groups, "young")
}

func TestManagedUpdatesArePassedOnAndReported(t *testing.T) {
	g := newGroupFixture(t, 1)
	set := g.getSet()
	set.Spec.Strategy.Type = nodesetv1alpha1.ManagedStrategy
	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", UpdateID: "u-1", UpdateStatus: "InProgress"}
	_, err := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Update(context.Background(), set, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, g.setIndexer.Update(set))
	g.group.updateID, g.group.updateStatus = "u-1", "InProgress"

	require.NoError(t, g.syncGroup())
	ensured := g.group.ensured[len(g.group.ensured)-1]
	assert.True(t, ensured.ManagedRollout, "strategy Managed lets the driver roll")
	assert.Equal(t, "u-1", ensured.UpdateID, "a restarted controller resumes tracking the update in status")
	for _, e := range g.events() {
		assert.NotContains(t, e, "GroupUpdate", "no news, no Event")
	}

	g.group.updateStatus = "Failed"
	require.NoError(t, g.syncGroup())
	assert.Contains(t, g.events(), "Warning GroupUpdate Update u-1 of cloud group "+ensured.Name+": Failed")
	assert.Equal(t, "Failed", g.getSet().Status.Group.UpdateStatus)
	require.NoError(t, g.syncGroup())
	assert.Empty(t, g.group.ensured[len(g.group.ensured)-1].UpdateID, "a finished update is not tracked again")
}

// TestTheTemplateAGroupHasTakenIsRecorded: the template a group driver
// says its group has taken goes to status.group.templateHash (which the
// nodeset controller compares with the set's for a Managed rollout), and
// stays there when a later call fails; a value the schema would refuse is
// left out, so the rest of the status is still written.
func TestTheTemplateAGroupHasTakenIsRecorded(t *testing.T) {
	g := newGroupFixture(t, 1)
	g.group.templateHash = "abc123"
	require.NoError(t, g.syncGroup())
	assert.Equal(t, "abc123", g.getSet().Status.Group.TemplateHash)

	require.NoError(t, g.setIndexer.Update(g.getSet()))
	g.group.ensureErr = errors.New("throttled")
	require.Error(t, g.syncGroup())
	group := g.getSet().Status.Group
	assert.Equal(t, "throttled", group.Message)
	assert.Equal(t, "abc123", group.TemplateHash, "a failed call says nothing of the template")

	require.NoError(t, g.setIndexer.Update(g.getSet()))
	g.group.ensureErr = nil
	g.group.templateHash = strings.Repeat("x", 65)
	require.NoError(t, g.syncGroup())
	group = g.getSet().Status.Group
	assert.Empty(t, group.TemplateHash, "no set's template")
	assert.Empty(t, group.Message, "the status is written all the same")
}

// TestARefusedConfigurationIsRecorded: a configuration the cloud refused
// (the driver's ErrInvalidConfiguration) records the template refused in
// status.group.refusedTemplateHash, with the error in the message; any
// other failure, or the next call that succeeds, clears it.
func TestARefusedConfigurationIsRecorded(t *testing.T) {
	g := newGroupFixture(t, 1)
	g.group.templateHash = "abc123"
	require.NoError(t, g.syncGroup())
	assert.Empty(t, g.getSet().Status.Group.RefusedTemplateHash)

	require.NoError(t, g.setIndexer.Update(g.getSet()))
	g.group.ensureErr = fmt.Errorf("updating the version of node group ng: %w: InvalidParameterException: version 1.99", drivers.ErrInvalidConfiguration)
	require.NoError(t, g.syncGroup(), "retried in a minute, or when the class or the set changes")
	group := g.getSet().Status.Group
	require.NotEmpty(t, group.RefusedTemplateHash)
	assert.Equal(t, g.group.ensured[len(g.group.ensured)-1].TemplateHash, group.RefusedTemplateHash, "the template the node controller asked for")
	assert.Contains(t, group.Message, "InvalidParameterException: version 1.99")
	assert.Equal(t, "abc123", group.TemplateHash, "a refused change leaves the group where it was")

	require.NoError(t, g.setIndexer.Update(g.getSet()))
	g.group.ensureErr = errors.New("connection refused")
	require.Error(t, g.syncGroup())
	assert.Empty(t, g.getSet().Status.Group.RefusedTemplateHash, "a failure that is no refusal")

	require.NoError(t, g.setIndexer.Update(g.getSet()))
	g.group.ensureErr = fmt.Errorf("%w: refused again", drivers.ErrInvalidConfiguration)
	require.NoError(t, g.syncGroup())
	require.NotEmpty(t, g.getSet().Status.Group.RefusedTemplateHash)
	require.NoError(t, g.setIndexer.Update(g.getSet()))
	g.group.ensureErr = nil
	require.NoError(t, g.syncGroup())
	assert.Empty(t, g.getSet().Status.Group.RefusedTemplateHash, "taken at last")
	assert.Empty(t, g.getSet().Status.Group.Message)
}

// TestAProblemTheGroupReportsIsAWarningEventOnceEachTimeItChanges: a launch
// AWS could not make reaches status.group.message and, once, a GroupFailed
// Event, which is what alerts watch.
func TestAProblemTheGroupReportsIsAWarningEventOnceEachTimeItChanges(t *testing.T) {
	g := newGroupFixture(t, 1)
	groupFailed := func() (out []string) {
		for _, e := range g.events() {
			if strings.Contains(e, ReasonGroupFailed) {
				out = append(out, e)
			}
		}
		return out
	}
	require.NoError(t, g.syncGroup())
	assert.Empty(t, groupFailed(), "a group with no problem")

	g.group.message = "Launching a new EC2 instance. Status Reason: We currently do not have sufficient capacity"
	require.NoError(t, g.syncGroup())
	name := g.getSet().Status.Group.Name
	assert.Equal(t, []string{"Warning GroupFailed Cloud group " + name + ": " + g.group.message}, groupFailed())
	assert.Equal(t, g.group.message, g.getSet().Status.Group.Message)

	require.NoError(t, g.syncGroup())
	assert.Empty(t, groupFailed(), "the same problem at the next poll is no news")

	g.group.message = "Launching a new EC2 instance. Status Reason: The requested configuration is currently not supported"
	require.NoError(t, g.syncGroup())
	assert.Len(t, groupFailed(), 1, "another problem is")

	g.group.message = ""
	require.NoError(t, g.syncGroup())
	assert.Empty(t, groupFailed(), "a problem gone is no warning")
	assert.Empty(t, g.getSet().Status.Group.Message)
}

// TestGroupWaitsForTheVerdictOnAClassEdit: a new generation of the class is
// not acted on until a node controller has validated it.
func TestGroupWaitsForTheVerdictOnAClassEdit(t *testing.T) {
	g := newGroupFixture(t, 2)
	class := asgTestClass()
	class.Generation = 2 // edited; the Valid condition is still of generation 1
	require.NoError(t, g.classIndexer.Update(class))
	require.NoError(t, g.syncGroup())
	assert.Empty(t, g.group.ensured, "the edit is not validated yet")

	class = class.DeepCopy()
	class.Status.Conditions[0].ObservedGeneration = 2
	require.NoError(t, g.classIndexer.Update(class))
	require.NoError(t, g.syncGroup())
	assert.NotEmpty(t, g.group.ensured, "validated: the group follows")
}

// TestAnEditNotYetJudgedNeverReachesTheGroup: a tenant's edit of an
// Accepted NodeSet reaches the node controller before the nodeset
// controller's verdict on it; a kubelet flag that would label the Nodes
// with another tenant's name is not passed to the cloud group on the
// strength of the old Accepted.
func TestAnEditNotYetJudgedNeverReachesTheGroup(t *testing.T) {
	g := newGroupFixture(t, 2)
	class := asgTestClass()
	class.Spec.TenantOverrides = []string{"bootstrap.kubeletExtraArgs"}
	require.NoError(t, g.classIndexer.Update(class))
	set := g.getSet()
	set.Generation = 2 // Accepted is of generation 0, before the edit
	set.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
		KubeletExtraArgs: []string{"--node-labels=nodeset.dev/tenant=victim"}}}
	require.NoError(t, g.setIndexer.Update(set))
	require.NoError(t, g.syncGroup())
	assert.Empty(t, g.group.ensured, "the edit is not acted on")

	set.Spec.EKSAutoscalingGroup.Bootstrap.KubeletExtraArgs = []string{"--max-pods=20"}
	require.NoError(t, g.setIndexer.Update(set))
	require.NoError(t, g.syncGroup())
	require.NotEmpty(t, g.group.ensured, "an edit within the rules is")
}

// TestABrokenEditNeverKeepsAMachineFromGoing: a NodeSet edited to set a
// field its class keeps gets nothing new, but its deleted Nodes' machines
// are still terminated, with the class's own settings.
func TestABrokenEditNeverKeepsAMachineFromGoing(t *testing.T) {
	g := newGroupFixture(t, 1)
	require.NoError(t, g.syncGroup())
	set := g.getSet()
	set.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{InstanceType: "p5.48xlarge"} // not in tenantOverrides
	require.NoError(t, g.setIndexer.Update(set))
	node := g.get("ip-100")
	node.DeletionTimestamp = &metav1.Time{Time: testNow}
	_, err := g.kube.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{})
	require.NoError(t, err)
	g.updateCache(g.get("ip-100"))
	require.NoError(t, g.sync("ip-100"))
	assert.Len(t, g.group.terminated, 1, "the machine went")
	assert.NotContains(t, g.get("ip-100").Finalizers, nodesetv1alpha1.FinalizerTermination)
}

// TestADeletedSetNeverDeletesAnothersGroup: the group under a deleted
// set's name belongs to another NodeSet (its predecessor under the same
// name, whose Nodes may still run in it): the set goes, the group stays.
func TestADeletedSetNeverDeletesAnothersGroup(t *testing.T) {
	g := newGroupFixture(t, 1)
	require.NoError(t, g.syncGroup())
	groupName := g.group.ensured[0].Name
	g.group.groups[groupName].Owner.UID = "uid-of-the-predecessor"
	set := g.getSet()
	set.DeletionTimestamp = &metav1.Time{Time: testNow}
	require.NoError(t, g.setIndexer.Update(set))
	g.deleteCache("ip-100")
	require.NoError(t, g.controller.syncGroup(context.Background(), "team-a/web"))
	assert.Empty(t, g.group.deleted, "another's group is left alone")
	assert.Contains(t, g.group.groups, groupName)
	assert.NotContains(t, g.getSet().Finalizers, nodesetv1alpha1.FinalizerGroup, "the set is not held for it")
	assert.Contains(t, strings.Join(g.events(), "\n"), "belongs to NodeSet team-a/web (UID uid-of-the-predecessor)")
}

// panickingGroupDriver panics in EnsureGroup for the groups of one
// NodeSet, as a group driver with a bug may on a class or NodeSet it did
// not expect.
type panickingGroupDriver struct {
	*recordingGroupDriver
	set string
}

func (d panickingGroupDriver) EnsureGroup(ctx context.Context, g drivers.Group) (drivers.GroupStatus, error) {
	if g.Owner.Name == d.set {
		panic("driver bug: no launch template for NodeSet " + g.Owner.Name)
	}
	return d.recordingGroupDriver.EnsureGroup(ctx, g)
}

// TestAGroupDriverThatPanicsIsContainedAndTold: a group driver's panic
// fails the sync of that NodeSet's group only, on the controller's own
// workers: it is told on the NodeSet and retried with backoff, and the
// group of another NodeSet of the class is still kept in step.
func TestAGroupDriverThatPanicsIsContainedAndTold(t *testing.T) {
	g := newGroupFixture(t, 2)
	g.controller.registry = drivers.Registry{g.group.Name(): panickingGroupDriver{recordingGroupDriver: g.group, set: "web"}}
	other := g.set.DeepCopy()
	other.Name, other.UID = "api", "uid-api"
	created, err := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Create(context.Background(), other, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, g.setIndexer.Add(created))

	var syncErr error
	require.NotPanics(t, func() { syncErr = g.controller.syncGroup(context.Background(), "team-a/web") })
	require.Error(t, syncErr)
	assert.Contains(t, syncErr.Error(), "panicked: driver bug: no launch template for NodeSet web")
	events := strings.Join(g.events(), "\n")
	assert.Contains(t, events, "Warning "+ReasonSyncPanicked)
	assert.Contains(t, events, "retried with backoff")

	// On the controller's workers, as Run starts them.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g.controller.groups.Add("team-a/web")
	g.controller.groups.Add("team-a/api")
	component.StartWorkers(ctx, g.controller.groups, 2, "nodeset", g.controller.syncGroup)
	require.Eventually(t, func() bool {
		g.events() // keep the recorder's buffer from filling with the retries' Events
		g.group.mu.Lock()
		defer g.group.mu.Unlock()
		return g.controller.groups.NumRequeues("team-a/web") >= 2 &&
			slices.ContainsFunc(g.group.ensured, func(e drivers.Group) bool { return e.Owner.Name == "api" })
	}, 10*time.Second, 10*time.Millisecond, "the panicking group retried with backoff, the other group ensured")
}

// TestAZeroLimitAllowsTheGroupNoMachine: spec.limits.maxNodes: 0 (or
// maxNodesPerNamespace: 0) means no nodes, as the webhook and the nodeset
// controller read it (plan.Room), not "unlimited": the group of a set over
// it is kept at 0 machines; an unset limit is no limit.
func TestAZeroLimitAllowsTheGroupNoMachine(t *testing.T) {
	for _, tt := range []struct {
		name   string
		limits *nodesetv1alpha1.NodeClassLimits
		want   int32
	}{
		{"maxNodes 0", &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](0)}, 0},
		{"maxNodesPerNamespace 0", &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](0)}, 0},
		{"no limit set", &nodesetv1alpha1.NodeClassLimits{}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroupFixture(t, 2)
			class := asgTestClass()
			class.Spec.Limits = tt.limits
			require.NoError(t, g.classIndexer.Update(class))
			set := g.getSet()
			if tt.want == 0 {
				// As the nodeset controller reports a set over its limits.
				set.Status.Conditions[0].Status, set.Status.Conditions[0].Reason = metav1.ConditionFalse, nodesetv1alpha1.ReasonLimitExceeded
				require.NoError(t, g.setIndexer.Update(set))
			}
			require.NoError(t, g.syncGroup())
			require.Len(t, g.group.ensured, 1, "a set over its limits keeps its group in step, capped")
			assert.Equal(t, tt.want, g.group.ensured[0].Replicas)
			nodes, err := g.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
			require.NoError(t, err)
			assert.Len(t, nodes.Items, int(tt.want))
		})
	}
}

// TestAMachinesNodeCarriesWhatItsDriverKnows: the kubelet applies its
// --node-labels and --register-with-taints only to a Node it creates, and
// a cloud controller manager labels only Nodes it initializes; nodeset
// makes each machine's Node first, so it puts there the zone, instance
// type and group labels and taints its driver reports. Its own labels
// and the templates' are not overridden.
func TestAMachinesNodeCarriesWhatItsDriverKnows(t *testing.T) {
	g := newGroupFixture(t, 1)
	g.group.machineLabels = map[string]string{corev1.LabelTopologyZone: "zone-a", corev1.LabelInstanceTypeStable: "m7g.large",
		"eks.amazonaws.com/nodegroup": "web", nodesetv1alpha1.LabelNodeSet: "someone-else"}
	g.group.machineTaints = []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	require.NoError(t, g.syncGroup())
	made := g.get("ip-100")
	assert.Equal(t, "zone-a", made.Labels[corev1.LabelTopologyZone])
	assert.Equal(t, "m7g.large", made.Labels[corev1.LabelInstanceTypeStable])
	assert.Equal(t, "web", made.Labels["eks.amazonaws.com/nodegroup"])
	assert.Equal(t, "web", made.Labels[nodesetv1alpha1.LabelNodeSet], "nodeset's own labels stay nodeset's")
	assert.Contains(t, made.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
	assert.True(t, nodeutil.HasStartupTaint(made))
}
