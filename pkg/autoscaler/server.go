// Package autoscaler serves cluster-autoscaler's externalgrpc cloud-provider
// protocol: every NodeSet with spec.autoscaling is a node group, scaled by
// writing the NodeSet. The NodeSetController and the node controller do the
// rest, as for any other change of replicas.
package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	listers "nodeset.dev/nodeset/pkg/generated/listers/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/plan"
	"nodeset.dev/nodeset/pkg/redact"
	"nodeset.dev/nodeset/pkg/resolve"
)

// GPULabel is the node label the protocol's GPULabel call names.
const GPULabel = nodesetv1alpha1.LabelAccelerator

// Instance error classes of the protocol.
const (
	errorClassOutOfResources = 1
	errorClassOther          = 99
)

// unregisteredPrefix names the instance of a Node whose machine has no
// provider ID yet; cluster-autoscaler sends it back as a "fake" node's name
// and provider ID when it gives up on the instance. Once the Node has a
// provider ID, that is its instance's id, and the placeholder names nothing:
// cluster-autoscaler matches instances to Nodes by spec.providerID, which
// the API server lets be set only once, so the id cannot be the same for
// the whole life of the instance.
const unregisteredPrefix = "nodeset-unregistered://"

// placeholderNode is the name of the Node a placeholder instance id stands
// for; ok is false for any other id.
func placeholderNode(id string) (name string, ok bool) {
	name, ok = strings.CutPrefix(id, unregisteredPrefix)
	return name, ok && name != ""
}

// fakeNodeIDs are the instance ids cluster-autoscaler's node may stand for
// as one of its "fake" nodes: a fake node is named by its instance id, with
// that id as its provider ID too. A Node's name is never a placeholder id
// (it holds "://"), and a Node whose provider ID is one while its name is
// not is a real Node whose kubelet set it (a provider ID may be set once, to
// anything): it is not taken for another set's instance.
func fakeNodeIDs(want *protos.ExternalGrpcNode) []string {
	name, id := want.GetName(), want.GetProviderID()
	switch {
	case name == "":
		return []string{id}
	case id == "" || id == name:
		return []string{name}
	}
	return nil
}

// pendingPrefix names the instances of a set's replicas that have no Node
// yet (its class's limits hold them back, it is not Accepted, or its cloud
// group has not reported them): nodeset-pending://<namespace>/<name>/<n>,
// n from 1 to their number. cluster-autoscaler counts an instance no Node
// carries as unregistered; without them, a set short of Nodes would be a
// group of an incorrect size, whose target it lowers with
// DecreaseTargetSize, which cannot go below minReplicas.
const pendingPrefix = "nodeset-pending://"

// pendingID is the id of the set's n-th replica that has no Node.
func pendingID(set *nodesetv1alpha1.NodeSet, n int32) string {
	return fmt.Sprintf("%s%s/%d", pendingPrefix, GroupID(set), n)
}

// pendingOf is the group id and number of a pending instance id; ok is
// false for any other id.
func pendingOf(id string) (group string, n int32, ok bool) {
	rest, ok := strings.CutPrefix(id, pendingPrefix)
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndex(rest, "/")
	if i < 0 {
		return "", 0, false
	}
	var num int32
	if _, err := fmt.Sscanf(rest[i+1:], "%d", &num); err != nil || num < 1 || fmt.Sprint(num) != rest[i+1:] {
		return "", 0, false
	}
	return rest[:i], num, true
}

// maxPendingInstances bounds the pending instances NodeGroupNodes lists
// of one set: spec.replicas is the tenant's, up to 2^31-1, and the answer
// is built in memory and must fit what a gRPC client receives (4 MiB by
// default). A set short of more Nodes than that is a group of an incorrect
// size to cluster-autoscaler, which lowers its target toward what it sees;
// below minReplicas it is told a target size it can see instead
// (targetSize).
const maxPendingInstances = 1000

// listedPending is how many pending instances of the set are listed.
func listedPending(set *nodesetv1alpha1.NodeSet, nodes []*corev1.Node) int32 {
	return min(pending(set, nodes), maxPendingInstances)
}

// pending is how many of the set's replicas have no Node, as
// cluster-autoscaler counts them: the target size less every Node of the
// set it sees. A Node being deleted, or named for deletion, is still one:
// it exists, NodeGroupForNode maps it to the set, and cluster-autoscaler
// counts it as registered until it is gone. Counted out here, the
// replacement a draining Node is waiting for (a RollingUpdate set makes it
// within maxSurge, terminating Nodes included) would be an unregistered
// instance beside it, deleted as long unregistered after
// --max-node-provision-time, taking a replica nobody removed.
func pending(set *nodesetv1alpha1.NodeSet, nodes []*corev1.Node) int32 {
	return int32(max(int64(plan.Replicas(set))-int64(len(nodes)), 0))
}

// Server implements the CloudProvider service over NodeSets.
type Server struct {
	protos.UnimplementedCloudProviderServer

	client  versioned.Interface
	sets    listers.NodeSetLister
	classes listers.NodeClassLister
	nodes   corelisters.NodeLister
	count   ClassCounter

	// writing holds, by group id, the turn to write that NodeSet (see
	// update); growing, by NodeClass name, the turn to scale up one of
	// its NodeSets (see NodeGroupIncreaseSize).
	writing, growing turns
}

// ClassCounter counts the machines of a NodeClass, what its limits weigh:
// plan.CountClass over the nodeset controller's view, so that a scale-up
// passes here exactly when the controller would make its Nodes.
type ClassCounter func(class *nodesetv1alpha1.NodeClass) (plan.ClassCount, error)

// NewServer returns a Server that reads from the listers, counts classes'
// machines with count and writes NodeSets through client.
func NewServer(client versioned.Interface, sets listers.NodeSetLister, classes listers.NodeClassLister, nodes corelisters.NodeLister, count ClassCounter) *Server {
	return &Server{client: client, sets: sets, classes: classes, nodes: nodes, count: count}
}

// GroupID is a NodeSet's node-group id.
func GroupID(set *nodesetv1alpha1.NodeSet) string { return set.Namespace + "/" + set.Name }

// InstanceID is the id a Node's instance has in the protocol: its provider ID,
// or a placeholder before the machine has one.
func InstanceID(node *corev1.Node) string {
	if node.Spec.ProviderID != "" {
		return node.Spec.ProviderID
	}
	return unregisteredPrefix + node.Name
}

func (s *Server) group(id string) (*nodesetv1alpha1.NodeSet, error) {
	namespace, name, ok := strings.Cut(id, "/")
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "node group id %q is not <namespace>/<nodeset>", id)
	}
	set, err := s.sets.NodeSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, status.Errorf(codes.NotFound, "node group %s: no NodeSet %s in namespace %s", id, name, namespace)
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "node group %s: %v", id, err)
	}
	if set.Spec.Autoscaling == nil {
		return nil, status.Errorf(codes.NotFound, "node group %s: NodeSet has no spec.autoscaling", id)
	}
	if set.DeletionTimestamp != nil {
		// Left out of NodeGroups: the controller only removes its Nodes.
		return nil, status.Errorf(codes.NotFound, "node group %s: the NodeSet is being deleted", id)
	}
	return set, nil
}

