package node

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
)

// reconcileGroupNodes makes a Node for every machine of the group (or
// adopts the one its kubelet registered first) and deletes the Nodes of
// machines that left the group.
func (c *Controller) reconcileGroupNodes(ctx context.Context, set *nodesetv1alpha1.NodeSet, className string, spec *nodesetv1alpha1.NodeClassSpec,
	hash, groupName string, driver drivers.GroupDriver, groupClass drivers.Class, status drivers.GroupStatus, nodes []*corev1.Node) error {
	var errs []error
	present := map[string]bool{}
	for _, m := range status.Machines {
		if m.State == drivers.MachineStopping {
			continue
		}
		present[m.ProviderID] = true
		if m.Name == "" || c.recentlyTerminated(m.ProviderID) {
			continue // named once it has an address; or on its way out
		}
		machineHash := m.TemplateHash
		if machineHash == "" {
			machineHash = hash
		}
		if err := c.ensureMachineNode(ctx, set, className, spec, machineHash, groupName, driver.Name(), m); err != nil {
			errs = append(errs, err)
		}
	}
	var gone []*corev1.Node
	for _, n := range nodes {
		if n.DeletionTimestamp != nil || n.Spec.ProviderID == "" || present[n.Spec.ProviderID] {
			continue
		}
		if !slices.Contains(n.Finalizers, nodesetv1alpha1.FinalizerTermination) {
			// Not a Node this controller made or adopted (it would hold
			// it): a kubelet's own, labelled with the set by hand. It is
			// never deleted from here, which would take it away undrained.
			c.recorder.Eventf(n, corev1.EventTypeWarning, ReasonForeignNode,
				"Carries the labels of NodeSet %s/%s, but its machine %s is not in cloud group %s and nodeset did not make it: left alone",
				set.Namespace, set.Name, n.Spec.ProviderID, groupName)
			continue
		}
		gone = append(gone, n)
	}
	if len(gone) > 0 {
		// Looks may be shared and a little old: ask the cloud again before
		// taking a Node away.
		start := c.opts.Now()
		fresh, err := driver.DescribeGroup(ctx, groupClass, groupName)
		c.metrics.driverCall(driver.Name(), opDescribeGroup, start, err)
		if err != nil && !errors.Is(err, drivers.ErrNotFound) {
			return errors.Join(append(errs, err)...)
		}
		live := map[string]bool{}
		for _, m := range fresh.Machines {
			if m.State != drivers.MachineStopping {
				live[m.ProviderID] = true
			}
		}
		for _, n := range gone {
			if live[n.Spec.ProviderID] || c.recentlyTerminated(n.Spec.ProviderID) {
				continue // there, or terminated by its own deletion
			}
			// nodes was listed before the cloud calls: a scale-down may have
			// deleted the Node and terminated its machine meanwhile.
			current, err := c.kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && (current.DeletionTimestamp != nil || current.UID != n.UID)) {
				continue
			}
			c.recorder.Eventf(n, corev1.EventTypeWarning, ReasonMachineGone, "Machine %s left cloud group %s; deleting the Node", n.Spec.ProviderID, groupName)
			uid := n.UID
			err = c.kube.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ensureMachineNode makes the Node of a group's machine: named as the cloud
// named the machine, with its providerID, the set's labels, taints and the
// startup taint. A Node the kubelet registered first (the machine's name,
// with its providerID or none) is adopted instead: it gets the same labels,
// taints, annotations and finalizer. A Node of another set, or of another
// machine, or of another name that claims the machine's providerID, is left
// alone and reported.
func (c *Controller) ensureMachineNode(ctx context.Context, set *nodesetv1alpha1.NodeSet, className string, spec *nodesetv1alpha1.NodeClassSpec,
	hash, groupName, driverName string, m drivers.MachineStatus) error {
	logger := klog.FromContext(ctx)
	want := resolve.NewNode(spec, className, set, hash)
	// What the driver knows of the machine (its zone, its instance type,
	// its group's labels and taints), which no kubelet or cloud controller
	// manager puts on a Node made before it registered; nodeset's own
	// labels and taints, and the templates', come first. Keys a tenant
	// may not set reach the Node this way only as machineKey allows.
	for k, v := range m.Labels {
		if _, ok := want.Labels[k]; !ok && machineKey(set, k, true) {
			want.Labels[k] = v
		}
	}
	for _, t := range m.Taints {
		if !machineKey(set, t.Key, false) {
			continue
		}
		if !slices.ContainsFunc(want.Spec.Taints, func(have corev1.Taint) bool { return have.Key == t.Key && have.Effect == t.Effect }) {
			want.Spec.Taints = append(want.Spec.Taints, t)
		}
	}
	want.Name = m.Name
	want.Spec.ProviderID = m.ProviderID
	created := c.opts.Now()
	if m.CreatedAt > 0 {
		created = time.Unix(m.CreatedAt, 0)
	}
	want.Annotations[nodesetv1alpha1.AnnotationDriver] = driverName
	want.Annotations[nodesetv1alpha1.AnnotationGroup] = groupName
	want.Annotations[nodesetv1alpha1.AnnotationMachineCreated] = created.UTC().Format(time.RFC3339)

	existing := c.nodeByProviderID(m.ProviderID)
	if existing == nil {
		n, err := c.nodes.Get(m.Name)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		case n.Spec.ProviderID != "" && n.Spec.ProviderID != m.ProviderID:
			c.recorder.Eventf(n, corev1.EventTypeWarning, ReasonNodeConflict,
				"Machine %s of cloud group %s has this Node's name, but the Node has providerID %s; no Node is made for the machine", m.ProviderID, groupName, n.Spec.ProviderID)
			return nil
		default:
			existing = n
		}
	}
	if existing == nil {
		node, err := c.kube.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // the kubelet was quicker: adopted on the next sync
		}
		if err != nil {
			return fmt.Errorf("creating Node %s for machine %s: %w", m.Name, m.ProviderID, err)
		}
		c.routine.record(node, ReasonNodeCreated, groupName, fmt.Sprintf("Created for machine %s of cloud group %s", m.ProviderID, groupName))
		logger.V(2).Info("Created Node for a machine of the group", "node", m.Name, "providerID", m.ProviderID)
		return nil
	}
	ours := ownedBy(existing, set.Namespace, set.Name, className)
	if ours && (existing.DeletionTimestamp != nil || slices.Contains(existing.Finalizers, nodesetv1alpha1.FinalizerTermination)) {
		return nil // ours already
	}
	// A Node of the set's machine that nodeset does not hold (its labels
	// set by hand, or its finalizer taken off) is adopted: held, it is
	// drained before its machine goes.
	if (!ours && existing.Labels[nodesetv1alpha1.LabelNodeClass] != "") || existing.DeletionTimestamp != nil {
		c.recorder.Eventf(existing, corev1.EventTypeWarning, ReasonNodeConflict,
			"Machine %s of cloud group %s registered as this Node, which belongs to another NodeSet or is being deleted; left alone", m.ProviderID, groupName)
		return nil
	}
	if existing.Name != m.Name {
		// A kubelet registers only under its own name, but with any
		// providerID it likes: a Node of another name that claims the
		// machine's is another machine's kubelet (one whose credentials a
		// tenant holds, say). Adopted, it would get the set's labels and
		// tenancy, and the set's pods would run where its kubelet runs.
		c.recorder.Eventf(existing, corev1.EventTypeWarning, ReasonNodeConflict,
			"Claims providerID %s of machine %s of cloud group %s, whose Node is named %s; not adopted, and no Node is made for the machine while this one claims it",
			m.ProviderID, m.Name, groupName, m.Name)
		return nil
	}
	// Adopt the kubelet's Node.
	node := existing.DeepCopy()
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	startup := nodeutil.StartupLabels()
	for k, v := range want.Labels {
		if startup[k] == v && nodeutil.IsReady(node) {
			continue // registered already: no registration write would take it off
		}
		node.Labels[k] = v
	}
	for k, v := range want.Annotations {
		node.Annotations[k] = v
	}
	if !slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination) {
		node.Finalizers = append(node.Finalizers, nodesetv1alpha1.FinalizerTermination)
	}
	node.Spec.ProviderID = m.ProviderID
	for _, t := range want.Spec.Taints {
		if nodeutil.IsStartupTaint(t.Key) && nodeutil.IsReady(node) {
			continue // registered already
		}
		if !slices.ContainsFunc(node.Spec.Taints, func(have corev1.Taint) bool { return have.Key == t.Key && have.Effect == t.Effect }) {
			node.Spec.Taints = append(node.Spec.Taints, t)
		}
	}
	if _, err := c.kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("adopting Node %s of machine %s: %w", node.Name, m.ProviderID, err)
	}
	c.recorder.Eventf(node, corev1.EventTypeNormal, ReasonNodeAdopted, "The kubelet registered first; adopted for machine %s of cloud group %s", m.ProviderID, groupName)
	logger.Info("Adopted a kubelet-registered Node", "node", node.Name, "providerID", m.ProviderID)
	return nil
}

