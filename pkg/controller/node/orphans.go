package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// ReasonOrphanMachineDeleted is the Event reason of a collected orphan.
const ReasonOrphanMachineDeleted = "OrphanMachineDeleted"

// ScopedGroupLister is implemented by group drivers whose groups live in
// several scopes (a region or a cluster, seen with one set of credentials):
// orphan collection then lists them scope by scope, and a scope it cannot
// list (a broken class's region or credentials) is skipped alone.
type ScopedGroupLister interface {
	// GroupScopes names the scopes to look in; the names carry no
	// credentials.
	GroupScopes(ctx context.Context) []string
	// ListGroupsIn returns every group of the cluster in the scope; it
	// fails rather than return a partial list.
	ListGroupsIn(ctx context.Context, scope string) ([]drivers.GroupStatus, error)
}

// StrayMachineCollector is implemented by group drivers whose machines can
// outlive their group or leave it (an instance detached from its Auto
// Scaling group, or left running by a termination that failed half way).
type StrayMachineCollector interface {
	ScopedGroupLister
	// ListStrayMachines returns the machines tagged with the cluster in the
	// scope that no group holds, each with the owner its tags name and its
	// creation time; it fails rather than return a partial list.
	ListStrayMachines(ctx context.Context, scope string) ([]drivers.MachineStatus, error)
	// TerminateStrayMachine terminates one of them; nil once it is gone.
	TerminateStrayMachine(ctx context.Context, scope, providerID string) error
}

// orphanCandidates is what one round may collect: everything listed in the
// drivers and scopes that were listed whole.
type orphanCandidates struct {
	machines []machineCandidate
	groups   []groupCandidate
	strays   []strayCandidate
	// skipped says what could not be listed, and so is left alone.
	skipped []error
}

type machineCandidate struct {
	driver  string
	machine drivers.MachineStatus
}

type groupCandidate struct {
	driver string
	group  drivers.GroupStatus
}

type strayCandidate struct {
	driver, scope string
	machine       drivers.MachineStatus
	// groups are the names of the groups the scope has.
	groups map[string]bool
}

// listOrphanCandidates lists every driver, and every scope of a scoped group
// driver, on its own: a failed list skips that driver or scope only.
func (c *Controller) listOrphanCandidates(ctx context.Context) orphanCandidates {
	var out orphanCandidates
	names := make([]string, 0, len(c.registry))
	for name := range c.registry {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c.readClassCredentials(ctx, name)
		if driver, ok := c.registry.Group(name); ok {
			scoped, ok := driver.(ScopedGroupLister)
			if !ok {
				start := time.Now()
				list, err := driver.ListGroups(ctx)
				c.metrics.driverCall(name, opListGroups, start, err)
				if err != nil {
					out.skipped = append(out.skipped, fmt.Errorf("listing the groups of driver %s: %w", name, err))
					continue
				}
				for _, g := range list {
					out.groups = append(out.groups, groupCandidate{name, g})
				}
				continue
			}
			for _, scope := range scoped.GroupScopes(ctx) {
				start := time.Now()
				list, err := scoped.ListGroupsIn(ctx, scope)
				c.metrics.driverCall(name, opListGroups, start, err)
				if err != nil {
					out.skipped = append(out.skipped, fmt.Errorf("listing the groups of driver %s in %s: %w", name, scope, err))
					continue
				}
				in := map[string]bool{}
				for _, g := range list {
					out.groups = append(out.groups, groupCandidate{name, g})
					in[g.Name] = true
				}
				collector, ok := driver.(StrayMachineCollector)
				if !ok {
					continue
				}
				start = time.Now()
				strays, err := collector.ListStrayMachines(ctx, scope)
				c.metrics.driverCall(name, opList, start, err)
				if err != nil {
					out.skipped = append(out.skipped, fmt.Errorf("listing the stray machines of driver %s in %s: %w", name, scope, err))
					continue
				}
				for _, m := range strays {
					out.strays = append(out.strays, strayCandidate{driver: name, scope: scope, machine: m, groups: in})
				}
			}
			continue
		}
		driver, ok := c.registry.Machine(name)
		if !ok {
			continue
		}
		start := time.Now()
		machines, err := driver.List(ctx)
		c.metrics.driverCall(name, opList, start, err)
		if err != nil {
			out.skipped = append(out.skipped, fmt.Errorf("listing the machines of driver %s: %w", name, err))
			continue
		}
		for _, m := range machines {
			out.machines = append(out.machines, machineCandidate{name, m})
		}
	}
	return out
}

