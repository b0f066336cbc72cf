package nodeset

import (
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// bySealIndex indexes the relabelled Nodes (nodeutil.Tampered) by their
// seal, and NodeSets by the seal of their Nodes: together they map a
// relabelled Node to the NodeSet it was made for. The Nodes whose labels
// match their seal need no index entry.
const bySealIndex = "bySeal"

func nodeSealIndex(obj any) ([]string, error) {
	if node, ok := obj.(*corev1.Node); ok && nodeutil.Tampered(node.Labels) {
		return []string{node.Labels[nodesetv1alpha1.LabelSeal]}, nil
	}
	return nil, nil
}

func setSealIndex(obj any) ([]string, error) {
	if set, ok := obj.(*nodesetv1alpha1.NodeSet); ok {
		return []string{setSeal(set)}, nil
	}
	return nil, nil
}

// setSeal is the seal of the set's Nodes.
func setSeal(set *nodesetv1alpha1.NodeSet) string {
	return nodeutil.Seal(set.Namespace, set.Name, set.Spec.NodeClassName)
}

// enqueueSealOwner syncs the NodeSet a relabelled Node was made for: it
// waits while the Node is relabelled (strayedNodes), and goes on once the
// node controller has put the labels back.
func (c *Controller) enqueueSealOwner(node *corev1.Node) {
	if !nodeutil.Tampered(node.Labels) {
		return
	}
	sets, err := c.nodeSetIndexer.ByIndex(bySealIndex, node.Labels[nodesetv1alpha1.LabelSeal])
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, set := range sets {
		c.enqueue(set)
	}
}

// strayedNodes are the set's Nodes that its kubelet relabelled: sealed for
// the set, labelled with another set or class.
func (c *Controller) strayedNodes(set *nodesetv1alpha1.NodeSet) ([]*corev1.Node, error) {
	objs, err := c.nodeIndexer.ByIndex(bySealIndex, setSeal(set))
	if err != nil {
		return nil, err
	}
	var strayed []*corev1.Node
	for _, obj := range objs {
		if node, ok := obj.(*corev1.Node); ok && nodeutil.Tampered(node.Labels) {
			strayed = append(strayed, node)
		}
	}
	return strayed, nil
}
