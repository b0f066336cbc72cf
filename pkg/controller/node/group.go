package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/plan"
	"nodeset.dev/nodeset/pkg/redact"
	"nodeset.dev/nodeset/pkg/resolve"
)

// Event reasons of group drivers.
const (
	ReasonGroupFailed  = "GroupFailed"
	ReasonGroupDeleted = "GroupDeleted"
	ReasonGroupUpdate  = "GroupUpdate"
	ReasonNodeCreated  = "NodeCreated"
	ReasonNodeAdopted  = "NodeAdopted"
	ReasonNodeConflict = "NodeConflict"
	ReasonMachineGone  = "MachineGone"
)

// providerIDIndex indexes Nodes by spec.providerID.
const providerIDIndex = "providerID"

func indexByProviderID(obj any) ([]string, error) {
	node, ok := obj.(*corev1.Node)
	if !ok || node.Spec.ProviderID == "" {
		return nil, nil
	}
	return []string{node.Spec.ProviderID}, nil
}

// terminatedMemory is how long a terminated machine is remembered, so that
// a look at the group taken before the termination does not bring its Node
// back.
const terminatedMemory = 10 * time.Minute

// groupOf returns the group driver serving the class of a NodeSet, if any.
func (c *Controller) groupOf(set *nodesetv1alpha1.NodeSet) (*nodesetv1alpha1.NodeClass, drivers.GroupDriver, bool) {
	class, err := c.classes.Get(set.Spec.NodeClassName)
	if err != nil {
		return nil, nil, false
	}
	driver, ok := c.registry.Group(class.Spec.Driver)
	return class, driver, ok
}

func (c *Controller) enqueueGroup(obj any) {
	set, ok := nodeutil.EventObject[*nodesetv1alpha1.NodeSet](obj)
	if !ok {
		return
	}
	if _, _, ok := c.groupOf(set); ok {
		c.groups.Add(set.Namespace + "/" + set.Name)
	}
}

// enqueueNodeGroup syncs the group of a group driver's Node when the Node
// comes or goes: a Node deleted by its NodeSet lowers the group, and the
// group may have to be raised again.
func (c *Controller) enqueueNodeGroup(node *corev1.Node) {
	if node.Annotations[nodesetv1alpha1.AnnotationGroup] == "" {
		return
	}
	if ns, name, ok := nodeutil.NodeSetOf(node.Labels); ok {
		c.groups.Add(ns + "/" + name)
	}
}

// syncGroup keeps the cloud group of a NodeSet in step: its size raised to
// what the set needs (never lowered here), a Node for every machine the
// group reports, Nodes of machines that left deleted, the group's state in
// status.group, and on deletion the group deleted once its Nodes are gone.
// As for a Node's sync, a panic (a group driver's bug on a class or NodeSet
// it did not expect) fails this NodeSet's sync alone, retried with backoff
// and told on the NodeSet, and the other groups and Nodes go on.
func (c *Controller) syncGroup(ctx context.Context, key string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = c.panicked(ctx, r, "sync of the cloud group of NodeSet "+key, "nodeset", key)
			namespace, name, splitErr := cache.SplitMetaNamespaceKey(key)
			if splitErr != nil {
				return
			}
			if set, getErr := c.sets.NodeSets(namespace).Get(name); getErr == nil {
				c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonSyncPanicked, "%v; retried with backoff", err)
			}
		}
	}()
	// Logged by the worker: scrubbed, as a Node sync's error is.
	return c.scrubbedError(c.reconcileGroup(ctx, key))
}