// readClassCredentials reads the credentials of every class of driver, so
// that what the driver says in orphan collection is scrubbed of them: after
// a restart, no Node of a class may have been provisioned or deleted yet,
// and the driver's machines and groups carry the credentials they were
// made with. A Secret that cannot be read is skipped: its values cannot be
// known, and the driver scrubs its own errors first.
func (c *Controller) readClassCredentials(ctx context.Context, driver string) {
	classes, err := c.classes.List(labels.Everything())
	if err != nil {
		return
	}
	for _, class := range classes {
		if class.Spec.Driver != driver || class.Spec.CredentialsSecretRef == nil {
			continue
		}
		if _, err := c.credentials(ctx, class); err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot read the credentials of a class before orphan collection", "nodeclass", class.Name, "err", c.scrub(err.Error()))
		}
	}
}

// CollectOrphans removes what no Node or NodeSet accounts for and is older
// than minAge: the machines of machine drivers that no Node accounts for (by
// providerID or by name), the groups whose NodeSet is gone, and the stray
// machines of group drivers (tagged with the cluster, in no group) that no
// Node accounts for and whose NodeSet or group is gone. Nothing is removed
// unless the caches are synced. Each driver, and each scope of a scoped
// group driver, is judged on its own list: one that cannot be listed is
// skipped this round (and named in the error), never taken as empty, and
// never stops the others. Each candidate is checked against the API server,
// not only the cache, right before it is removed. It returns what it
// removed. What it logs and returns of drivers' errors carries no
// credential of the drivers' classes: those are read before each driver is
// listed.
//
// A driver's panic (in List, ListGroups, a Delete) ends the round, counted
// as panicked, and the process goes on: the next round tries again.
func (c *Controller) CollectOrphans(ctx context.Context, minAge time.Duration) (removed []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.metrics.orphanRound(roundPanicked)
			err = c.panicked(ctx, r, "orphan collection")
		}
	}()
	return c.collectOrphans(ctx, minAge)
}