// readGroup is the NodeSet of group id for the calls that only read a group
// (NodeGroupTargetSize, NodeGroupNodes), or nil when it is gone.
// cluster-autoscaler asks them for every group of the NodeGroups answer
// it got at the start of its loop, and an error from either aborts the
// whole loop, every group's scale-up and scale-down with it: a set
// deleted, or no longer autoscaled, since that answer is answered as it
// is. Writes still refuse it (group).
func (s *Server) readGroup(id string) (*nodesetv1alpha1.NodeSet, error) {
	namespace, name, ok := strings.Cut(id, "/")
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "node group id %q is not <namespace>/<nodeset>", id)
	}
	set, err := s.sets.NodeSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "node group %s: %v", id, err)
	}
	return set, nil
}

// isGroup reports whether the set is a node group: autoscaled and not being deleted.
func isGroup(set *nodesetv1alpha1.NodeSet) bool {
	return set.Spec.Autoscaling != nil && set.DeletionTimestamp == nil
}

func protoGroup(set *nodesetv1alpha1.NodeSet) *protos.NodeGroup {
	return &protos.NodeGroup{
		Id:      GroupID(set),
		MinSize: set.Spec.Autoscaling.MinReplicas,
		MaxSize: set.Spec.Autoscaling.MaxReplicas,
		Debug: fmt.Sprintf("NodeSet %s/%s (NodeClass %s): replicas %d, ready %d, min %d, max %d, %s",
			set.Namespace, set.Name, set.Spec.NodeClassName, plan.Replicas(set), set.Status.ReadyReplicas,
			set.Spec.Autoscaling.MinReplicas, set.Spec.Autoscaling.MaxReplicas, acceptedDebug(set)),
	}
}

// unmanaged is the refusal of a scale-up or deletion of a set whose Nodes
// the NodeSetController neither makes nor removes, or nil: a set that is not Accepted keeps its Nodes as
// they are (one over its class's limits is still managed, within them).
// A scale-up or a deletion written to it would be answered and never
// carried out, so cluster-autoscaler would wait for nodes that never come
// and leave a drained node running; refused, it backs the group off and
// gives the node back.
func (s *Server) unmanaged(set *nodesetv1alpha1.NodeSet) error {
	accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	if accepted == nil || accepted.Status == metav1.ConditionTrue || accepted.Reason == nodesetv1alpha1.ReasonLimitExceeded {
		return nil
	}
	if classNotReadyReasons[accepted.Reason] && s.classReady(set.Spec.NodeClassName) {
		// A verdict about a class that was not there or not validated
		// yet, which it is by now: the controller is about to accept
		// the set (a new class and its first NodeSets).
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "node group %s: the NodeSet is not Accepted (%s: %s), so nodeset adds and removes none of its nodes",
		GroupID(set), accepted.Reason, accepted.Message)
}

// unjudged is the refusal of a scale-up or of a template for a set whose
// current spec nodeset has not found fit to make Nodes from, or nil: a set
// the NodeSetController has given no verdict yet, or whose current spec
// breaks a tenant rule that its last verdict, older than the tenant's
// latest edit, could not see (resolve.ProvisioningSpec, what the node
// controller checks before it makes a machine). The webhook that refuses
// such an edit may be absent. Offered, such a set's template could carry
// labels that draw other tenants' pending pods to it, and a scale-up
// written to it would wait for Nodes that never come, the pods' real
// scale-up held back meanwhile.
func (s *Server) unjudged(set *nodesetv1alpha1.NodeSet) error {
	if meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted) == nil {
		return status.Errorf(codes.FailedPrecondition, "node group %s: the NodeSetController has not judged the NodeSet yet", GroupID(set))
	}
	class, err := s.classes.Get(set.Spec.NodeClassName)
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "node group %s: NodeClass %s: %v", GroupID(set), set.Spec.NodeClassName, err)
	}
	catalogue, err := s.classes.List(labels.Everything())
	if err != nil {
		return status.Errorf(codes.Unavailable, "node group %s: reading the NodeClasses: %v", GroupID(set), err)
	}
	if _, err := resolve.ProvisioningSpec(catalogue, class, set); err != nil {
		return status.Errorf(codes.FailedPrecondition, "node group %s: the NodeSet's current spec is not one nodeset makes Nodes from: %v", GroupID(set), err)
	}
	return nil
}

// mayGrow is the refusal of a scale-up or of a template, or nil: a set
// nodeset makes no Nodes for (unmanaged), or whose current spec it has not
// found fit (unjudged).
func (s *Server) mayGrow(set *nodesetv1alpha1.NodeSet) error {
	if err := s.unmanaged(set); err != nil {
		return err
	}
	return s.unjudged(set)
}

// classNotReadyReasons are the NodeSetController's Accepted=False reasons
// that say only that the class was missing or not yet validated by its
// node controller.
var classNotReadyReasons = map[string]bool{nodesetv1alpha1.ReasonNodeClassNotFound: true,
	nodesetv1alpha1.ReasonNodeClassNotValidated: true, nodesetv1alpha1.ReasonDriverNotServed: true}

// classReady reports whether the class exists and its node controller has
// found its current generation valid.
func (s *Server) classReady(name string) bool {
	class, err := s.classes.Get(name)
	if err != nil || class.DeletionTimestamp != nil || class.Status.DriverKind == "" {
		return false
	}
	valid := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
	return valid != nil && valid.Status == metav1.ConditionTrue && valid.ObservedGeneration == class.Generation
}

// acceptedDebug is the set's Accepted condition, as the node group's debug text shows it.
func acceptedDebug(set *nodesetv1alpha1.NodeSet) string {
	accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	if accepted == nil {
		return "Accepted=Unknown"
	}
	return fmt.Sprintf("Accepted=%s (%s)", accepted.Status, accepted.Reason)
}

func (s *Server) setNodes(set *nodesetv1alpha1.NodeSet) ([]*corev1.Node, error) {
	nodes, err := s.nodes.List(resolve.Selector(set))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing the Nodes of %s: %v", GroupID(set), err)
	}
	// Its replicas, as the nodeset controller counts them: a Node its
	// kubelet labelled with the set's labels is none of its nodes.
	class, _ := s.classes.Get(set.Spec.NodeClassName) // nil when gone
	nodes = nodeutil.Replicas(nodes, class, time.Now())
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	return nodes, nil
}