func (c *Controller) reconcileGroup(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	cached, err := c.sets.NodeSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.heldGroups.forget(key)
		return c.removeGoneSetsGroup(ctx, key)
	}
	if err != nil {
		return err
	}
	class, driver, ok := c.groupOf(cached)
	if !ok {
		return nil
	}
	set := cached.DeepCopy()
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "nodeset", key, "driver", driver.Name())
	ctx = klog.NewContext(ctx, logger)
	nodes, err := c.nodes.List(resolve.Selector(set))
	if err != nil {
		return err
	}
	// A Node a kubelet registered with the set's labels and nodeset's
	// finalizer is none of the group's, before it is marked so too.
	nodes = nodeutil.WithoutStrangers(nodes, class, c.opts.Now())
	if c.strayed(namespace, name, set.Spec.NodeClassName) {
		// A Node of the set relabelled by its kubelet: the group waits for
		// its labels to be put back (restoreLabels).
		logger.V(2).Info("A Node of the set is relabelled; its cloud group waits for its labels to be back")
		c.groups.AddAfter(key, 2*time.Second)
		return nil
	}
	owner := drivers.Owner{Cluster: c.opts.Cluster, Namespace: namespace, Name: name, UID: set.UID}
	groupName := drivers.KeepGroupName(driver, owner, madeGroupName(set))
	credentials, err := c.credentials(ctx, class)
	if err != nil {
		c.recorder.Event(set, corev1.EventTypeWarning, ReasonGroupFailed, err.Error())
		return err
	}
	if set.DeletionTimestamp != nil {
		c.heldGroups.forget(key)
		return c.deleteGroup(ctx, set, drivers.Class{Name: class.Name, Spec: class.Spec, Credentials: credentials}, driver, groupName, nodes)
	}
	if accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted); accepted == nil ||
		(accepted.Status != metav1.ConditionTrue && accepted.Reason != nodesetv1alpha1.ReasonLimitExceeded) {
		// A verdict the hold was waiting for: a later hold is news.
		c.heldGroups.forget(key)
		return nil // the nodeset controller says why; the group waits (over its limits, it is capped below)
	}
	if valid := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid); valid == nil ||
		valid.ObservedGeneration != class.Generation || valid.Status != metav1.ConditionTrue {
		// A class edit not validated yet: the group waits for the verdict.
		c.groups.AddAfter(key, 2*time.Second)
		return nil
	}
	spec, err := c.provisioningSpec(class, set)
	if err != nil {
		// Reported by the nodeset controller as Accepted=False; the set's
		// Accepted may still be of the generation before the tenant's edit.
		return nil
	}
	hash := resolve.TemplateHash(&spec, set)
	if c.holdGroup(ctx, class, set, groupName, hash, nodes) {
		return nil
	}
	if !slices.Contains(set.Finalizers, nodesetv1alpha1.FinalizerGroup) {
		// Before the group exists: a NodeSet deleted from here on waits for
		// its group to go.
		updated, err := c.patchSetFinalizers(ctx, set, append(slices.Clone(set.Finalizers), nodesetv1alpha1.FinalizerGroup))
		if err != nil {
			return err
		}
		set = updated
	}
	size, err := c.sizeGroup(class, set, groupName, hash, nodes)
	if err != nil {
		return err
	}
	// The group's minimum is 0, whatever the set's: Auto Scaling refuses a
	// termination with decrement that would take the group below its
	// minimum, and that is the only way nodeset lowers a group (a scale-down,
	// a replacement, an interrupted or retiring instance). A minimum never
	// makes Auto Scaling pick a victim; the desired size is what nodeset keeps.
	minSize, maxSize := int32(0), size
	if a := set.Spec.Autoscaling; a != nil {
		maxSize = max(a.MaxReplicas, size)
	}
	groupClass := drivers.Class{Name: class.Name, Spec: spec, Credentials: credentials}
	if err := c.mayAct(opEnsureGroup); err != nil {
		return err
	}
	start := c.opts.Now()
	status, err := driver.EnsureGroup(ctx, drivers.Group{
		Name: groupName, Owner: owner, Class: groupClass,
		Replicas: size, MinReplicas: minSize, MaxReplicas: maxSize, TemplateHash: hash,
		Labels: resolve.NodeLabels(&spec, class.Name, set, hash), Taints: resolve.NodeTaints(&spec, set),
		ManagedRollout: set.Spec.Strategy.Type == nodesetv1alpha1.ManagedStrategy, UpdateID: lastUpdateID(set),
	})
	c.metrics.driverCall(driver.Name(), opEnsureGroup, start, err)
	if err != nil {
		c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonGroupFailed, "Driver %s could not bring cloud group %s to %d machine(s): %v",
			driver.Name(), groupName, size, err)
		refused := errors.Is(err, drivers.ErrInvalidConfiguration)
		group := nodesetv1alpha1.GroupStatus{Name: groupName, Message: err.Error()}
		if refused {
			group.RefusedTemplateHash = groupHash(hash)
		}
		if patchErr := c.patchGroupStatus(ctx, set, group, true); patchErr != nil {
			logger.V(2).Info("Could not record the group error", "err", c.scrubbedError(patchErr))
		}
		if refused {
			c.groups.AddAfter(key, time.Minute) // a class or set change comes sooner
			return nil
		}
		return err
	}
	if err := c.reconcileGroupNodes(ctx, set, class.Name, &spec, hash, groupName, driver, groupClass, status, nodes); err != nil {
		return err
	}
	if old := set.Status.Group; status.UpdateID != "" && (old == nil || old.UpdateID != status.UpdateID || old.UpdateStatus != status.UpdateStatus) {
		eventType := corev1.EventTypeNormal
		if plan.UpdateFailed(status.UpdateStatus) {
			eventType = corev1.EventTypeWarning
		}
		c.recorder.Eventf(set, eventType, ReasonGroupUpdate, "Update %s of cloud group %s: %s", status.UpdateID, groupName, status.UpdateStatus)
	}
	if reported := c.groupMessage(status.Message); reported != "" && (set.Status.Group == nil || set.Status.Group.Message != reported) {
		// A problem the group reports (a launch AWS could not make, a
		// health issue), once each time it changes: status.group.message
		// keeps it, and an alert on Warning Events sees it too.
		c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonGroupFailed, "Cloud group %s: %s", groupName, reported)
	}
	desired := status.DesiredSize
	c.groupSizes.set(key, desired)
	if err := c.patchGroupStatus(ctx, set, nodesetv1alpha1.GroupStatus{Name: groupName, State: status.State, DesiredSize: &desired,
		UpdateID: status.UpdateID, UpdateStatus: status.UpdateStatus, Message: status.Message, TemplateHash: groupHash(status.TemplateHash)}, false); err != nil {
		return err
	}
	next := c.opts.GroupPollInterval
	if settling(status, nodes) {
		next = min(next, 2*time.Second)
	}
	c.groups.AddAfter(key, next)
	return nil
}