func (c *Controller) collectOrphans(ctx context.Context, minAge time.Duration) ([]string, error) {
	logger := klog.FromContext(ctx)
	if !c.HasSynced() {
		c.metrics.orphanRound(roundCachesNotSynced)
		return nil, fmt.Errorf("caches not synced")
	}
	candidates := c.listOrphanCandidates(ctx)
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		c.metrics.orphanRound(roundListFailed)
		return nil, err
	}
	// owned are the Nodes by name and by providerID.
	owned := make(map[string]*corev1.Node, 2*len(nodes))
	// groupsInUse are the cloud groups Nodes still name: a group whose
	// NodeSet is gone still holds machines whose Nodes are being drained.
	groupsInUse := map[string]bool{}
	for _, n := range nodes {
		owned[n.Name] = n
		if n.Spec.ProviderID != "" {
			owned[n.Spec.ProviderID] = n
		}
		if group := n.Annotations[nodesetv1alpha1.AnnotationGroup]; group != "" {
			groupsInUse[group] = true
		}
	}
	now := c.opts.Now()
	var removed []string
	for _, cand := range candidates.machines {
		m := cand.machine
		if !c.unaccounted(ctx, owned, cand.driver, m, now, minAge) {
			continue
		}
		if err := c.mayAct(opDelete); err != nil {
			logger.Info("Orphan collection stopped: this replica may not act", "reason", err)
			return removed, err
		}
		driver, _ := c.registry.Machine(cand.driver)
		start := time.Now()
		err := driver.Delete(ctx, c.orphanClass(ctx, cand.driver, m), m.Name)
		c.metrics.driverCall(cand.driver, opDelete, start, err)
		if err != nil {
			logger.Error(c.scrubbedError(err), "Deleting an orphan machine", "driver", cand.driver, "machine", m.Name)
			continue
		}
		c.metrics.orphanDeleted(cand.driver)
		removed = append(removed, m.Name)
		age := now.Sub(time.Unix(m.CreatedAt, 0)).Round(time.Second)
		logger.Info("Deleted an orphan machine", "driver", cand.driver, "machine", m.Name, "providerID", m.ProviderID, "age", age,
			"nodeset", klog.KRef(m.Owner.Namespace, m.Owner.Name))
		if set, err := c.sets.NodeSets(m.Owner.Namespace).Get(m.Owner.Name); err == nil {
			c.recorder.Eventf(set, corev1.EventTypeNormal, ReasonOrphanMachineDeleted,
				"Deleted machine %s (driver %s, %s old): no Node accounts for it", m.Name, cand.driver, age)
			// Its room, if its cloud counts the set's class, is free.
			c.retryWaiting(set.Spec.NodeClassName)
		}
	}
	for _, cand := range candidates.strays {
		m := cand.machine
		if m.Owner.Namespace == "" || m.Owner.Name == "" || !c.unaccounted(ctx, owned, cand.driver, m, now, minAge) {
			continue // not a NodeSet's, a Node accounts for it, or too young
		}
		driver, _ := c.registry.Group(cand.driver)
		setGone, known := c.nodeSetGone(ctx, m.Owner)
		if !known {
			continue
		}
		// A group made before names cut to fit covered the UID keeps its
		// former name.
		groupGone := !cand.groups[drivers.NameGroup(driver, m.Owner)] && !cand.groups[drivers.FormerGroupName(driver, m.Owner)]
		if !setGone && !groupGone {
			continue // detached from a live group of a live NodeSet: someone's on purpose
		}
		if err := c.mayAct(opTerminate); err != nil {
			logger.Info("Orphan collection stopped: this replica may not act", "reason", err)
			return removed, err
		}
		start := time.Now()
		err := driver.(StrayMachineCollector).TerminateStrayMachine(ctx, cand.scope, m.ProviderID)
		c.metrics.driverCall(cand.driver, opTerminate, start, err)
		if err != nil {
			logger.Error(c.scrubbedError(err), "Terminating an orphan machine", "driver", cand.driver, "scope", cand.scope, "providerID", m.ProviderID)
			continue
		}
		c.metrics.orphanDeleted(cand.driver)
		removed = append(removed, m.ProviderID)
		logger.Info("Terminated an orphan machine in no group", "driver", cand.driver, "scope", cand.scope, "machine", m.Name,
			"providerID", m.ProviderID, "age", now.Sub(time.Unix(m.CreatedAt, 0)).Round(time.Second),
			"nodeset", klog.KRef(m.Owner.Namespace, m.Owner.Name), "nodesetGone", setGone, "groupGone", groupGone)
	}
	for _, cand := range candidates.groups {
		g := cand.group
		if g.CreatedAt == 0 || now.Sub(time.Unix(g.CreatedAt, 0)) < minAge || g.Owner.Namespace == "" || g.Owner.Name == "" {
			continue // too young, of unknown age, or not a NodeSet's
		}
		if groupsInUse[g.Name] {
			continue // its Nodes go first, drained, each machine terminated in it
		}
		if gone, known := c.nodeSetGone(ctx, g.Owner); !known || !gone {
			continue
		}
		if err := c.mayAct(opDeleteGroup); err != nil {
			logger.Info("Orphan collection stopped: this replica may not act", "reason", err)
			return removed, err
		}
		driver, _ := c.registry.Group(cand.driver)
		start := time.Now()
		err = driver.DeleteGroup(ctx, g.Class, g.Name)
		c.metrics.driverCall(cand.driver, opDeleteGroup, start, err)
		if err != nil && !errors.Is(err, drivers.ErrInProgress) {
			logger.Error(c.scrubbedError(err), "Deleting an orphan group", "driver", cand.driver, "group", g.Name)
			continue
		}
		c.metrics.orphanDeleted(cand.driver)
		removed = append(removed, g.Name)
		logger.Info("Deleting an orphan group", "driver", cand.driver, "group", g.Name, "machines", len(g.Machines),
			"age", now.Sub(time.Unix(g.CreatedAt, 0)).Round(time.Second), "nodeset", klog.KRef(g.Owner.Namespace, g.Owner.Name))
	}
	if len(candidates.skipped) > 0 {
		c.metrics.orphanRound(roundListFailed)
		return removed, c.scrubbedError(fmt.Errorf("skipped what could not be listed: %w", errors.Join(candidates.skipped...)))
	}
	c.metrics.orphanRound(roundCompleted)
	return removed, nil
}

// orphanClass is the class an orphan machine of driver was made with
// (m.Class), as it is now, with its NodeSet's permitted overrides when that
// NodeSet is still there, and the credentials its Secret holds now: the
// ones the machine was made with may have been rotated and revoked since,
// and its driver removes it with the class's current ones (docker-machine
// hands them to the plugin). Empty when the machine names no class, the
// class is gone or now of another driver, or its Secret cannot be read:
// the driver then removes the machine with what it saved. The driver
// itself checks the class against the machine's record (docker-machine
// hands the credentials only to a plugin of the class's driverName).
func (c *Controller) orphanClass(ctx context.Context, driver string, m drivers.MachineStatus) drivers.Class {
	if m.Class == "" {
		return drivers.Class{}
	}
	class, err := c.classes.Get(m.Class)
	if err != nil || class.Spec.Driver != driver {
		return drivers.Class{}
	}
	var set *nodesetv1alpha1.NodeSet
	if s, err := c.sets.NodeSets(m.Owner.Namespace).Get(m.Owner.Name); err == nil && s.Spec.NodeClassName == class.Name &&
		(m.Owner.UID == "" || s.UID == m.Owner.UID) {
		set = s
	}
	removal, err := c.terminationClass(ctx, class, set)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot read the credentials of an orphan machine's class; removing it with the ones it was made with",
			"machine", m.Name, "nodeclass", class.Name, "err", c.scrub(err.Error()))
		return drivers.Class{}
	}
	return removal
}

