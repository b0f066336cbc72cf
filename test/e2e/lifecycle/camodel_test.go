package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// caModel acts as cluster-autoscaler (1.36) does through the externalgrpc
// cloud provider, with the accounting rules of its clusterstate registry,
// so that a test can count what it would add. The rules, as read in
// cluster-autoscaler's clusterstate, externalgrpc, utils/taints and
// static_autoscaler:
//   - Nodes are matched to instances by spec.providerID; an instance no
//     Node carries, expected to register (no error, not deleting), is a
//     "fake" node whose name and provider ID are the instance id, with no
//     labels. Instance lists are cached per group and refreshed on a period
//     (2 min), or every loop while the group is scaling up, and after a
//     DeleteNodes of unregistered nodes.
//   - NodeGroupForNode answers are cached for one loop (until Refresh).
//   - A Ready Node with a startup taint (key under
//     startup-taint.cluster-autoscaler.kubernetes.io/ or
//     ignore-taint.cluster-autoscaler.kubernetes.io/, or named by
//     --startup-taint) counts as not Ready.
//   - A registered Node is Ready, NotStarted (not Ready and created less
//     than the max node startup time ago) or Unready; a fake node is
//     Unregistered, or LongUnregistered once seen for longer than the max
//     node provision time.
//   - The max node startup time is the flag's unless NodeGroupGetOptions
//     answers at all: the client builds the options from the protocol's
//     fields only and the protocol has none for it, so an answer makes it
//     0. The provision time is the answer's MaxNodeProvisionDuration.
//   - upcoming = target - (ready + unready + longUnregistered), counted
//     only while the group has a scale-up request; the request ends when
//     target <= registered - notStarted.
//   - A scale-up request still with nodes to come the max node provision
//     time after its last IncreaseSize has timed out (1.36): the group is
//     backed off (5 minutes at first) and the whole increase is taken back
//     with DecreaseTargetSize, whose error is only logged.
//   - Long-unregistered fake nodes are deleted with one DeleteNodes call per
//     group, never below the group's min size.
//   - A scale-up places the pending pods on the free room of Ready nodes
//     and of upcoming nodes (template copies), and asks for as many new
//     template nodes as first-fit binpacking of the rest needs.
type caModel struct {
	t         *testing.T
	ca        protos.CloudProviderClient
	kube      kubernetes.Interface
	namespace string // the node groups of this namespace only
	flags     caFlags
	scaleUp   bool

	instances         map[string]cachedInstances
	unregisteredSince map[string]time.Time
	requests          map[string]bool
	increased         map[string]int32
	requestAt         map[string]time.Time // the scale-up request's last IncreaseSize
	requestIncrease   map[string]int32     // and its whole increase
	backoffUntil      map[string]time.Time
	reverts           []string // "<group> <delta>: <code>" of each timed-out scale-up taken back
	deleteCalls       [][]string
	foreignTaints     map[string]bool // Nodes seen starting with only a taint CA does not know
	sawStale          map[string]bool // fake nodes of instance ids no longer any Node's
	loops             int
}

// caFlags are the cluster-autoscaler flags the model uses.
type caFlags struct {
	maxNodeStartupTime   time.Duration // --max-node-startup-time (default 15m)
	maxNodeProvisionTime time.Duration // --max-node-provision-time (default 15m)
	instancesRefresh     time.Duration // fixed in cluster-autoscaler: 2m
	startupTaints        []string      // --startup-taint (default none)
}

var caDefaultFlags = caFlags{maxNodeStartupTime: 15 * time.Minute, maxNodeProvisionTime: 15 * time.Minute, instancesRefresh: 2 * time.Minute}

type cachedInstances struct {
	instances []*protos.Instance
	refreshed time.Time
}

type caGroup struct {
	id                   string
	min, max, target     int32
	startup, provisioned time.Duration
}

type caReadiness struct {
	ready, unready, notStarted, registered, unregistered, longUnregistered []string
}

func newCAModel(t *testing.T, c *controllers, namespace string, flags caFlags) *caModel {
	kube, _ := clients(t)
	return &caModel{t: t, ca: autoscalerClient(t, c), kube: kube, namespace: namespace, flags: flags, scaleUp: true,
		instances: map[string]cachedInstances{}, unregisteredSince: map[string]time.Time{}, requests: map[string]bool{},
		increased: map[string]int32{}, requestAt: map[string]time.Time{}, requestIncrease: map[string]int32{},
		backoffUntil: map[string]time.Time{}, foreignTaints: map[string]bool{}, sawStale: map[string]bool{}}
}