// holdGroup reports whether the set's cloud group is to be neither made nor
// grown now because the set's namespace may not use its class as the class
// (and, for a class that picks namespaces by a selector, the Namespace)
// is now: its Accepted condition is the NodeSetController's verdict on the
// class it saw last, and a class or Namespace changed since, with the
// webhook away or not, must not see the group grow until that verdict
// comes (then the set is Accepted=False, and the group waits above).
// Only a make or a raise is held: a group that stays as it is, its Nodes,
// and every way down (a Node deleted, the set deleted) go on, so a tenant
// can always give nodes back. A Selector class's Namespace is read from
// the API server, and only when the group would be made or raised (an
// error reading it holds the group too). The hold is told in an Event
// once for each refusal (heldGroups), not at every poll.
func (c *Controller) holdGroup(ctx context.Context, class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet, groupName, hash string, nodes []*corev1.Node) bool {
	key := set.Namespace + "/" + set.Name
	if known, made := c.knownGroupSize(set, class.Name, groupName); made && plan.GroupSize(set, hash, nodes) <= known {
		c.heldGroups.forget(key)
		return false
	}
	why := resolve.NamespaceRefusal(class, set.Namespace, func(namespace string) (map[string]string, error) {
		ns, err := c.kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return ns.Labels, nil
	})
	if why == "" {
		c.heldGroups.forget(key)
		return false
	}
	message := resolve.NamespaceNotAllowedMessage(class, set.Namespace, why)
	klog.FromContext(ctx).V(2).Info("Cloud group held: the NodeSet's namespace may not use its class", "group", groupName, "why", message)
	if told, ok := c.heldGroups.get(set); !ok || told != message {
		c.heldGroups.set(set, message)
		c.recorder.Eventf(set, corev1.EventTypeWarning, nodesetv1alpha1.ReasonNamespaceNotAllowed,
			"Cloud group %s is neither made nor grown: %s", groupName, message)
	}
	// The NodeSetController's verdict (a status write) or a change of the
	// class brings the set back; a Namespace relabelled back does not.
	c.groups.AddAfter(key, c.opts.GroupPollInterval)
	return true
}