// unaccounted reports whether no Node accounts for the machine of driver
// (accountsFor), by name or providerID, in the cache or, for its name, on
// the API server, and whether it is known to be older than minAge.
func (c *Controller) unaccounted(ctx context.Context, owned map[string]*corev1.Node, driver string, m drivers.MachineStatus, now time.Time, minAge time.Duration) bool {
	if n := owned[m.Name]; n != nil && c.accountsFor(n, driver, m) {
		return false
	}
	if n := owned[m.ProviderID]; m.ProviderID != "" && n != nil && c.accountsFor(n, driver, m) {
		return false
	}
	if m.CreatedAt == 0 || now.Sub(time.Unix(m.CreatedAt, 0)) < minAge {
		return false // too young (a Node may be on its way) or of unknown age
	}
	if m.Name == "" {
		return true // a Node is named after the machine: one without a name has none
	}
	// The cache may lag: ask the API server whether a Node has the name.
	node, err := c.kube.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
	if err == nil {
		return !c.accountsFor(node, driver, m)
	}
	return apierrors.IsNotFound(err)
}

// accountsFor reports whether a Node that has the name or providerID of
// a machine of driver accounts for it: the machine was made for that Node
// (its UID, when the driver recorded one), or the Node is of that driver,
// whose Create for it removes or refuses a machine its predecessor left
// behind and whose deletion removes it (collecting the machine here could
// remove the one that Create makes meanwhile). A machine made for another
// Node whose name a Node of another driver, or of none, has now is its
// deleted Node's: nothing else would ever remove it.
func (c *Controller) accountsFor(node *corev1.Node, driver string, m drivers.MachineStatus) bool {
	if _, ofMachines := c.registry.Machine(driver); ofMachines && !c.maySpeakForMachine(node) {
		return false
	}
	if m.NodeUID == "" || node.UID == m.NodeUID {
		return true
	}
	nodeDriver := node.Annotations[nodesetv1alpha1.AnnotationDriver] // the driver that made its machine
	if class, err := c.classes.Get(node.Labels[nodesetv1alpha1.LabelNodeClass]); err == nil && nodeDriver == "" {
		nodeDriver = class.Spec.Driver
	}
	return nodeDriver == driver
}

// maySpeakForMachine reports whether a Node with the name or providerID of
// a machine driver's machine may be its Node: one nodeset made or holds
// (sealed; held and made before its class's status.sealedSince; either
// marked none of nodeset's only once sealedSince was past, which an
// earlier release's Node left unsealed by then is too), or one it is
// about to hold (a lone Node no kubelet has reported on yet). A Node its
// kubelet registered on its own after sealedSince is not: a Node deleted
// by hand and registered again by its kubelet would otherwise keep its
// machine out of every NodeSet, class limit and collection for good.
func (c *Controller) maySpeakForMachine(node *corev1.Node) bool {
	class, err := c.classes.Get(node.Labels[nodesetv1alpha1.LabelNodeClass])
	if err != nil {
		class = nil
	}
	if seal, sealed := node.Labels[nodesetv1alpha1.LabelSeal]; sealed {
		return seal != nodesetv1alpha1.SealNone || !nodeutil.MadeSealed(node, class)
	}
	if slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination) {
		return !nodeutil.MadeSealed(node, class)
	}
	return !nodeutil.KubeletReported(node)
}

// nodeSetGone asks the API server whether the owner's NodeSet (namespace,
// name and, when known, UID) is gone; known is false when it cannot tell.
func (c *Controller) nodeSetGone(ctx context.Context, owner drivers.Owner) (gone, known bool) {
	if c.opts.NodeSets == nil {
		return false, false // cannot ask the API server
	}
	set, err := c.opts.NodeSets.NodesetV1alpha1().NodeSets(owner.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		return owner.UID != "" && set.UID != owner.UID, true
	case apierrors.IsNotFound(err):
		return true, true
	}
	return false, false
}

// RunOrphanCollection collects orphans every interval until ctx is done.
func (c *Controller) RunOrphanCollection(ctx context.Context, interval, minAge time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if removed, err := c.CollectOrphans(ctx, minAge); err != nil {
			klog.FromContext(ctx).Info("Orphan collection left out what it could not judge this round", "removed", len(removed), "reason", err.Error())
		}
	}
}