// NodeGroups lists the NodeSets with spec.autoscaling, each with the max
// size its class's limits allow (maxSize). cluster-autoscaler reads a
// group's max size for scale-ups from this list only; NodeGroupForNode,
// asked once for every node, answers maxReplicas without counting.
//
// A set nodeset makes no Nodes for (unmanaged: a class its namespace may
// not use, labels it may not set) is listed only while it has Nodes: they
// stay in a group whose min size, its Nodes, holds them (refusedMinSize),
// and a scale-up cluster-autoscaler plans from a copy of one is refused
// and the group backed off. With none, the group could only cost every loop its
// reads (target size, instances, a template refused), and a tenant may
// make such sets without bound where no ResourceQuota counts them; left
// out, the refused groups in a loop are at most the Nodes their tenants
// were given while allowed.
func (s *Server) NodeGroups(context.Context, *protos.NodeGroupsRequest) (*protos.NodeGroupsResponse, error) {
	sets, err := s.sets.List(labels.Everything())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing NodeSets: %v", err)
	}
	sort.Slice(sets, func(i, j int) bool { return GroupID(sets[i]) < GroupID(sets[j]) })
	resp := &protos.NodeGroupsResponse{}
	views := map[string]classView{}
	var labelled map[string]bool // sets some Node is labelled with, read once a refused set needs it
	for _, set := range sets {
		if !isGroup(set) {
			continue
		}
		var refused []*corev1.Node // the Nodes of a set nodeset makes none for
		if s.unmanaged(set) != nil {
			if labelled == nil {
				if labelled, err = s.labelledSets(); err != nil {
					return nil, err
				}
			}
			if !labelled[GroupID(set)] {
				continue // refused, and no Node to keep in a group
			}
			if refused, err = s.setNodes(set); err != nil {
				return nil, err
			}
			if len(refused) == 0 {
				continue
			}
		}
		group := protoGroup(set)
		if size, binding := s.maxSize(set, sets, views); size < group.MaxSize {
			group.MaxSize = size
			group.Debug += fmt.Sprintf("; max size %d: %s", size, binding)
		}
		if refused != nil {
			refusedMinSize(group, refused)
		}
		resp.NodeGroups = append(resp.NodeGroups, group)
	}
	return resp, nil
}

// labelledSets is the group ids of the NodeSets some Node is labelled
// with (nodeutil.NodeSetOf), read in one pass over the Nodes: a refused
// set's exact Nodes (setNodes) are read only when some Node names it.
func (s *Server) labelledSets() (map[string]bool, error) {
	nodes, err := s.nodes.List(labels.Everything())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing Nodes: %v", err)
	}
	out := map[string]bool{}
	for _, node := range nodes {
		if namespace, name, ok := nodeutil.NodeSetOf(node.Labels); ok {
			out[namespace+"/"+name] = true
		}
	}
	return out, nil
}

// NodeGroupForNode finds a Node's NodeSet by its nodeset labels; a Node of
// no autoscaled NodeSet, or of one being deleted, gets the empty id. cluster-autoscaler also asks for
// the "fake" nodes it makes of instances it cannot match to a Node by
// provider ID (named by the instance id, without labels): a placeholder id
// belongs to the NodeSet of its Node while that Node still has no provider
// ID, and a provider ID to the NodeSet of the Node that carries it. The
// min size of a set whose nodes cannot be deleted now is its target size:
// the Nodes of a set that is not Accepted (refusedMinSize), spec.replicas
// of one rolling out (scaleDownHeld).
func (s *Server) NodeGroupForNode(_ context.Context, req *protos.NodeGroupForNodeRequest) (*protos.NodeGroupForNodeResponse, error) {
	none := &protos.NodeGroupForNodeResponse{NodeGroup: &protos.NodeGroup{}}
	if req.GetNode() == nil {
		return none, nil
	}
	for _, id := range fakeNodeIDs(req.GetNode()) {
		if group, n, ok := pendingOf(id); ok {
			return s.pendingGroup(group, n)
		}
	}
	nodeLabels := req.GetNode().GetLabels()
	if nodeLabels[nodesetv1alpha1.LabelNodeSet] == "" {
		// The caller's copy may lack labels (a fake node has none): look
		// the Node up.
		node, err := s.nodeFor(req.GetNode())
		if err != nil {
			return nil, err
		}
		if node == nil {
			return none, nil
		}
		nodeLabels = node.Labels
	}
	namespace, name, ok := nodeutil.NodeSetOf(nodeLabels)
	if !ok || s.stranger(req.GetNode(), nodeLabels) {
		return none, nil
	}
	set, err := s.sets.NodeSets(namespace).Get(name)
	if err != nil || set.Spec.Autoscaling == nil || set.DeletionTimestamp != nil {
		return none, nil // no group, as in NodeGroups
	}
	group := protoGroup(set)
	if s.unmanaged(set) != nil {
		// Read only for the Nodes of refused sets, which NodeGroups
		// lists only while they have Nodes.
		nodes, err := s.setNodes(set)
		if err != nil {
			return nil, err
		}
		refusedMinSize(group, nodes)
	} else if held := s.scaleDownHeld(set); held != "" {
		group.MinSize = max(group.MinSize, plan.Replicas(set))
		group.Debug += "; scale-down held: " + held
	}
	return &protos.NodeGroupForNodeResponse{NodeGroup: group}, nil
}

// refusedMinSize makes the min size of the group of a set nodeset adds and
// removes no node of (unmanaged) its target size, the Nodes it has
// (NodeGroupTargetSize), in NodeGroups and NodeGroupForNode alike.
// cluster-autoscaler weighs every way down against the min size: a node
// is no scale-down candidate while its group's target size is not above
// it, and it gives up on long-unregistered instances only down to it;
// and with --enforce-node-group-min-size it raises every group whose
// target size is below it. For such a set each of those calls would be
// refused, and a refusal costs more than the call: one of
// NodeGroupDeleteNodes ends cluster-autoscaler's removal of unregistered
// nodes for the groups after it in that loop, one of
// NodeGroupIncreaseSize the raises to the min size of the groups after
// it. minReplicas (lower or higher than the Nodes the set kept) or its
// spec.replicas (raised by its tenant) would ask for them.
func refusedMinSize(group *protos.NodeGroup, nodes []*corev1.Node) {
	group.MinSize = int32(len(nodes))
	group.Debug += fmt.Sprintf("; min size %d, its Nodes: nodeset adds and removes none while the NodeSet is not Accepted", len(nodes))
}

// scaleDownHeld says why NodeGroupDeleteNodes would refuse the registered
// nodes of a set nodeset manages now, or "": it is rolling out.
// cluster-autoscaler drains a node before it asks to delete it, and gives
// the node back, its pods evicted, when the deletion is refused. The one
// check before the drain that nodeset answers is the min size of the
// node's group, from NodeGroupForNode: a node is no scale-down candidate
// while its group's target size is not above it. So the min size
// NodeGroupForNode answers for a held set is its target size (NodeGroups
// keeps minReplicas, which cluster-autoscaler's deletions of instances
// without a Node are weighed against). A set that is not Accepted is held
// by refusedMinSize.
//
// A rollout is read from the set's status (nodes not of its template
// hash, unless paused), not from its Nodes: NodeGroupForNode is asked for
// every node of every loop. A status behind the Nodes only delays the
// answer; the deletion itself checks the Nodes.
func (s *Server) scaleDownHeld(set *nodesetv1alpha1.NodeSet) string {
	st := set.Status
	if st.TemplateHash != "" && plan.RollingUpdate(set) && !set.Spec.Paused && st.UpdatedReplicas < st.Replicas {
		return fmt.Sprintf("rolling out, %d of %d nodes updated", st.UpdatedReplicas, st.Replicas)
	}
	return ""
}