// knownGroupSize is the size the set's cloud group groupName is known to
// have: what the set's status.group records (written once the group
// reported it), or less if this controller last saw it smaller; made is
// false when the status records no such group.
func (c *Controller) knownGroupSize(set *nodesetv1alpha1.NodeSet, class, groupName string) (size int32, made bool) {
	g := set.Status.Group
	if g == nil || g.DesiredSize == nil || g.Name != groupName {
		return 0, false
	}
	size = *g.DesiredSize
	if e, ok := c.groupSizes.get(set.Namespace + "/" + set.Name); ok && e.uid == set.UID && e.group == groupName && e.class == class {
		size = min(size, e.size)
	}
	return size, true
}

// groupSizes remembers, for each NodeSet (namespace/name) whose cloud group
// this controller sized, that group and the size it last gave it, until the
// group is known gone. The limits count a group by its set's
// status.group.desiredSize, which is written after the group is brought to
// it and reaches the cache later still: two sets of one class sized in that
// window (two workers at once, or one right after the other) would each see
// the whole room, and the groups are never lowered for it. Sizing a group
// and writing its size down here take turns. A set deleted before its group
// (its finalizers removed by hand) is no longer in the cache at all: its
// group counts by what is written here until it is deleted
// (removeGoneSetsGroup).
type groupSizes struct {
	mu    sync.Mutex
	sizes map[string]groupSize
}

type groupSize struct {
	class, group string
	uid          types.UID
	size         int32
}

func (g *groupSizes) get(key string) (groupSize, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.sizes[key]
	return e, ok
}

// set writes down the size the set's group was brought to.
func (g *groupSizes) set(key string, size int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.sizes[key]; ok {
		e.size = size
		g.sizes[key] = e
	}
}

func (g *groupSizes) forget(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.sizes, key)
}

// sizeGroup is cappedGroupSize, written down as the size of the set's
// group, groupName, before any other group is sized.
func (c *Controller) sizeGroup(class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet, groupName, hash string, nodes []*corev1.Node) (int32, error) {
	c.groupSizes.mu.Lock()
	defer c.groupSizes.mu.Unlock()
	size, err := c.cappedGroupSize(class, set, hash, nodes)
	if err != nil {
		return 0, err
	}
	key := set.Namespace + "/" + set.Name
	e, ok := c.groupSizes.sizes[key]
	if !ok || e.uid != set.UID || e.group != groupName || e.class != class.Name {
		e = groupSize{class: class.Name, group: groupName, uid: set.UID}
	}
	// A group is never lowered here: one bigger than size stays so.
	e.size = max(e.size, size)
	c.groupSizes.sizes[key] = e
	return size, nil
}

// withGroupSizes is the class's sets with each one's
// status.group.desiredSize as this controller last gave it, where it
// differs from what the cache shows (those changed are copies), and the
// sets of the class that are gone with their groups still there, as the
// sizes last given (sets are the cache's). Called with groupSizes.mu held.
func (c *Controller) withGroupSizes(sets []*nodesetv1alpha1.NodeSet, class string) []*nodesetv1alpha1.NodeSet {
	out := make([]*nodesetv1alpha1.NodeSet, 0, len(sets))
	listed := map[string]bool{}
	for _, set := range sets {
		key := set.Namespace + "/" + set.Name
		listed[key] = true
		e, ok := c.groupSizes.sizes[key]
		if !ok || set.Status.Group != nil && set.Status.Group.DesiredSize != nil && *set.Status.Group.DesiredSize == e.size {
			out = append(out, set)
			continue
		}
		copied := *set
		group := nodesetv1alpha1.GroupStatus{}
		if set.Status.Group != nil {
			group = *set.Status.Group
		}
		group.DesiredSize = &e.size
		copied.Status.Group = &group
		out = append(out, &copied)
	}
	for key, e := range c.groupSizes.sizes {
		if listed[key] || e.class != class {
			continue
		}
		namespace, name, _ := cache.SplitMetaNamespaceKey(key)
		out = append(out, &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: e.uid},
			Spec:   nodesetv1alpha1.NodeSetSpec{NodeClassName: class},
			Status: nodesetv1alpha1.NodeSetStatus{Group: &nodesetv1alpha1.GroupStatus{Name: e.group, DesiredSize: ptr.To(e.size)}}})
	}
	return out
}

