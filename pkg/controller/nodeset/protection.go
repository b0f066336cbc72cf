package nodeset

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// ReasonClassInUse is the Event reason of a NodeClass whose deletion waits
// for the NodeSets that use it.
const ReasonClassInUse = "NodeClassInUse"

// nodeSetDeleted queues a deleted NodeSet's sync (it forgets the set) and
// its class, which may have been waiting for its last NodeSet to go.
func (c *Controller) nodeSetDeleted(obj any) {
	c.enqueue(obj)
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if set, ok := obj.(*nodesetv1alpha1.NodeSet); ok {
		c.classQueue.Add(set.Spec.NodeClassName)
	}
}

// syncClassProtection keeps the in-use finalizer on a NodeClass, as
// PersistentVolumeClaim protection does: every class carries it, so that a
// class deleted while NodeSets use it stays (deleting) and its NodeSets go
// on working; it is removed once no NodeSet names the class but those
// created after its deletion began, which get no Node.
func (c *Controller) syncClassProtection(ctx context.Context, name string) error {
	class, err := c.nodeClassLister.Get(name)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	has := slices.Contains(class.Finalizers, nodesetv1alpha1.FinalizerInUse)
	if class.DeletionTimestamp == nil {
		if has {
			return nil
		}
		return c.patchClassFinalizers(ctx, class, append(slices.Clone(class.Finalizers), nodesetv1alpha1.FinalizerInUse))
	}
	if !has {
		return nil
	}
	// Asked of the API server, not the cache: a NodeSet created a moment
	// ago must hold the class too.
	sets, err := c.nodesetClient.NodesetV1alpha1().NodeSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var users []string
	for i := range sets.Items {
		set := &sets.Items[i]
		if set.Spec.NodeClassName == name && !createdAfterDeletion(set, class) {
			users = append(users, set.Namespace+"/"+set.Name)
		}
	}
	if len(users) > 0 {
		slices.Sort(users)
		shown := users[:min(len(users), 5)]
		c.recorder.Eventf(class, corev1.EventTypeNormal, ReasonClassInUse,
			"NodeClass is deleted once no NodeSet uses it; %d do: %s", len(users), strings.Join(shown, ", "))
		klog.FromContext(ctx).V(2).Info("NodeClass deletion waits for its NodeSets", "nodeclass", name, "nodesets", len(users))
		return nil
	}
	return c.patchClassFinalizers(ctx, class, nodeutil.WithoutString(class.Finalizers, nodesetv1alpha1.FinalizerInUse))
}

// patchClassFinalizers writes a class's finalizers, if the class has not
// changed since it was read.
func (c *Controller) patchClassFinalizers(ctx context.Context, class *nodesetv1alpha1.NodeClass, finalizers []string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": finalizers, "resourceVersion": class.ResourceVersion}})
	if err != nil {
		return err
	}
	_, err = c.nodesetClient.NodesetV1alpha1().NodeClasses().Patch(ctx, class.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing the finalizers of NodeClass %s: %w", class.Name, err)
	}
	return nil
}