// pendingGroup is the group of the set's n-th replica without a Node while
// the set still has that many; none once its Nodes are made (a stale entry
// of cluster-autoscaler's cached instance list).
func (s *Server) pendingGroup(id string, n int32) (*protos.NodeGroupForNodeResponse, error) {
	none := &protos.NodeGroupForNodeResponse{NodeGroup: &protos.NodeGroup{}}
	set, err := s.group(id)
	if status.Code(err) == codes.NotFound || status.Code(err) == codes.InvalidArgument {
		return none, nil
	}
	if err != nil {
		return nil, err
	}
	nodes, err := s.setNodes(set)
	if err != nil {
		return nil, err
	}
	if n > s.pendingInstances(set, nodes) {
		return none, nil
	}
	return &protos.NodeGroupForNodeResponse{NodeGroup: protoGroup(set)}, nil
}

// stranger reports whether the node cluster-autoscaler asks about, with no
// seal among its labels, is a Node a kubelet registered or relabelled into
// a set by itself, none of its replicas (nodeutil.Replica: one nodeset
// does not hold, or a stranger before the node controller marks it). It
// is in no node group, as NodeGroupNodes leaves it out too.
func (s *Server) stranger(want *protos.ExternalGrpcNode, nodeLabels map[string]string) bool {
	if _, sealed := nodeLabels[nodesetv1alpha1.LabelSeal]; sealed {
		return false
	}
	node, err := s.nodes.Get(want.GetName())
	if err != nil {
		return false
	}
	class, _ := s.classes.Get(node.Labels[nodesetv1alpha1.LabelNodeClass]) // nil when gone
	return !nodeutil.Replica(node, class, time.Now())
}

// nodeFor is the Node cluster-autoscaler's node stands for: the Node of
// that name; for a fake node named by a placeholder, the Node it names
// while that Node has no provider ID; for one named by a provider ID, the
// Node with that provider ID. nil when there is none.
func (s *Server) nodeFor(want *protos.ExternalGrpcNode) (*corev1.Node, error) {
	for _, id := range fakeNodeIDs(want) {
		if name, ok := placeholderNode(id); ok {
			node, err := s.nodes.Get(name)
			if apierrors.IsNotFound(err) || (err == nil && node.Spec.ProviderID != "") {
				return nil, nil // gone, or registered since: a stale id
			}
			if err != nil {
				return nil, status.Errorf(codes.Unavailable, "reading Node %s: %v", name, err)
			}
			return node, nil
		}
	}
	if node, err := s.nodes.Get(want.GetName()); err == nil {
		return node, nil
	}
	if want.GetProviderID() == "" {
		return nil, nil
	}
	nodes, err := s.nodes.List(labels.Everything())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing Nodes: %v", err)
	}
	for _, node := range nodes {
		if node.Spec.ProviderID == want.GetProviderID() {
			return node, nil
		}
	}
	return nil, nil
}

// NodeGroupTargetSize is the NodeSet's spec.replicas (0 once it is gone),
// as targetSize tells it.
func (s *Server) NodeGroupTargetSize(_ context.Context, req *protos.NodeGroupTargetSizeRequest) (*protos.NodeGroupTargetSizeResponse, error) {
	set, err := s.readGroup(req.GetId())
	if err != nil {
		return nil, err
	}
	if set == nil {
		return &protos.NodeGroupTargetSizeResponse{}, nil
	}
	nodes, err := s.setNodes(set)
	if err != nil {
		return nil, err
	}
	if s.unmanaged(set) != nil {
		// nodeset neither adds nor removes a Node of it: its size is
		// the Nodes it has (pendingInstances).
		return &protos.NodeGroupTargetSizeResponse{TargetSize: int32(len(nodes))}, nil
	}
	return &protos.NodeGroupTargetSizeResponse{TargetSize: targetSize(set, nodes)}, nil
}

// pendingInstances is how many pending instances NodeGroupNodes lists of
// the set: none for a set that is no group, or that nodeset makes no
// Nodes for (unmanaged). For such a set no machine is coming, and listed,
// its tenant's spec.replicas (raised while the webhook was away) would be
// up to maxPendingInstances upcoming nodes to cluster-autoscaler, each a
// copy of the set's Node that other tenants' pending pods are simulated
// onto instead of being given a real scale-up, for
// --max-node-provision-time.
func (s *Server) pendingInstances(set *nodesetv1alpha1.NodeSet, nodes []*corev1.Node) int32 {
	if !isGroup(set) || s.unmanaged(set) != nil {
		return 0
	}
	return listedPending(set, nodes)
}

// targetSize is the target size cluster-autoscaler is told for the set:
// spec.replicas, but for a set short of more Nodes than NodeGroupNodes
// lists (maxPendingInstances) that has fewer Nodes than its minReplicas,
// the Nodes and the pending instances listed. cluster-autoscaler finds a
// group whose registered nodes are fewer than its target size less its
// unregistered instances of an incorrect size, and after
// --max-node-provision-time lowers the target to the registered nodes
// (fixNodeGroupSize, with no regard to the min size). For such a set that
// would go below minReplicas, which the API server refuses, and the
// refusal aborts cluster-autoscaler's whole loop, every loop, for every
// group: a tenant's set of a huge minReplicas in a class that gives it
// fewer Nodes (its limits, a class its namespace may not use) would stop
// all autoscaling. Told what it can see, it finds the size correct. A set
// at or above its minReplicas is told spec.replicas, and lowered to its
// Nodes as before.
func targetSize(set *nodesetv1alpha1.NodeSet, nodes []*corev1.Node) int32 {
	replicas := plan.Replicas(set)
	unlisted := pending(set, nodes) - listedPending(set, nodes)
	if unlisted == 0 || !isGroup(set) || int64(len(nodes)) >= int64(set.Spec.Autoscaling.MinReplicas) {
		return replicas
	}
	return replicas - unlisted
}