// removeGoneSetsGroup deletes the cloud group of a NodeSet that is gone
// while its group is not: its group finalizer was removed by hand. Left to
// the orphan collection, the group would run its machines for
// --orphan-min-age, uncounted by the class limits once the set is gone, and
// a tenant could make such groups one after another past any limit. Its
// Nodes go first (the nodeset controller deletes a gone set's Nodes, each
// drained, its machine terminated in the group); then the group, if it is
// still the one this controller sized for that set. What this controller
// has not sized since it started is the orphan collection's.
func (c *Controller) removeGoneSetsGroup(ctx context.Context, key string) error {
	e, ok := c.groupSizes.get(key)
	if !ok {
		return nil
	}
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	owner := drivers.Owner{Cluster: c.opts.Cluster, Namespace: namespace, Name: name, UID: e.uid}
	if gone, known := c.nodeSetGone(ctx, owner); !known {
		return fmt.Errorf("NodeSet %s: cannot tell whether it is gone", key)
	} else if !gone {
		return nil // the cache is behind: the set's own syncs go on
	}
	class, err := c.classes.Get(e.class)
	if err != nil {
		c.groupSizes.forget(key) // the class is gone: the orphan collection's
		return nil
	}
	driver, ok := c.registry.Group(class.Spec.Driver)
	if !ok {
		c.groupSizes.forget(key)
		return nil
	}
	set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	nodes, err := c.nodes.List(resolve.Selector(set))
	if err != nil {
		return err
	}
	if len(nodeutil.WithoutStrangers(nodes, class, c.opts.Now())) > 0 {
		c.groups.AddAfter(key, 2*time.Second)
		return nil
	}
	credentials, err := c.credentials(ctx, class)
	if err != nil {
		return err
	}
	groupClass := drivers.Class{Name: class.Name, Spec: class.Spec, Credentials: credentials}
	logger := klog.FromContext(ctx)
	start := c.opts.Now()
	found, err := driver.DescribeGroup(ctx, groupClass, e.group)
	c.metrics.driverCall(driver.Name(), opDescribeGroup, start, err)
	switch {
	case errors.Is(err, drivers.ErrNotFound):
		c.groupSizes.forget(key)
		return nil
	case err != nil:
		return err
	case !found.Owner.Matches(owner):
		c.groupSizes.forget(key)
		return nil
	}
	if err := c.mayAct(opDeleteGroup); err != nil {
		return err
	}
	start = c.opts.Now()
	err = driver.DeleteGroup(ctx, groupClass, e.group)
	c.metrics.driverCall(driver.Name(), opDeleteGroup, start, err)
	if errors.Is(err, drivers.ErrInProgress) {
		c.groups.AddAfter(key, 2*time.Second)
		return nil
	}
	if err != nil {
		return err
	}
	logger.Info("Deleted the cloud group of a NodeSet deleted before it", "group", e.group, "machines", len(found.Machines))
	c.groupSizes.forget(key)
	return nil
}

