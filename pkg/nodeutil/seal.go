package nodeutil

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// sealLength is how many hex digits of the SHA-256 a seal keeps (160 bits):
// a label value, at most 63 characters.
const sealLength = 40

// Seal is the value of the label nodesetv1alpha1.LabelSeal on a Node made
// for the NodeSet namespace/name of class: a hex prefix of the SHA-256 of
// the three joined by "/", which none of them can contain (a static Node,
// of no NodeSet, has an empty namespace and name).
func Seal(namespace, name, class string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name + "/" + class))
	return hex.EncodeToString(sum[:])[:sealLength]
}

// SealOf is the seal that Node labels claim: the Seal of the namespace,
// NodeSet and NodeClass they name.
func SealOf(nodeLabels map[string]string) string {
	return Seal(nodeLabels[nodesetv1alpha1.LabelNodeSetNamespace], nodeLabels[nodesetv1alpha1.LabelNodeSet],
		nodeLabels[nodesetv1alpha1.LabelNodeClass])
}

// Tampered reports whether Node labels carry a seal that does not match
// their NodeSet and NodeClass labels: the Node's kubelet, which may change
// those and not the seal, relabelled it. Such a Node is no Node of any
// NodeSet or class. A Node with no seal (made by an earlier release, not
// sealed yet) is taken at its labels' word.
func Tampered(nodeLabels map[string]string) bool {
	return tampered(labels.Set(nodeLabels))
}

func tampered(l labels.Labels) bool {
	if !l.Has(nodesetv1alpha1.LabelSeal) {
		return false
	}
	return l.Get(nodesetv1alpha1.LabelSeal) != Seal(l.Get(nodesetv1alpha1.LabelNodeSetNamespace), l.Get(nodesetv1alpha1.LabelNodeSet),
		l.Get(nodesetv1alpha1.LabelNodeClass))
}

// Stranger reports whether a Node that holds nodeset's finalizer and claims
// class by its labels is none of nodeset's, at now: it has no seal, and
// nodeset seals every Node of the class it makes or holds since the
// class's status.sealedSince. A kubelet may register its own Node, or
// relabel it, with any nodeset.dev/ label and add the finalizer (the
// NodeRestriction admission plugin checks neither), but never add a seal.
// So such a Node made since sealedSince is a kubelet's; so is any such
// Node once sealedSince is past, by which time the node controller has
// sealed those of an earlier release (an older kubelet's Node could
// otherwise claim a set by a label and a finalizer added after it, and be
// sealed as one of that release's). Before then, and for a class with no
// sealedSince yet (not served since the seal came), an unsealed Node is
// taken at its labels' word, as an earlier release's.
func Stranger(node *corev1.Node, class *nodesetv1alpha1.NodeClass, now time.Time) bool {
	if _, sealed := node.Labels[nodesetv1alpha1.LabelSeal]; sealed || !slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination) {
		return false
	}
	return SealRequired(node, class, now)
}

// Foreign reports whether a Node is one nodeset never took, whatever its
// nodeset.dev/ labels claim: it has no seal and not nodeset's finalizer,
// and already a host (a kubelet reports on it, or it has a providerID).
// nodeset seals and holds every Node it makes or adopts, and makes no
// machine for a Node that has a host of its own (a kubelet's own
// registration, labelled by hand or by the kubelet). Such a Node counts
// toward no class limit and holds no class. (A Node an admin creates for
// a machine to come has no host yet; an instance whose kubelet registered
// before its cloud group's Node was made counts as the group's instance
// until it is adopted.)
func Foreign(node *corev1.Node) bool {
	if _, sealed := node.Labels[nodesetv1alpha1.LabelSeal]; sealed || slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination) {
		return false
	}
	return node.Spec.ProviderID != "" || KubeletReported(node)
}

// Held reports whether nodeset holds the Node: it carries nodeset's
// finalizer, or is being deleted (and released by it, or gone in a
// moment). Only a held Node is one of a NodeSet's replicas: a NodeSet's
// Nodes are made held, a cloud group's are held when made or adopted, and
// labels alone prove nothing (a kubelet may label its own Node with a
// set's labels).
func Held(node *corev1.Node) bool {
	return node.DeletionTimestamp != nil || slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination)
}