// NodeGroupIncreaseSize raises spec.replicas within maxReplicas and the
// class's limits. Past the limits it adds the nodes that fit, and is
// refused only when none does: NodeGroups gives every NodeSet of a class
// all the room that is left as its max size, and cluster-autoscaler,
// balancing one scale-up between similar groups, caps each at its own,
// so together they may ask for more than the room. A refusal would make
// it back that group off (5 minutes at first) and add nothing there; the
// nodes that fit are what it would have asked for with the max size of
// the moment.
//
// Scale-ups of one class's NodeSets take turns, and each counts the
// nodes the others were told to grow to (room), so that two of them,
// grown one right after the other or at once (--parallel-scale-up), are
// not both told yes before the first one's Nodes exist.
func (s *Server) NodeGroupIncreaseSize(ctx context.Context, req *protos.NodeGroupIncreaseSizeRequest) (*protos.NodeGroupIncreaseSizeResponse, error) {
	if req.GetDelta() <= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "size increase must be positive, got %d", req.GetDelta())
	}
	cached, err := s.group(req.GetId())
	if err != nil {
		return nil, err
	}
	release, err := s.growing.take(ctx, cached.Spec.NodeClassName)
	if err != nil {
		return nil, status.Errorf(codes.DeadlineExceeded, "node group %s: waiting for the other scale-ups of NodeClass %s: %v", req.GetId(), cached.Spec.NodeClassName, err)
	}
	defer release()
	var added int32
	err = s.update(ctx, req.GetId(), func(set *nodesetv1alpha1.NodeSet) error {
		if err := s.mayGrow(set); err != nil {
			return err
		}
		// In 64 bits: a delta near the largest int32 must not wrap round
		// to a small or negative size that passes the checks.
		target := int64(plan.Replicas(set)) + int64(req.GetDelta())
		if target > int64(set.Spec.Autoscaling.MaxReplicas) {
			return status.Errorf(codes.InvalidArgument, "size increase too large: %s would have %d nodes, spec.autoscaling.maxReplicas is %d",
				GroupID(set), target, set.Spec.Autoscaling.MaxReplicas)
		}
		target, err := s.withinLimits(ctx, set, target)
		if err != nil {
			return err
		}
		added = int32(target) - plan.Replicas(set)
		replicas := int32(target)
		set.Spec.Replicas = &replicas
		return nil
	})
	if err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	if added < req.GetDelta() {
		logger.Info("cluster-autoscaler asked for more nodes than the NodeClass's limits leave room for: adding those that fit",
			"nodeset", req.GetId(), "delta", req.GetDelta(), "added", added)
	} else {
		logger.V(2).Info("cluster-autoscaler increased a NodeSet", "nodeset", req.GetId(), "delta", req.GetDelta())
	}
	return &protos.NodeGroupIncreaseSizeResponse{}, nil
}

// NodeGroupDeleteNodes removes exactly the named Nodes: the lowered replicas
// and the victims are written in one write of the NodeSet.
func (s *Server) NodeGroupDeleteNodes(ctx context.Context, req *protos.NodeGroupDeleteNodesRequest) (*protos.NodeGroupDeleteNodesResponse, error) {
	var victims, stale []string
	err := s.update(ctx, req.GetId(), func(set *nodesetv1alpha1.NodeSet) error {
		machines := 0 // victims with a machine (a provider ID)
		nodes, err := s.setNodes(set)
		if err != nil {
			return err
		}
		listed := plan.DeleteList(set)
		victims, stale, machines = victims[:0], stale[:0], 0
		// Replacements the controller owes for Nodes being deleted that
		// spec.replicas still counts (deleted by hand, replaced,
		// interrupted): one such Node named here is a replica fewer, as
		// for any other Node. A Node deleted because replicas went down
		// (more Nodes than replicas stay) is no replica any more.
		var staying int32
		for _, n := range nodes {
			if n.DeletionTimestamp == nil && !listed[n.Name] {
				staying++
			}
		}
		owed := plan.Replicas(set) - staying
		// Replicas without a Node go by lowering the count alone, as
		// DecreaseTargetSize would: no Node is named.
		unmade := map[string]bool{}
		for _, want := range req.GetNodes() {
			if id, ok := pendingInstance(want); ok {
				if group, _, _ := pendingOf(id); group != GroupID(set) {
					return status.Errorf(codes.InvalidArgument, "node %q (provider ID %q) does not belong to node group %s", want.GetName(), want.GetProviderID(), GroupID(set))
				}
				unmade[id] = true
				continue
			}
			if id, ok := registeredSince(nodes, want); ok {
				// An entry of cluster-autoscaler's cached instance list
				// older than the Node's provider ID: the instance it
				// gives up on has registered, and there is nothing to
				// delete. Refused, the whole call would fail, the rest
				// of its nodes with it (and, for long-unregistered
				// nodes, every group after this one in that loop).
				stale = append(stale, id)
				continue
			}
			node, err := victim(set, nodes, want)
			if err != nil {
				return err
			}
			if listed[node.Name] {
				continue // already going: no second decrement
			}
			if node.DeletionTimestamp != nil {
				if owed <= 0 {
					continue // going, and no replica of spec.replicas
				}
				owed--
			}
			listed[node.Name] = true
			victims = append(victims, node.Name)
			if node.Spec.ProviderID != "" {
				machines++
			}
		}
		if len(victims) > 0 {
			if err := s.unmanaged(set); err != nil {
				return err
			}
			// A Node with no machine (a create that failed, or one that
			// never registered) drains nothing and is no available node
			// of the rollout: it goes also while the set rolls out, or
			// cluster-autoscaler, which deletes such instances in every
			// loop, would keep it and its replica for the whole rollout.
			if machines > 0 && plan.RollingOut(set, nodes) {
				return status.Errorf(codes.FailedPrecondition, "NodeSet %s is rolling out its nodes; scale-down waits until the rollout is complete", GroupID(set))
			}
		}
		// Pending ids are positions: past the replicas still without a
		// Node, they are stale entries too, whose Nodes have been made
		// since (and are not deleted by them).
		unmadeCount := int32(len(unmade))
		if have := pending(set, nodes); unmadeCount > have {
			stale = append(stale, fmt.Sprintf("%d of %d nodeset-pending instances", unmadeCount-have, unmadeCount))
			unmadeCount = have
		}
		if len(victims) == 0 && unmadeCount == 0 {
			return nil
		}
		target := plan.Replicas(set) - int32(len(victims)) - unmadeCount
		if target < set.Spec.Autoscaling.MinReplicas {
			return status.Errorf(codes.FailedPrecondition, "deleting %d node(s) would take %s to %d nodes, below spec.autoscaling.minReplicas %d",
				int32(len(victims))+unmadeCount, GroupID(set), target, set.Spec.Autoscaling.MinReplicas)
		}
		if len(victims) == 0 {
			set.Spec.Replicas = &target
			return nil
		}
		setDeleteList(set, listed)
		set.Spec.Replicas = &target
		return nil
	})
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("cluster-autoscaler deleted nodes", "nodeset", req.GetId(), "nodes", victims, "registeredSince", stale)
	return &protos.NodeGroupDeleteNodesResponse{}, nil
}

// setDeleteList writes listed, sorted, as the set's delete-nodes annotation.
func setDeleteList(set *nodesetv1alpha1.NodeSet, listed map[string]bool) {
	names := make([]string, 0, len(listed))
	for name := range listed {
		names = append(names, name)
	}
	sort.Strings(names)
	if set.Annotations == nil {
		set.Annotations = map[string]string{}
	}
	set.Annotations[nodesetv1alpha1.AnnotationDeleteNodes] = strings.Join(names, ",")
}

// registeredSince reports whether cluster-autoscaler's node names a Node of
// nodes by its placeholder instance id after the Node got a provider ID,
// and that id.
func registeredSince(nodes []*corev1.Node, want *protos.ExternalGrpcNode) (string, bool) {
	id, node, named := placeholderFor(nodes, want)
	return id, named && node != nil && node.Spec.ProviderID != ""
}