// cloudLabels are the labels of the kubernetes.io domain that a cloud
// reports for a machine (what a cloud controller manager sets).
var cloudLabels = map[string]bool{
	corev1.LabelTopologyZone: true, corev1.LabelTopologyRegion: true,
	corev1.LabelFailureDomainBetaZone: true, corev1.LabelFailureDomainBetaRegion: true,
	corev1.LabelInstanceTypeStable: true, corev1.LabelInstanceType: true,
	corev1.LabelArchStable: true, corev1.LabelOSStable: true,
}

// machineKey reports whether a label (or taint) key a group driver reports
// for a machine of set may go on its Node. Keys under nodeset.dev, the
// restricted tenant label and the seal never do: nodeset alone says those (a stale
// nodeset.dev/tenant of a node group would tie a Shared Node to a
// namespace). A set that overrides its
// class's free-form spec.parameters may have given the driver the keys it
// reports, and nodeset cannot read parameters to refuse them as it
// refuses the tenant's labels and taints elsewhere: for such a set, keys
// reserved for the cluster admin (kubernetes.io, k8s.io) go on only as
// the labels a cloud reports (zone, region, instance type, architecture,
// OS). The admin sets others in the class's nodeTemplate.
func machineKey(set *nodesetv1alpha1.NodeSet, key string, label bool) bool {
	switch {
	case resolve.NodesetKey(key), key == nodesetv1alpha1.LabelTenantRestricted, key == nodesetv1alpha1.LabelSeal:
		return false
	case set.Spec.Parameters == nil || resolve.ReservedForTenants(key) == "":
		return true
	}
	return label && cloudLabels[key]
}