const (
	caStartupTaintPrefix = "startup-taint.cluster-autoscaler.kubernetes.io/"
	caIgnoreTaintPrefix  = "ignore-taint.cluster-autoscaler.kubernetes.io/"
)

func (m *caModel) isStartupTaint(key string) bool {
	return strings.HasPrefix(key, caStartupTaintPrefix) || strings.HasPrefix(key, caIgnoreTaintPrefix) || contains(m.flags.startupTaints, key)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// caReady is a Node's readiness as cluster-autoscaler sees it.
func (m *caModel) caReady(node *corev1.Node) bool {
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, taint := range node.Spec.Taints {
		if m.isStartupTaint(taint.Key) {
			return false
		}
	}
	return ready
}

// loop is one cluster-autoscaler loop.
func (m *caModel) loop(ctx context.Context) error {
	m.loops++
	now := time.Now()
	if _, err := m.ca.Refresh(ctx, &protos.RefreshRequest{}); err != nil {
		return err
	}
	groupsResp, err := m.ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
	if err != nil {
		return err
	}
	groups := map[string]*caGroup{}
	for _, g := range groupsResp.NodeGroups {
		if !strings.HasPrefix(g.Id, m.namespace+"/") {
			continue
		}
		size, err := m.ca.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: g.Id})
		if err != nil {
			return err
		}
		group := &caGroup{id: g.Id, min: g.MinSize, max: g.MaxSize, target: size.TargetSize,
			startup: m.flags.maxNodeStartupTime, provisioned: m.flags.maxNodeProvisionTime}
		opts, err := m.ca.NodeGroupGetOptions(ctx, &protos.NodeGroupAutoscalingOptionsRequest{Id: g.Id, Defaults: &protos.NodeGroupAutoscalingOptions{
			ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.5,
			ScaleDownUnneededDuration: durationpb.New(10 * time.Minute), ScaleDownUnreadyDuration: durationpb.New(20 * time.Minute),
			MaxNodeProvisionDuration: durationpb.New(m.flags.maxNodeProvisionTime)}})
		switch {
		case status.Code(err) == codes.Unimplemented:
		case err != nil:
			return fmt.Errorf("NodeGroupGetOptions(%s): %w", g.Id, err)
		default:
			// The upstream message has no startup-time field: whatever was
			// sent, the client's value is 0.
			group.startup = 0
			group.provisioned = opts.GetNodeGroupAutoscalingOptions().GetMaxNodeProvisionDuration().AsDuration()
		}
		groups[g.Id] = group
	}

	forNode := map[string]string{} // NodeGroupForNode, cached for the loop
	groupOf := func(name, providerID string, labels map[string]string) (string, error) {
		if id, ok := forNode[name+providerID]; ok {
			return id, nil
		}
		resp, err := m.ca.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: name, ProviderID: providerID, Labels: labels}})
		if err != nil {
			return "", err
		}
		if id := resp.GetNodeGroup().GetId(); id != "" {
			forNode[name+providerID] = id
			return id, nil
		}
		return "", nil
	}

	nodeList, err := m.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	readiness := map[string]*caReadiness{}
	for id := range groups {
		readiness[id] = &caReadiness{}
	}
	nodesOf := map[string][]*corev1.Node{}
	providerIDs := map[string]bool{}
	for i := range nodeList.Items {
		node := &nodeList.Items[i]
		providerIDs[node.Spec.ProviderID] = true
		id, err := groupOf(node.Name, node.Spec.ProviderID, node.Labels)
		if err != nil {
			return err
		}
		group := groups[id]
		if group == nil {
			continue
		}
		r := readiness[id]
		nodesOf[id] = append(nodesOf[id], node)
		r.registered = append(r.registered, node.Name)
		if hasTaint(node, nodesetv1alpha1.TaintUnregistered) && !m.hasKnownStartupTaint(node) {
			// Ready before the taint goes, it would count as capacity
			// that pods do not fit on.
			m.foreignTaints[node.Name] = true
		}
		switch {
		case m.caReady(node):
			r.ready = append(r.ready, node.Name)
		case node.CreationTimestamp.Add(group.startup).After(now):
			r.notStarted = append(r.notStarted, node.Name)
		default:
			r.unready = append(r.unready, node.Name)
		}
	}

	seen := map[string]bool{}
	for id, group := range groups {
		entry, ok := m.instances[id]
		if !ok || now.Sub(entry.refreshed) > m.flags.instancesRefresh || m.scalingUp(group, readiness[id]) {
			resp, err := m.ca.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: id})
			if err != nil {
				return err
			}
			entry = cachedInstances{instances: resp.Instances, refreshed: now}
			m.instances[id] = entry
		}
		for _, instance := range entry.instances {
			st := instance.GetStatus()
			if providerIDs[instance.Id] || (st != nil && (st.InstanceState == protos.InstanceStatus_instanceDeleting || st.ErrorInfo != nil)) {
				continue
			}
			seen[instance.Id] = true
			since, ok := m.unregisteredSince[instance.Id]
			if !ok {
				since = now
				m.unregisteredSince[instance.Id] = now
			}
			if name, ok := strings.CutPrefix(instance.Id, "nodeset-unregistered://"); ok {
				if node := findNode(nodeList.Items, name); node != nil && node.Spec.ProviderID != "" {
					m.sawStale[instance.Id] = true
				}
			}
			fakeGroup, err := groupOf(instance.Id, instance.Id, nil)
			if err != nil {
				return err
			}
			if groups[fakeGroup] == nil {
				continue
			}
			r := readiness[fakeGroup]
			if since.Add(groups[fakeGroup].provisioned).Before(now) {
				r.longUnregistered = append(r.longUnregistered, instance.Id)
			} else {
				r.unregistered = append(r.unregistered, instance.Id)
			}
		}
	}
	for id := range m.unregisteredSince {
		if !seen[id] {
			delete(m.unregisteredSince, id)
		}
	}

	upcoming := map[string]int32{}
	for id, group := range groups {
		r := readiness[id]
		if m.requests[id] && !m.scalingUp(group, r) {
			m.endRequest(id)
		}
		if at, ok := m.requestAt[id]; ok && m.requests[id] && at.Add(group.provisioned).Before(now) {
			delta := -m.requestIncrease[id]
			_, err := m.ca.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: id, Delta: delta})
			m.reverts = append(m.reverts, fmt.Sprintf("%s %d: %v", id, delta, status.Code(err)))
			m.t.Logf("model loop %d: scale-up of %s timed out; DecreaseTargetSize(%d): %v", m.loops, id, delta, err)
			m.backoffUntil[id] = now.Add(5 * time.Minute)
			m.endRequest(id)
		}
		if n := group.target - int32(len(r.ready)+len(r.unready)+len(r.longUnregistered)); n > 0 && m.requests[id] {
			upcoming[id] = n
		}
	}

	for id, group := range groups {
		long := readiness[id].longUnregistered
		if len(long) == 0 || group.target-group.min <= 0 {
			continue
		}
		if n := int(group.target - group.min); len(long) > n {
			long = long[:n]
		}
		var fakes []*protos.ExternalGrpcNode
		for _, instanceID := range long {
			fakes = append(fakes, &protos.ExternalGrpcNode{Name: instanceID, ProviderID: instanceID})
		}
		_, err := m.ca.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: id, Nodes: fakes})
		delete(m.instances, id)
		m.deleteCalls = append(m.deleteCalls, append([]string{fmt.Sprintf("%s: %v", id, status.Code(err))}, long...))
		if err != nil {
			m.t.Logf("model: DeleteNodes(%s, %v): %v", id, long, err)
		}
	}

	if !m.scaleUp {
		return nil
	}
	pods, err := m.kube.CoreV1().Pods(m.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(groups))
	for id := range groups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		group := groups[id]
		if m.backoffUntil[id].After(now) {
			continue
		}
		resp, err := m.ca.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: id})
		if err != nil {
			continue // no template yet: no scale-up of this group
		}
		template := &corev1.Node{}
		if err := template.Unmarshal(resp.NodeBytes); err != nil {
			return err
		}
		var pending []*corev1.Pod
		used := map[string]corev1.ResourceList{}
		for i := range pods.Items {
			pod := &pods.Items[i]
			if pod.Spec.NodeName != "" {
				used[pod.Spec.NodeName] = addRequests(used[pod.Spec.NodeName], pod)
				continue
			}
			if unschedulable(pod) && fitsTemplate(pod, template) {
				pending = append(pending, pod)
			}
		}
		if len(pending) == 0 {
			continue
		}
		var bins []corev1.ResourceList // free room
		for _, node := range nodesOf[id] {
			if m.caReady(node) && node.DeletionTimestamp == nil {
				bins = append(bins, subtract(node.Status.Allocatable, used[node.Name]))
			}
		}
		for range upcoming[id] {
			bins = append(bins, template.Status.Allocatable.DeepCopy())
		}
		sort.Slice(pending, func(i, j int) bool {
			return pending[i].Spec.Containers[0].Resources.Requests.Cpu().Cmp(*pending[j].Spec.Containers[0].Resources.Requests.Cpu()) > 0
		})
		existing := len(bins)
		for _, pod := range pending {
			placed := false
			for i := range bins {
				if fits(pod, bins[i]) {
					bins[i] = subtract(bins[i], addRequests(nil, pod))
					placed = true
					break
				}
			}
			if !placed {
				if !fits(pod, template.Status.Allocatable) {
					continue
				}
				bins = append(bins, subtract(template.Status.Allocatable, addRequests(nil, pod)))
			}
		}
		delta := int32(len(bins) - existing)
		if delta > group.max-group.target {
			delta = group.max - group.target
		}
		if delta <= 0 {
			continue
		}
		if _, err := m.ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: delta}); err != nil {
			return fmt.Errorf("IncreaseSize(%s, %d): %w", id, delta, err)
		}
		if !m.requests[id] {
			m.requestIncrease[id] = 0
		}
		m.requests[id] = true
		m.requestAt[id] = now
		m.requestIncrease[id] += delta
		m.increased[id] += delta
		m.t.Logf("model loop %d: %s +%d (target %d, ready %d, unready %d, notStarted %d, unregistered %d, upcoming %d, %d pending)",
			m.loops, id, delta, group.target, len(readiness[id].ready), len(readiness[id].unready), len(readiness[id].notStarted),
			len(readiness[id].unregistered), upcoming[id], len(pending))
	}
	return nil
}