// placeholderFor is the placeholder instance id cluster-autoscaler's node
// is named by, if it is (named), and the Node of nodes it stands for, nil
// when none of them.
func placeholderFor(nodes []*corev1.Node, want *protos.ExternalGrpcNode) (id string, node *corev1.Node, named bool) {
	for _, id := range fakeNodeIDs(want) {
		name, ok := placeholderNode(id)
		if !ok {
			continue
		}
		for _, n := range nodes {
			if n.Name == name {
				return id, n, true
			}
		}
		return id, nil, true
	}
	return "", nil, false
}

// pendingInstance is the pending instance id cluster-autoscaler's node is
// named by, if any.
func pendingInstance(want *protos.ExternalGrpcNode) (string, bool) {
	for _, id := range fakeNodeIDs(want) {
		if _, _, ok := pendingOf(id); ok {
			return id, true
		}
	}
	return "", false
}

// victim is the Node of set that cluster-autoscaler's node names. A node
// named by a placeholder instance id (a fake node of an instance that never
// registered) is that Node while it still has no provider ID (once it has
// one, the placeholder is a stale entry of cluster-autoscaler's cached
// instance list, which registeredSince finds first: deleting by it would
// remove a registered node).
func victim(set *nodesetv1alpha1.NodeSet, nodes []*corev1.Node, want *protos.ExternalGrpcNode) (*corev1.Node, error) {
	if _, node, named := placeholderFor(nodes, want); named {
		if node == nil {
			return nil, status.Errorf(codes.InvalidArgument, "node %q (provider ID %q) does not belong to node group %s", want.GetName(), want.GetProviderID(), GroupID(set))
		}
		return node, nil
	}
	for _, n := range nodes {
		if n.Name == want.GetName() && (want.GetProviderID() == "" || n.Spec.ProviderID == "" || n.Spec.ProviderID == want.GetProviderID()) {
			return n, nil
		}
	}
	for _, n := range nodes {
		if want.GetProviderID() != "" && n.Spec.ProviderID == want.GetProviderID() {
			return n, nil
		}
	}
	return nil, status.Errorf(codes.InvalidArgument, "node %q (provider ID %q) does not belong to node group %s", want.GetName(), want.GetProviderID(), GroupID(set))
}