func (c *Controller) nodeByProviderID(providerID string) *corev1.Node {
	objs, err := c.nodeIndexer.ByIndex(providerIDIndex, providerID)
	if err != nil || len(objs) == 0 {
		return nil
	}
	node, _ := objs[0].(*corev1.Node)
	return node
}

func (c *Controller) rememberTerminated(providerID string) {
	c.terminatedMu.Lock()
	defer c.terminatedMu.Unlock()
	now := c.opts.Now()
	for id, at := range c.terminated {
		if now.Sub(at) > terminatedMemory {
			delete(c.terminated, id)
		}
	}
	c.terminated[providerID] = now
}

func (c *Controller) recentlyTerminated(providerID string) bool {
	c.terminatedMu.Lock()
	defer c.terminatedMu.Unlock()
	at, ok := c.terminated[providerID]
	return ok && c.opts.Now().Sub(at) < terminatedMemory
}

// recentlyTerminatedMachine reports whether this process terminated a
// group machine with the machine id (the last element of its providerID,
// as machineIDIndex takes it) within terminatedMemory.
func (c *Controller) recentlyTerminatedMachine(id string) bool {
	c.terminatedMu.Lock()
	defer c.terminatedMu.Unlock()
	now := c.opts.Now()
	for providerID, at := range c.terminated {
		if now.Sub(at) < terminatedMemory && path.Base(providerID) == id {
			return true
		}
	}
	return false
}

// syncGroupNode runs a group machine's Node: the startup taint lifted once
// Ready, and on deletion a drain, then the machine terminated in its group
// with the group's size lowered by one in the same call.
func (c *Controller) syncGroupNode(ctx context.Context, node *corev1.Node, class *nodesetv1alpha1.NodeClass, driver drivers.GroupDriver) error {
	if node.DeletionTimestamp != nil {
		if class == nil {
			// Without its class the cloud cannot be reached; the orphan
			// collection of the class's region removes the group.
			c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonDeprovisionFailed,
				"NodeClass %s is gone, or of another driver now: machine %s cannot be terminated from here", node.Labels[nodesetv1alpha1.LabelNodeClass], node.Spec.ProviderID)
			return nil
		}
		machineClass, err := c.terminationClass(ctx, class, c.setOf(node))
		if err != nil {
			return err
		}
		group, providerID := node.Annotations[nodesetv1alpha1.AnnotationGroup], node.Spec.ProviderID
		interruption, _ := interruptionOf(node)
		source, _ := driver.(drivers.InterruptionSource)
		var heartbeat func(context.Context, *corev1.Node) error
		if interruption.Lifecycle != nil && source != nil {
			heartbeat = func(ctx context.Context, node *corev1.Node) error {
				return c.lifecycleHeartbeat(ctx, node, interruption, source, machineClass)
			}
		}
		return c.terminate(ctx, node, class, deprovisioner{driver: driver.Name(), op: opTerminate, whileDraining: heartbeat, remove: func(ctx context.Context) error {
			if group == "" || providerID == "" {
				return nil // never had a machine of a group
			}
			if interruption.Lifecycle != nil && source != nil {
				// Drained: the cloud group may go on terminating it.
				if err := c.completeLifecycleAction(ctx, source, machineClass, *interruption.Lifecycle, node); err != nil {
					return err
				}
			}
			if err := c.mayAct(opTerminate); err != nil {
				return err
			}
			if err := driver.TerminateMachine(ctx, machineClass, group, providerID); err != nil {
				return err
			}
			c.rememberTerminated(providerID)
			return nil
		}})
	}
	if class == nil || node.Spec.ProviderID == "" {
		return nil
	}
	if !slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination) {
		// Not held: a kubelet's own Node labelled with a set by hand, or
		// one of the group's not adopted yet (the group's sync adopts it).
		// Nothing here replaces it: a deletion would take it away undrained.
		return nil
	}
	if node.Annotations[nodesetv1alpha1.AnnotationReplace] != "" {
		if err := c.replaceWhenReplaced(ctx, node); err != nil {
			return err
		}
	}
	return c.register(ctx, node, class, driver)
}