// cappedGroupSize is the size the set's group should have (plan.GroupSize),
// no more than its class's limits allow beside everything else of the class
// (plan.CountUsage, with the unseen instances of the other groups). The
// group is never lowered here, so a cap below its size changes nothing.
func (c *Controller) cappedGroupSize(class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet, hash string, nodes []*corev1.Node) (int32, error) {
	size := plan.GroupSize(set, hash, nodes)
	if !plan.Limited(class) {
		return size, nil
	}
	classNodes, err := c.nodes.List(nodeutil.ClassSelector(class.Name))
	if err != nil {
		return 0, err
	}
	sets, err := c.sets.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	others := plan.CountUsage(classNodes, plan.UnseenGroupMachines(c.withGroupSizes(sets, class.Name), class.Name, classNodes), set.Namespace, set.Namespace+"/"+set.Name)
	room, _ := plan.Room(class, set.Namespace, others)
	return int32(min(int64(size), room)), nil
}

// lastUpdateID is the driver-native update the set's status records, if it
// may still be running.
func lastUpdateID(set *nodesetv1alpha1.NodeSet) string {
	if g := set.Status.Group; g != nil && g.UpdateStatus != nodesetv1alpha1.GroupUpdateStatusSuccessful && !plan.UpdateFailed(g.UpdateStatus) {
		return g.UpdateID
	}
	return ""
}

// settling reports whether machines are coming or going, so the group is
// looked at again soon.
func settling(status drivers.GroupStatus, nodes []*corev1.Node) bool {
	if int(status.DesiredSize) != len(status.Machines) || len(nodes) != len(status.Machines) {
		return true
	}
	for _, m := range status.Machines {
		if m.State != drivers.MachineRunning || m.Name == "" {
			return true
		}
	}
	return status.UpdateStatus == nodesetv1alpha1.GroupUpdateStatusInProgress || (status.State != "" && status.State != "ACTIVE" && status.State != "DEGRADED")
}

// deleteGroup deletes the group of a deleted NodeSet once the NodeSet's
// Nodes are gone (each drained and its machine terminated), then lets the
// NodeSet go.
func (c *Controller) deleteGroup(ctx context.Context, set *nodesetv1alpha1.NodeSet, class drivers.Class, driver drivers.GroupDriver, groupName string, nodes []*corev1.Node) error {
	if !slices.Contains(set.Finalizers, nodesetv1alpha1.FinalizerGroup) {
		return nil
	}
	key := set.Namespace + "/" + set.Name
	if len(nodes) > 0 {
		// The nodeset controller deletes them; each is drained first.
		c.groups.AddAfter(key, 2*time.Second)
		return nil
	}
	owner := drivers.Owner{Cluster: c.opts.Cluster, Namespace: set.Namespace, Name: set.Name, UID: set.UID}
	start := c.opts.Now()
	found, err := driver.DescribeGroup(ctx, class, groupName)
	c.metrics.driverCall(driver.Name(), opDescribeGroup, start, err)
	switch {
	case errors.Is(err, drivers.ErrNotFound):
	case err != nil:
		return err
	case !found.Owner.Matches(owner):
		// Another's group under this set's name (this set's predecessor,
		// one made by hand): never this set's to delete. Its own set, or
		// the orphan collection, takes it away.
		c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonGroupFailed,
			"Cloud group %s belongs to NodeSet %s/%s (UID %s) of cluster %s, not to this one: it is left alone", groupName,
			found.Owner.Namespace, found.Owner.Name, found.Owner.UID, found.Owner.Cluster)
		return c.releaseGroup(ctx, set)
	}
	start = c.opts.Now()
	if err := c.mayAct(opDeleteGroup); err != nil {
		return err
	}
	err = driver.DeleteGroup(ctx, class, groupName)
	c.metrics.driverCall(driver.Name(), opDeleteGroup, start, err)
	if errors.Is(err, drivers.ErrInProgress) {
		c.groups.AddAfter(key, 2*time.Second)
		return nil
	}
	if err != nil {
		c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonGroupFailed, "Driver %s could not delete cloud group %s: %v", driver.Name(), groupName, err)
		return err
	}
	c.recorder.Eventf(set, corev1.EventTypeNormal, ReasonGroupDeleted, "Deleted cloud group %s", groupName)
	return c.releaseGroup(ctx, set)
}