// NodeGroupDecreaseTargetSize lowers spec.replicas by replicas whose
// machine has not been made only: it never takes a Node with a machine
// (a provider ID), booting or Ready, as a cloud's group refuses to go below
// the instances it has. cluster-autoscaler calls it to take back a
// scale-up that timed out (--max-node-provision-time after IncreaseSize),
// and a machine that is booting slowly joins later.
//
// Replicas without a Node go first; when the decrease takes Nodes too,
// the Nodes without a machine that go are named in the delete-nodes
// annotation in the same write, as NodeGroupDeleteNodes names its
// victims. Left to the NodeSetController's own choice (plan.Victims), a
// lower spec.replicas would remove a Node marked nodeset.dev/delete-node
// first, machine and pods and all, and keep the Node without a machine
// whose replica the decrease was allowed for.
func (s *Server) NodeGroupDecreaseTargetSize(ctx context.Context, req *protos.NodeGroupDecreaseTargetSizeRequest) (*protos.NodeGroupDecreaseTargetSizeResponse, error) {
	if req.GetDelta() >= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "size decrease must be negative, got %d", req.GetDelta())
	}
	err := s.update(ctx, req.GetId(), func(set *nodesetv1alpha1.NodeSet) error {
		nodes, err := s.setNodes(set)
		if err != nil {
			return err
		}
		// A Node named for deletion is going, even before the controller
		// has deleted it: DeleteNodes answers when the name is written down.
		going := plan.DeleteList(set)
		made := 0
		// The Nodes the NodeSetController weighs against spec.replicas
		// (plan.Staying, not listed), and those of them without a machine.
		var staying int
		var unmade []*corev1.Node
		for _, n := range nodes {
			if n.DeletionTimestamp != nil || going[n.Name] {
				continue
			}
			hasMachine := n.Spec.ProviderID != "" || nodeutil.IsReady(n)
			if hasMachine {
				made++
			}
			if n.Annotations[nodesetv1alpha1.AnnotationReplace] != "" {
				continue // going once its replacement is up
			}
			staying++
			if !hasMachine {
				unmade = append(unmade, n)
			}
		}
		target := plan.Replicas(set) + req.GetDelta() // delta < 0 and replicas >= 0: no overflow
		if target < set.Spec.Autoscaling.MinReplicas {
			// The API server would refuse the update; refused here, with
			// the reason.
			return status.Errorf(codes.FailedPrecondition, "target size %d + %d of %s would be below spec.autoscaling.minReplicas %d",
				plan.Replicas(set), req.GetDelta(), GroupID(set), set.Spec.Autoscaling.MinReplicas)
		}
		if target < int32(made) {
			return status.Errorf(codes.FailedPrecondition, "attempt to delete existing nodes: %s has %d nodes with a machine, target size %d + %d would be %d",
				GroupID(set), made, plan.Replicas(set), req.GetDelta(), target)
		}
		// target >= made, so the Nodes past it are at most those without
		// a machine.
		if surplus := staying - int(target); surplus > 0 {
			minReady := time.Duration(set.Spec.MinReadySeconds) * time.Second
			for _, n := range plan.Victims(unmade, surplus, set.Spec.DeletePolicy, set.Status.TemplateHash, minReady, time.Now()) {
				going[n.Name] = true
			}
			setDeleteList(set, going)
		}
		set.Spec.Replicas = &target
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &protos.NodeGroupDecreaseTargetSizeResponse{}, nil
}

// update applies mutate to the latest NodeSet of group id and writes what
// it changed in one patch (scalePatch), conditional on the resourceVersion
// read, retrying on conflicts with a fresh read.
//
// Writes to one NodeSet take turns: cluster-autoscaler deletes each node
// of a scale-down in its own NodeGroupDeleteNodes call, all at once
// (--max-scale-down-parallelism, default 10), and as many writers racing
// on one resourceVersion would each lose to the others until their
// retries ran out. Each waits for its turn as long as its call's deadline
// allows; conflicts left (the controllers' own writes) are retried.
func (s *Server) update(ctx context.Context, id string, mutate func(*nodesetv1alpha1.NodeSet) error) error {
	cached, err := s.group(id)
	if err != nil {
		return err
	}
	release, err := s.writing.take(ctx, GroupID(cached))
	if err != nil {
		return status.Errorf(codes.DeadlineExceeded, "node group %s: waiting for the other writes to it: %v", id, err)
	}
	defer release()
	var written *nodesetv1alpha1.NodeSet
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		set, err := s.client.NodesetV1alpha1().NodeSets(cached.Namespace).Get(ctx, cached.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if set.Spec.Autoscaling == nil {
			return status.Errorf(codes.NotFound, "node group %s: NodeSet has no spec.autoscaling", id)
		}
		if set.DeletionTimestamp != nil {
			return status.Errorf(codes.NotFound, "node group %s: the NodeSet is being deleted", id)
		}
		before := set.DeepCopy()
		if err := mutate(set); err != nil {
			return err
		}
		patch, changed := scalePatch(before, set)
		if !changed {
			return nil
		}
		written, err = s.client.NodesetV1alpha1().NodeSets(set.Namespace).Patch(ctx, set.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	var st interface{ GRPCStatus() *status.Status }
	switch {
	case err == nil:
		s.awaitCached(ctx, written)
		return nil
	case errors.As(err, &st):
		return err
	case apierrors.IsNotFound(err):
		return status.Errorf(codes.NotFound, "node group %s: %v", id, err)
	default:
		return status.Errorf(codes.Unavailable, "node group %s: %v", id, err)
	}
}

// cacheWait bounds how long a write waits for the cache to show it.
const cacheWait = 2 * time.Second

// awaitCached waits, for at most cacheWait, until the NodeSet cache holds
// written (the NodeSet as a write returned it) or a later version of it.
// The calls that read a group (NodeGroupTargetSize, NodeGroupNodes) read
// the cache: without the wait, cluster-autoscaler's next loop, run before
// the cache has the new spec.replicas, would read the target size from
// before its scale-up, count none of it as upcoming, and scale up again
// for the same pods. The write stands whether or not the cache catches up
// in time. resourceVersions are compared as the integers etcd makes them;
// one that is not waits for nothing.
func (s *Server) awaitCached(ctx context.Context, written *nodesetv1alpha1.NodeSet) {
	if written == nil {
		return
	}
	want, err := strconv.ParseUint(written.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, cacheWait)
	defer cancel()
	_ = wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		cached, err := s.sets.NodeSets(written.Namespace).Get(written.Name)
		if err != nil {
			return apierrors.IsNotFound(err), nil // deleted since: nothing to wait for
		}
		if cached.UID != written.UID {
			return true, nil
		}
		have, err := strconv.ParseUint(cached.ResourceVersion, 10, 64)
		return err != nil || have >= want, nil
	})
}

// scalePatch is the merge patch that writes what mutate changed of the set
// read as before, spec.replicas and the delete-nodes annotation, and
// nothing else: every other field keeps the bytes and the field manager
// its owner (a GitOps tool's manifest) gave it. The patch carries the
// resourceVersion read (nodeutil.GuardedMergePatch), so it fails with a
// conflict, as an update would, when the set changed since.
func scalePatch(before, set *nodesetv1alpha1.NodeSet) (patch []byte, changed bool) {
	metadata, fields := map[string]any{}, map[string]any{}
	if plan.Replicas(before) != plan.Replicas(set) {
		fields["spec"] = map[string]any{"replicas": plan.Replicas(set)}
	}
	if listed, ok := set.Annotations[nodesetv1alpha1.AnnotationDeleteNodes]; listed != before.Annotations[nodesetv1alpha1.AnnotationDeleteNodes] {
		var value any // null: the annotation goes
		if ok {
			value = listed
		}
		metadata["annotations"] = map[string]any{nodesetv1alpha1.AnnotationDeleteNodes: value}
	}
	if len(metadata) == 0 && len(fields) == 0 {
		return nil, false
	}
	return nodeutil.GuardedMergePatch(before.ResourceVersion, metadata, fields), true
}

// NodeGroupNodes lists every Node of the set as an instance, with its state
// and, for a machine that could not be made, the driver's error. A set that
// is no group any more (readGroup) has no pending instances: none of its
// replicas will get a Node.
func (s *Server) NodeGroupNodes(_ context.Context, req *protos.NodeGroupNodesRequest) (*protos.NodeGroupNodesResponse, error) {
	set, err := s.readGroup(req.GetId())
	if err != nil {
		return nil, err
	}
	if set == nil {
		return &protos.NodeGroupNodesResponse{}, nil
	}
	nodes, err := s.setNodes(set)
	if err != nil {
		return nil, err
	}
	resp := &protos.NodeGroupNodesResponse{}
	for _, node := range nodes {
		state := protos.InstanceStatus_instanceRunning
		switch {
		case node.DeletionTimestamp != nil:
			state = protos.InstanceStatus_instanceDeleting
		case node.Spec.ProviderID == "" || !nodeutil.IsReady(node):
			state = protos.InstanceStatus_instanceCreating
		}
		instance := &protos.Instance{Id: InstanceID(node), Status: &protos.InstanceStatus{InstanceState: state}}
		// Only a Node with no machine has an error: cluster-autoscaler
		// deletes an instance that failed to create, and a kubelet can
		// write its own Node's annotations.
		if state == protos.InstanceStatus_instanceCreating && nodeutil.ProvisioningFailed(node) {
			msg := redact.Cut(node.Annotations[nodesetv1alpha1.AnnotationProvisioningError], nodeutil.ProvisioningErrorLimit)
			code, _, _ := strings.Cut(msg, ":")
			class := int32(errorClassOther)
			if code == "OutOfCapacity" {
				class = errorClassOutOfResources
			}
			instance.Status.ErrorInfo = &protos.InstanceErrorInfo{ErrorCode: code, ErrorMessage: msg, InstanceErrorClass: class}
		}
		resp.Instances = append(resp.Instances, instance)
	}
	for n, listed := int32(1), s.pendingInstances(set, nodes); n <= listed; n++ {
		resp.Instances = append(resp.Instances, &protos.Instance{Id: pendingID(set, n),
			Status: &protos.InstanceStatus{InstanceState: protos.InstanceStatus_instanceCreating}})
	}
	return resp, nil
}

// NodeGroupTemplateNodeInfo is the Node a new member of the set would be,
// so that a NodeSet at zero can be scaled up. The Node goes in both the
// field older releases read and the one newer releases read.
//
// cluster-autoscaler asks it of every group of the list its loop started
// with (NodeGroups) that has no Node Ready for a minute to copy. Up to
// cluster-autoscaler 1.33 any error but Unimplemented aborts that loop,
// every group's scale-ups and scale-downs with it (1.34 and later log it
// and go on without a template). So every answer that is not a template is
// Unimplemented ("no template"), with the reason: a set deleted, being
// deleted or no longer autoscaled since the list was made (which its
// tenant may do again and again), as well as one nodeset makes no Nodes
// for. Only an id that is no <namespace>/<nodeset> at all, which no list
// holds, is refused as such.
func (s *Server) NodeGroupTemplateNodeInfo(_ context.Context, req *protos.NodeGroupTemplateNodeInfoRequest) (*protos.NodeGroupTemplateNodeInfoResponse, error) {
	set, err := s.group(req.GetId())
	if status.Code(err) == codes.NotFound {
		return nil, status.Error(codes.Unimplemented, status.Convert(err).Message())
	}
	if err != nil {
		return nil, err
	}
	// A set nodeset makes no Nodes for (a class its namespace may not use,
	// labels it may not set) has no template either: offered, its template
	// could draw other tenants' pending pods to a scale-up that is then
	// refused, and the group backed off, in every loop. Unimplemented is
	// "no template", which cluster-autoscaler takes without an error.
	if err := s.mayGrow(set); err != nil {
		return nil, status.Error(codes.Unimplemented, status.Convert(err).Message())
	}
	node, err := s.TemplateNode(set)
	if err != nil {
		// Its class gone since mayGrow looked, or no capacity reported
		// for its template yet.
		return nil, status.Error(codes.Unimplemented, status.Convert(err).Message())
	}
	data, err := node.Marshal()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "marshaling the template node of %s: %v", GroupID(set), err)
	}
	return &protos.NodeGroupTemplateNodeInfoResponse{NodeInfo: data, NodeBytes: data}, nil
}

