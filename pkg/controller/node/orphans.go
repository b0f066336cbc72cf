package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"nodeset.dev/nodeset/drivers"
)

// ReasonOrphanMachineDeleted is the Event reason of a collected orphan.
const ReasonOrphanMachineDeleted = "OrphanMachineDeleted"

// CollectOrphans removes the machines of every machine driver that no Node
// accounts for (by providerID or by name) and that are older than minAge.
// It removes nothing unless the caches are synced and every driver's List
// succeeded: a partial view of the fleet must never look like orphans. Each
// candidate is checked against the API server, not only the cache, right
// before it is deleted. It returns the machines it removed.
func (c *Controller) CollectOrphans(ctx context.Context, minAge time.Duration) ([]string, error) {
	logger := klog.FromContext(ctx)
	if !c.HasSynced() {
		c.metrics.orphanRound(roundCachesNotSynced)
		return nil, fmt.Errorf("caches not synced")
	}
	type candidate struct {
		driver  string
		machine drivers.MachineStatus
	}
	type groupCandidate struct {
		driver string
		group  drivers.GroupStatus
	}
	var all []candidate
	var groups []groupCandidate
	names := make([]string, 0, len(c.registry))
	for name := range c.registry {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if driver, ok := c.registry.Group(name); ok {
			start := time.Now()
			list, err := driver.ListGroups(ctx)
			c.metrics.driverCall(name, opListGroups, start, err)
			if err != nil {
				c.metrics.orphanRound(roundListFailed)
				return nil, fmt.Errorf("listing the groups of driver %s: %w", name, err)
			}
			for _, g := range list {
				groups = append(groups, groupCandidate{name, g})
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
			c.metrics.orphanRound(roundListFailed)
			return nil, fmt.Errorf("listing the machines of driver %s: %w", name, err)
		}
		for _, m := range machines {
			all = append(all, candidate{name, m})
		}
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		c.metrics.orphanRound(roundListFailed)
		return nil, err
	}
	owned := make(map[string]bool, 2*len(nodes))
	for _, n := range nodes {
		owned[n.Name] = true
		if n.Spec.ProviderID != "" {
			owned[n.Spec.ProviderID] = true
		}
	}
	now := c.opts.Now()
	var removed []string
	for _, cand := range all {
		m := cand.machine
		if owned[m.Name] || (m.ProviderID != "" && owned[m.ProviderID]) {
			continue
		}
		if m.CreatedAt == 0 || now.Sub(time.Unix(m.CreatedAt, 0)) < minAge {
			continue // too young (a Node may be on its way) or of unknown age
		}
		// The cache may lag: ask the API server whether a Node has the name.
		if _, err := c.kube.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			continue
		}
		if err := c.mayAct(opDelete); err != nil {
			logger.Info("Orphan collection stopped: this replica may not act", "reason", err)
			return removed, err
		}
		driver, _ := c.registry.Machine(cand.driver)
		start := time.Now()
		err := driver.Delete(ctx, drivers.Class{}, m.Name)
		c.metrics.driverCall(cand.driver, opDelete, start, err)
		if err != nil {
			logger.Error(err, "Deleting an orphan machine", "driver", cand.driver, "machine", m.Name)
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
		}
	}
	for _, cand := range groups {
		g := cand.group
		if g.CreatedAt == 0 || now.Sub(time.Unix(g.CreatedAt, 0)) < minAge || g.Owner.Namespace == "" || g.Owner.Name == "" {
			continue // too young, of unknown age, or not a NodeSet's
		}
		if c.opts.NodeSets == nil {
			continue // cannot ask the API server
		}
		// Only the API server's word that the NodeSet is gone counts.
		set, err := c.opts.NodeSets.NodesetV1alpha1().NodeSets(g.Owner.Namespace).Get(ctx, g.Owner.Name, metav1.GetOptions{})
		if err == nil && (g.Owner.UID == "" || set.UID == g.Owner.UID) {
			continue
		}
		if err != nil && !apierrors.IsNotFound(err) {
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
			logger.Error(err, "Deleting an orphan group", "driver", cand.driver, "group", g.Name)
			continue
		}
		c.metrics.orphanDeleted(cand.driver)
		removed = append(removed, g.Name)
		logger.Info("Deleting an orphan group", "driver", cand.driver, "group", g.Name, "machines", len(g.Machines),
			"age", now.Sub(time.Unix(g.CreatedAt, 0)).Round(time.Second), "nodeset", klog.KRef(g.Owner.Namespace, g.Owner.Name))
	}
	c.metrics.orphanRound(roundCompleted)
	return removed, nil
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
		if _, err := c.CollectOrphans(ctx, minAge); err != nil {
			klog.FromContext(ctx).Info("Orphan collection skipped this round; nothing was removed", "reason", err.Error())
		}
	}
}