// releaseGroup removes the set's group finalizer: its group is gone, or
// was never its own.
func (c *Controller) releaseGroup(ctx context.Context, set *nodesetv1alpha1.NodeSet) error {
	_, err := c.patchSetFinalizers(ctx, set, nodeutil.WithoutString(set.Finalizers, nodesetv1alpha1.FinalizerGroup))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// patchSetFinalizers writes a set's finalizers and nothing else, if the set
// has not changed since it was read (nodeutil.GuardedMergePatch): a
// finalizer added meanwhile is never lost.
func (c *Controller) patchSetFinalizers(ctx context.Context, set *nodesetv1alpha1.NodeSet, finalizers []string) (*nodesetv1alpha1.NodeSet, error) {
	patch := nodeutil.GuardedMergePatch(set.ResourceVersion, map[string]any{"finalizers": finalizers}, nil)
	return c.opts.NodeSets.NodesetV1alpha1().NodeSets(set.Namespace).Patch(ctx, set.Name, types.MergePatchType, patch, metav1.PatchOptions{})
}

// groupMessageLimit bounds status.group.message: a driver's error or what
// a cloud says of its group (each health issue of an EKS node group with
// every instance it names, each error of a failed update) may be of any
// length, and the NodeSet would keep it whole.
const groupMessageLimit = 4096

// groupMessage is text from a group driver as status.group.message and
// the GroupFailed Event tell it: scrubbed of credentials, then bounded.
func (c *Controller) groupMessage(text string) string {
	return redact.Cut(c.scrub(text), groupMessageLimit)
}

// patchGroupStatus writes status.group when it changed (only that field, so
// it never races the nodeset controller's writes of the rest). keepState
// leaves the state and size as they were, for errors; refusedTemplateHash
// is always the last call's.
func (c *Controller) patchGroupStatus(ctx context.Context, set *nodesetv1alpha1.NodeSet, group nodesetv1alpha1.GroupStatus, keepState bool) error {
	if old := set.Status.Group; old != nil && keepState {
		group.State, group.DesiredSize, group.UpdateID, group.UpdateStatus = old.State, old.DesiredSize, old.UpdateID, old.UpdateStatus
		group.TemplateHash = old.TemplateHash
	}
	group.Message = c.groupMessage(group.Message)
	if old := set.Status.Group; old != nil && old.Name == group.Name && old.State == group.State && old.Message == group.Message &&
		old.UpdateID == group.UpdateID && old.UpdateStatus == group.UpdateStatus && old.TemplateHash == group.TemplateHash && old.RefusedTemplateHash == group.RefusedTemplateHash &&
		(old.DesiredSize == nil) == (group.DesiredSize == nil) && (old.DesiredSize == nil || *old.DesiredSize == *group.DesiredSize) {
		return nil
	}
	fields := map[string]any{"name": group.Name, "state": nullIfEmpty(group.State), "message": nullIfEmpty(group.Message),
		"updateID": nullIfEmpty(group.UpdateID), "updateStatus": nullIfEmpty(group.UpdateStatus), "desiredSize": nil,
		"templateHash": nullIfEmpty(group.TemplateHash), "refusedTemplateHash": nullIfEmpty(group.RefusedTemplateHash)}
	if group.DesiredSize != nil {
		fields["desiredSize"] = *group.DesiredSize
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"group": fields}})
	if err != nil {
		return err
	}
	_, err = c.opts.NodeSets.NodesetV1alpha1().NodeSets(set.Namespace).Patch(ctx, set.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// groupHash is the template hash a cloud group reports, as
// status.group.templateHash may hold it: a value that cannot be one of the
// set's hashes (a tag someone else set, longer than the schema allows) is
// none, so the status write is never refused for it.
func groupHash(h string) string {
	if len(h) > 64 {
		return ""
	}
	return h
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// madeGroupName is the name status.group records for the set's group once
// it was made (with a desiredSize), or "".
func madeGroupName(set *nodesetv1alpha1.NodeSet) string {
	if g := set.Status.Group; g != nil && g.DesiredSize != nil {
		return g.Name
	}
	return ""
}