// kubeletMaxPods is the kubelet's default --max-pods.
const kubeletMaxPods = 110

// TemplateNode builds the Node a new member of set would be: its labels,
// taints, capacity and allocatable, Ready. A capacity without "pods" gets
// the kubelet's default: cluster-autoscaler runs the scheduler's filters
// on the template, and they fit no pod on a node that allows none.
func (s *Server) TemplateNode(set *nodesetv1alpha1.NodeSet) (*corev1.Node, error) {
	class, err := s.classes.Get(set.Spec.NodeClassName)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node group %s: NodeClass %s: %v", GroupID(set), set.Spec.NodeClassName, err)
	}
	effective, err := resolve.EffectiveSpec(class, set)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node group %s: %v", GroupID(set), err)
	}
	capacity, err := templateCapacity(class, set, &effective)
	if err != nil {
		return nil, status.Errorf(codes.Unimplemented, "node group %s: %v", GroupID(set), err)
	}
	name := fmt.Sprintf("template-node-for-%s-%s", set.Namespace, set.Name)
	nodeLabels := map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
	}
	for k, v := range capacity.Labels {
		nodeLabels[k] = v
	}
	for k, v := range resolve.NodeLabels(&effective, class.Name, set, set.Status.TemplateHash) {
		nodeLabels[k] = v
	}
	maps.Copy(nodeLabels, resolve.AcceleratorLabels(capacity.Resources))
	resources := capacity.Resources.DeepCopy()
	if resources == nil {
		resources = corev1.ResourceList{}
	}
	allocatable := capacity.Allocatable.DeepCopy()
	if len(allocatable) == 0 {
		allocatable = resources.DeepCopy()
	}
	if _, ok := resources[corev1.ResourcePods]; !ok {
		// The kubelet's own default, which it reports when the driver
		// does not say: without it, no pod would fit the template.
		resources[corev1.ResourcePods] = *resource.NewQuantity(kubeletMaxPods, resource.DecimalSI)
	}
	if _, ok := allocatable[corev1.ResourcePods]; !ok {
		allocatable[corev1.ResourcePods] = resources[corev1.ResourcePods]
	}
	taints := append(append([]corev1.Taint(nil), capacity.Taints...), resolve.NodeTaints(&effective, set)...)
	now := metav1.NewTime(time.Now())
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: nodeLabels, Annotations: resolve.NodeAnnotations(&effective, set)},
		Spec:       corev1.NodeSpec{Taints: taints, ProviderID: unregisteredPrefix + name},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: allocatable,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}},
		},
	}, nil
}

// templateCapacity is what a new node of the set offers: the capacity the
// node controller published for the set's current template, or, for a set
// that overrides nothing of its class's driver section, the class's.
func templateCapacity(class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet, effective *nodesetv1alpha1.NodeClassSpec) (*nodesetv1alpha1.NodeCapacity, error) {
	hash := resolve.TemplateHash(effective, set)
	if c := set.Status.Capacity; c != nil && c.TemplateHash == hash && len(c.Resources) > 0 {
		return &c.NodeCapacity, nil
	}
	if !resolve.Overrides(set) && class.Status.Capacity != nil && len(class.Status.Capacity.Resources) > 0 {
		return class.Status.Capacity, nil
	}
	return nil, fmt.Errorf("the driver of NodeClass %s has not reported the capacity of a node of template %s (NodeSet status.capacity)", class.Name, hash)
}

// NodeGroupGetOptions is Unimplemented for every NodeSet, so that
// cluster-autoscaler applies its own flags to each. Any answer would cost
// more than it gives: cluster-autoscaler's externalgrpc client builds a
// group's options only from the protocol's fields, and the protocol has
// none for the max node startup time, so an answered group's is 0 — every
// new Node not yet Ready would count as unready instead of upcoming, and
// each scale-up of the group would be repeated until its nodes are Ready.
// The answer is the same for an id this replica does not know (yet): any
// other error would make cluster-autoscaler fail to register a scale-up.
func (s *Server) NodeGroupGetOptions(_ context.Context, req *protos.NodeGroupAutoscalingOptionsRequest) (*protos.NodeGroupAutoscalingOptionsResponse, error) {
	return nil, status.Errorf(codes.Unimplemented, "node group %s: nodeset has no per-NodeSet options; cluster-autoscaler's flags apply", req.GetId())
}

// Refresh never fails: the listers are kept current by their informers.
func (s *Server) Refresh(context.Context, *protos.RefreshRequest) (*protos.RefreshResponse, error) {
	return &protos.RefreshResponse{}, nil
}

// Cleanup has nothing to release.
func (s *Server) Cleanup(context.Context, *protos.CleanupRequest) (*protos.CleanupResponse, error) {
	return &protos.CleanupResponse{}, nil
}

// GPULabel names the node label cluster-autoscaler reads as a node's
// accelerator type: nodeset puts it on every Node whose machine has a GPU
// (resolve.AcceleratorLabels), so that a Ready Node whose device plugin
// has not reported its GPUs yet counts as starting, not as ready capacity.
func (s *Server) GPULabel(context.Context, *protos.GPULabelRequest) (*protos.GPULabelResponse, error) {
	return &protos.GPULabelResponse{Label: GPULabel}, nil
}

// GetAvailableGPUTypes: nodeset offers no GPU types of its own.
func (s *Server) GetAvailableGPUTypes(context.Context, *protos.GetAvailableGPUTypesRequest) (*protos.GetAvailableGPUTypesResponse, error) {
	return &protos.GetAvailableGPUTypesResponse{GpuTypes: map[string]*anypb.Any{}}, nil
}

// PricingNodePrice is not offered: the protocol's answer is Unimplemented,
// and cluster-autoscaler then uses an expander that needs no prices.
func (s *Server) PricingNodePrice(context.Context, *protos.PricingNodePriceRequest) (*protos.PricingNodePriceResponse, error) {
	return nil, status.Error(codes.Unimplemented, "nodeset does not price nodes")
}

// PricingPodPrice is not offered either.
func (s *Server) PricingPodPrice(context.Context, *protos.PricingPodPriceRequest) (*protos.PricingPodPriceResponse, error) {
	return nil, status.Error(codes.Unimplemented, "nodeset does not price pods")
}
