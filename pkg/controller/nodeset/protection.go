package nodeset

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
)

// ReasonClassInUse is the Event reason of a NodeClass whose deletion waits
// for the NodeSets that use it.
const ReasonClassInUse = "NodeClassInUse"

// nodeSetDeleted queues a deleted NodeSet's sync (it forgets the set) and
// its class, which may have been waiting for its last NodeSet to go.
func (c *Controller) nodeSetDeleted(obj any) {
	c.enqueue(obj)
	if set, ok := nodeutil.EventObject[*nodesetv1alpha1.NodeSet](obj); ok {
		c.classQueue.Add(set.Spec.NodeClassName)
	}
}

// syncClassProtection keeps the in-use finalizer on a NodeClass, as
// PersistentVolumeClaim protection does: every class carries it, so that a
// class deleted while NodeSets use it stays (deleting) and its NodeSets go
// on working; it is removed once no NodeSet names the class but those
// created after its deletion began and those of namespaces it does not
// admit, which get no Node (holdsClass), and no Node carries
// its label (static Nodes too: their deletion needs the class).
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
	users, err := c.classSets(ctx, class)
	if err != nil {
		return err
	}
	slices.Sort(users)
	holdingSets := len(users)
	// And every Node of the class, static ones too: a Node's drain and
	// deprovisioning need its class (drain settings, credentials) for as
	// long as its machine may exist. Asked of the API server too.
	nodes, err := c.classNodes(ctx, name)
	if err != nil {
		return err
	}
	// A Node nodeset never took (a kubelet's own, labelled with the
	// class) has no machine the class is needed for.
	nodes = slices.DeleteFunc(nodes, func(n corev1.Node) bool { return nodeutil.Foreign(&n) })
	var lone []string
	for i := range nodes {
		if _, _, ok := nodeutil.NodeSetOf(nodes[i].Labels); !ok {
			lone = append(lone, "Node "+nodes[i].Name)
		}
	}
	slices.Sort(lone)
	users = append(users, lone...)
	if len(users) > 0 || len(nodes) > 0 {
		if len(users) == 0 {
			users = append(users, "Node "+nodes[0].Name)
		}
		shown := users[:min(len(users), 5)]
		c.recorder.Eventf(class, corev1.EventTypeNormal, ReasonClassInUse,
			"NodeClass is deleted once no NodeSet and no Node uses it; %d NodeSet(s) and %d Node(s) do: %s",
			holdingSets, len(nodes), strings.Join(shown, ", "))
		klog.FromContext(ctx).V(2).Info("NodeClass deletion waits for its NodeSets and Nodes", "nodeclass", name, "users", len(users), "nodes", len(nodes))
		return nil
	}
	return c.patchClassFinalizers(ctx, class, nodeutil.WithoutString(class.Finalizers, nodesetv1alpha1.FinalizerInUse))
}

// classSetsPage is how many NodeSets a page of classSets' list holds.
const classSetsPage = 500

// classSets names the NodeSets that hold the deleted class: those of the
// class but the ones created after its deletion began and those of
// namespaces it does not admit (holdsClass). While the cache
// shows one, the class is in use, and that is the answer: the sync is
// repeated each time one of them goes, and listing every NodeSet of the
// cluster each time would cost all NodeSets per NodeSet deleted. Once the
// cache shows none, the API server is asked, a page at a time: a NodeSet
// created a moment ago must hold the class too.
func (c *Controller) classSets(ctx context.Context, class *nodesetv1alpha1.NodeClass) ([]string, error) {
	var users []string
	holds := func(set *nodesetv1alpha1.NodeSet) {
		if set.Spec.NodeClassName == class.Name && c.holdsClass(set, class) {
			users = append(users, "NodeSet "+set.Namespace+"/"+set.Name)
		}
	}
	cached, err := c.nodeSetIndexer.ByIndex(byClassIndex, class.Name)
	if err != nil {
		return nil, err
	}
	for _, obj := range cached {
		holds(obj.(*nodesetv1alpha1.NodeSet))
	}
	if len(users) > 0 {
		return users, nil
	}
	err = nodeutil.ListInPages(ctx, classSetsPage, c.nodesetClient.NodesetV1alpha1().NodeSets(metav1.NamespaceAll).List,
		func(list *nodesetv1alpha1.NodeSetList) {
			for i := range list.Items {
				holds(&list.Items[i])
			}
		})
	if err != nil {
		return nil, fmt.Errorf("listing the NodeSets of NodeClass %s: %w", class.Name, err)
	}
	return users, nil
}

// holdsClass reports whether a NodeSet of the deleted class holds it. One
// created after the deletion began does not (it gets no Node). Nor does
// one of a namespace the class does not admit, which gets no Node or
// cloud group either: any tenant can store such a set while the webhook
// is away, and it would keep the admin's class from going for as long as
// the tenant liked. What such a set still has of the class holds it all
// the same: its Nodes (classNodes), and the cloud group the node
// controller made for it while the namespace was admitted
// (status.group, which only nodeset writes). A namespace whose labels
// cannot be read holds the class.
func (c *Controller) holdsClass(set *nodesetv1alpha1.NodeSet, class *nodesetv1alpha1.NodeClass) bool {
	if createdAfterDeletion(set, class) {
		return false
	}
	if set.Status.Group != nil {
		return true
	}
	unread := false
	refusal := resolve.NamespaceRefusal(class, set.Namespace, func(namespace string) (map[string]string, error) {
		nsLabels, err := c.namespaceLabels(namespace)
		unread = err != nil
		return nsLabels, err
	})
	return refusal == "" || unread
}

// classNodes lists from the API server the Nodes labelled with the class,
// and the static Nodes sealed for it whose kubelet relabelled them to
// another class or none (nodeutil.Seal): such a Node's machine is still the
// class's to deprovision once its labels are put back. A NodeSet's Node
// relabelled away holds the class through its NodeSet, which waits for it.
func (c *Controller) classNodes(ctx context.Context, name string) ([]corev1.Node, error) {
	labelled, err := c.kubeClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{nodesetv1alpha1.LabelNodeClass: name}).String()})
	if err != nil {
		return nil, err
	}
	sealed, err := c.kubeClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{nodesetv1alpha1.LabelSeal: nodeutil.Seal("", "", name)}).String()})
	if err != nil {
		return nil, err
	}
	nodes := labelled.Items
	for i := range sealed.Items {
		if sealed.Items[i].Labels[nodesetv1alpha1.LabelNodeClass] != name {
			nodes = append(nodes, sealed.Items[i])
		}
	}
	return nodes, nil
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
