package nodeset

import (
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// bySealIndex indexes the relabelled Nodes by their seal
// (nodeutil.IndexRelabelledBySeal), and NodeSets by the seal of their
// Nodes (nodeutil.IndexSetBySeal): together they map a relabelled Node to
// the NodeSet it was made for.
const bySealIndex = "bySeal"

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
	objs, err := c.nodeIndexer.ByIndex(bySealIndex, nodeutil.SetSeal(set))
	if err != nil {
		return nil, err
	}
	strayed := make([]*corev1.Node, 0, len(objs))
	for _, obj := range objs {
		if node, ok := obj.(*corev1.Node); ok {
			strayed = append(strayed, node)
		}
	}
	return strayed, nil
}
