package nodeclass

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/redact"
	"nodeset.dev/nodeset/pkg/resolve"
)

// KindOf is the kind of a driver, as NodeClass status.driverKind says it.
func KindOf(driver drivers.Driver) nodesetv1alpha1.DriverKind {
	if _, ok := driver.(drivers.GroupDriver); ok {
		return nodesetv1alpha1.DriverKindGroup
	}
	return nodesetv1alpha1.DriverKindMachine
}

// enqueueSetsOf queues the NodeSets of a class, whose template capacity
// may have changed with it.
func (c *Controller) enqueueSetsOf(class string) {
	sets, err := c.sets.List(labels.Everything())
	if err != nil {
		return
	}
	for _, set := range sets {
		if set.Spec.NodeClassName == class {
			c.enqueueSet(set)
		}
	}
}

// syncSetCapacity publishes in a NodeSet's status.capacity what one node of
// its current template offers, from its effective configuration (the
// class's, with the set's overrides), so that cluster-autoscaler's template
// node of the set is right when the set overrides the machine. It does so
// for the sets of valid classes whose driver is served here, once per
// template. A panic of the driver fails this set's sync alone, retried
// with backoff.
func (c *Controller) syncSetCapacity(ctx context.Context, key string) (err error) {
	var creds map[string][]byte // read by this sync, kept out of a panic's message
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading the capacity of NodeSet %s panicked: %s", key, redact.String(creds, fmt.Sprint(r)))
			klog.FromContext(ctx).Error(err, "Recovered from a panic", "nodeset", key, "stack", redact.String(creds, string(debug.Stack())))
		}
	}()
	err = c.publishSetCapacity(ctx, key, &creds)
	return redact.ShapesOf(redact.Error(creds, err))
}

// publishSetCapacity is syncSetCapacity, keeping in *read the credentials
// it read.
func (c *Controller) publishSetCapacity(ctx context.Context, key string, read *map[string][]byte) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	set, err := c.sets.NodeSets(namespace).Get(name)
	if err != nil || set.DeletionTimestamp != nil || set.Status.TemplateHash == "" {
		return nil // deleted, or not yet resolved by the nodeset controller (queued again when it is)
	}
	class, err := c.lister.Get(set.Spec.NodeClassName)
	if err != nil {
		return nil // queued again when the class comes
	}
	driver := c.registry[class.Spec.Driver]
	valid := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
	if driver == nil || valid == nil || valid.Status != metav1.ConditionTrue || valid.ObservedGeneration != class.Generation {
		return nil
	}
	effective, err := resolve.EffectiveSpec(class, set)
	if err != nil {
		return nil // not accepted: the nodeset controller says why
	}
	hash := resolve.TemplateHash(&effective, set)
	if set.Status.Capacity != nil && set.Status.Capacity.TemplateHash == hash {
		return nil
	}
	var published any // null: the driver cannot tell before a machine exists
	if err := driver.Validate(ctx, drivers.Class{Name: class.Name, Spec: effective}); err != nil {
		// The overrides make a configuration the driver refuses; the node
		// controller reports it on the Nodes. No capacity to publish.
		klog.FromContext(ctx).V(2).Info("No template capacity for a NodeSet the driver refuses", "nodeset", key, "err", err)
	} else {
		creds, err := c.credentials(ctx, class)
		if err != nil {
			return err
		}
		*read = creds
		capacity, err := driver.Capacity(ctx, drivers.Class{Name: class.Name, Spec: effective, Credentials: creds})
		switch {
		case err == nil:
			published = nodesetv1alpha1.TemplateCapacity{TemplateHash: hash, NodeCapacity: nodesetv1alpha1.NodeCapacity{
				Resources: capacity.Resources, Allocatable: capacity.Allocatable, Labels: capacity.Labels, Taints: capacity.Taints}}
		case errors.Is(err, drivers.ErrNotImplemented), errors.Is(err, drivers.ErrInvalidConfiguration):
		default:
			return fmt.Errorf("reading the capacity of NodeSet %s from driver %s: %w", key, class.Spec.Driver, err)
		}
	}
	if published == nil && set.Status.Capacity == nil {
		return nil
	}
	// A JSON patch replaces the capacity whole: a merge patch would keep
	// the labels and resources of the old template that the new one lacks.
	op := map[string]any{"op": "add", "path": "/status/capacity", "value": published}
	if published == nil {
		op = map[string]any{"op": "remove", "path": "/status/capacity"}
	}
	patch, err := json.Marshal([]any{op})
	if err != nil {
		return err
	}
	_, err = c.client.NodesetV1alpha1().NodeSets(namespace).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