// WithoutStrangers drops from nodes, in place, those that are none of
// nodeset's at now (Stranger): a kubelet's Node with a set's labels and
// nodeset's finalizer counts for no set or group, even before the node
// controller marks it.
func WithoutStrangers(nodes []*corev1.Node, class *nodesetv1alpha1.NodeClass, now time.Time) []*corev1.Node {
	return slices.DeleteFunc(nodes, func(n *corev1.Node) bool { return Stranger(n, class, now) })
}

// Replica reports whether a Node its labels give to a NodeSet is one of
// its replicas at now: held (Held), and no stranger (Stranger). class is
// the Node's NodeClass (nil if unknown).
func Replica(node *corev1.Node, class *nodesetv1alpha1.NodeClass, now time.Time) bool {
	return Held(node) && !Stranger(node, class, now)
}

// Replicas drops from nodes, a NodeSet's Nodes by its labels, in place,
// those that are none of its replicas at now (Replica).
func Replicas(nodes []*corev1.Node, class *nodesetv1alpha1.NodeClass, now time.Time) []*corev1.Node {
	return slices.DeleteFunc(nodes, func(n *corev1.Node) bool { return !Replica(n, class, now) })
}

// MadeSealed reports whether a Node was made at or after its class's
// status.sealedSince: since then nodeset seals every Node of the class it
// makes or holds in its first write of it, so an unsealed one was made by
// someone else (its kubelet).
func MadeSealed(node *corev1.Node, class *nodesetv1alpha1.NodeClass) bool {
	return class != nil && class.Status.SealedSince != nil && !node.CreationTimestamp.Before(class.Status.SealedSince)
}

// SealRequired reports whether a Node of class must carry a seal at now to
// be nodeset's: it was made at or after the class's status.sealedSince, or
// that time is past. Since then nodeset seals every Node of the class it
// makes or holds in its first write of it, and has sealed those an
// earlier release made.
func SealRequired(node *corev1.Node, class *nodesetv1alpha1.NodeClass, now time.Time) bool {
	return MadeSealed(node, class) || (class != nil && class.Status.SealedSince != nil && !now.Before(class.Status.SealedSince.Time))
}

// ClassOf is the NodeClass whose Node labels these are, "" for a Node of
// no class or one whose labels were tampered with.
func ClassOf(nodeLabels map[string]string) string {
	if Tampered(nodeLabels) {
		return ""
	}
	return nodeLabels[nodesetv1alpha1.LabelNodeClass]
}

// Members selects what selector selects, less the Nodes whose labels were
// tampered with: a lister's List with it never returns a Node that is no
// member of the NodeSet or class its labels name. Its String is selector's,
// so a List on the API server with it is not filtered: filter the answer
// with Tampered.
func Members(selector labels.Selector) labels.Selector {
	return members{selector}
}

// ClassSelector selects the Nodes of a NodeClass (Members).
func ClassSelector(class string) labels.Selector {
	return Members(labels.SelectorFromSet(labels.Set{nodesetv1alpha1.LabelNodeClass: class}))
}

type members struct{ labels.Selector }

func (s members) Matches(l labels.Labels) bool { return s.Selector.Matches(l) && !tampered(l) }

// Empty is false: a lister lists everything, unfiltered, for an empty
// selector.
func (s members) Empty() bool { return false }

func (s members) Add(r ...labels.Requirement) labels.Selector { return members{s.Selector.Add(r...)} }

func (s members) DeepCopySelector() labels.Selector { return members{s.Selector.DeepCopySelector()} }

// IndexRelabelledBySeal is an informer index function of Nodes: a Node
// whose labels were tampered with (Tampered) under its seal, and no entry
// for the others, which need none (one each would cost memory at 10,000
// Nodes for nothing). The informer indexes a Node again on each update, so
// one put back leaves the index.
func IndexRelabelledBySeal(obj any) ([]string, error) {
	if node, ok := obj.(*corev1.Node); ok && Tampered(node.Labels) {
		return []string{node.Labels[nodesetv1alpha1.LabelSeal]}, nil
	}
	return nil, nil
}

// IndexSetBySeal is an informer index function of NodeSets: a NodeSet
// under the seal of its Nodes (SetSeal).
func IndexSetBySeal(obj any) ([]string, error) {
	if set, ok := obj.(*nodesetv1alpha1.NodeSet); ok {
		return []string{SetSeal(set)}, nil
	}
	return nil, nil
}

// SetSeal is the seal of a NodeSet's Nodes.
func SetSeal(set *nodesetv1alpha1.NodeSet) string {
	return Seal(set.Namespace, set.Name, set.Spec.NodeClassName)
}