// endRequest ends the group's scale-up request.
func (m *caModel) endRequest(id string) {
	delete(m.requests, id)
	delete(m.requestAt, id)
	delete(m.requestIncrease, id)
}

// scalingUp: the group still has nodes to come (its instance list is then
// fetched every loop).
func (m *caModel) scalingUp(group *caGroup, r *caReadiness) bool {
	return m.requests[group.id] && group.target > int32(len(r.registered)-len(r.notStarted))
}

func (m *caModel) hasKnownStartupTaint(node *corev1.Node) bool {
	for _, taint := range node.Spec.Taints {
		if m.isStartupTaint(taint.Key) {
			return true
		}
	}
	return false
}

func hasTaint(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func findNode(nodes []corev1.Node, name string) *corev1.Node {
	for i := range nodes {
		if nodes[i].Name == name {
			return &nodes[i]
		}
	}
	return nil
}

func unschedulable(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// fitsTemplate: the pod's node selector matches the template node's labels
// and it tolerates the template's taints.
func fitsTemplate(pod *corev1.Pod, template *corev1.Node) bool {
	for k, v := range pod.Spec.NodeSelector {
		if template.Labels[k] != v {
			return false
		}
	}
	for _, taint := range template.Spec.Taints {
		if taint.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := false
		for _, tol := range pod.Spec.Tolerations {
			tolerated = tolerated || tol.ToleratesTaint(klog.Background(), &taint, false)
		}
		if !tolerated {
			return false
		}
	}
	return true
}

func addRequests(list corev1.ResourceList, pod *corev1.Pod) corev1.ResourceList {
	out := list.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for _, c := range pod.Spec.Containers {
		for name, q := range c.Resources.Requests {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	pods := out[corev1.ResourcePods]
	pods.Add(resource.MustParse("1"))
	out[corev1.ResourcePods] = pods
	return out
}

func subtract(room, used corev1.ResourceList) corev1.ResourceList {
	out := room.DeepCopy()
	for name, q := range used {
		if left, ok := out[name]; ok {
			left.Sub(q)
			out[name] = left
		}
	}
	return out
}

func fits(pod *corev1.Pod, room corev1.ResourceList) bool {
	for name, q := range addRequests(nil, pod) {
		if left, ok := room[name]; ok && left.Cmp(q) < 0 {
			return false
		}
	}
	return true
}
