// Package nodeutil holds the small questions every nodeset component asks of
// a core v1 Node.
package nodeutil

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// The phases of a nodeset Node, as metrics and kubectl nodeset show them.
const (
	// PhaseProvisioning: the Node exists, its machine does not yet (no providerID).
	PhaseProvisioning = "provisioning"
	// PhaseProvisioningFailed: no machine yet, and the driver's last create
	// failed (the provisioning-error annotation); it is retried.
	PhaseProvisioningFailed = "provisioning-failed"
	// PhaseRegistering: the machine exists; its kubelet is not Ready yet or
	// the startup taint is still on.
	PhaseRegistering = "registering"
	// PhaseReady: Ready and untainted.
	PhaseReady = "ready"
	// PhaseDraining: deleted; its pods are being evicted.
	PhaseDraining = "draining"
	// PhaseDeleting: deleted and drained; its machine is going away.
	PhaseDeleting = "deleting"
)

// NodeSetOf is the namespace and name of the NodeSet whose Node labels
// these are; ok is false for a Node of no NodeSet (a lone or foreign Node)
// and for one whose labels were tampered with (Tampered).
func NodeSetOf(labels map[string]string) (namespace, name string, ok bool) {
	namespace, name = labels[nodesetv1alpha1.LabelNodeSetNamespace], labels[nodesetv1alpha1.LabelNodeSet]
	return namespace, name, namespace != "" && name != "" && !Tampered(labels)
}

// ProvisioningFailed reports whether the Node has no machine and the
// driver's last create of it failed: the node controller recorded the
// error in the provisioning-error annotation. A Node with a providerID
// has its machine (and may have a kubelet, which could write the
// annotation), whatever the annotation says.
func ProvisioningFailed(node *corev1.Node) bool {
	return node.Spec.ProviderID == "" && node.Annotations[nodesetv1alpha1.AnnotationProvisioningError] != ""
}

// Phase returns the Node's phase.
func Phase(node *corev1.Node) string {
	switch {
	case node.DeletionTimestamp != nil && node.Annotations[nodesetv1alpha1.AnnotationDrainFinished] != "":
		return PhaseDeleting
	case node.DeletionTimestamp != nil:
		return PhaseDraining
	case ProvisioningFailed(node):
		return PhaseProvisioningFailed
	case node.Spec.ProviderID == "":
		return PhaseProvisioning
	case !IsReady(node) || HasStartupTaint(node):
		return PhaseRegistering
	}
	return PhaseReady
}

// AutoscalerStartupTaint is the second startup taint of a new Node: a key
// under cluster-autoscaler's startup-taint prefix, so that cluster-autoscaler
// with its default flags counts a Node that still carries it as starting
// (upcoming), not as Ready capacity its pods do not fit on.
const AutoscalerStartupTaint = "startup-taint.cluster-autoscaler.kubernetes.io/nodeset-unregistered"

// LabelExcludeDisruption is the label that keeps a Node out of
// kube-controller-manager's node lifecycle controller's zone health
// (pkg/controller/nodelifecycle: isNodeExcludedFromDisruptionChecks,
// ComputeZoneState).
const LabelExcludeDisruption = "node.kubernetes.io/exclude-disruption"

// StartupExcludeDisruption is the value of LabelExcludeDisruption on a Node
// nodeset made before its machine registered, which tells the label apart
// from one a template asks for: only this value is removed at registration.
//
// That controller counts every Node whose Ready condition is not True in its
// zone's health, a Node no kubelet has reported on yet included. A zone with
// more than two such Nodes making 55% of it (--unhealthy-zone-threshold) is
// partially disrupted: the controller taints the zone's unreachable Nodes
// NoExecute at --secondary-node-eviction-rate, or not at all when the
// cluster has 50 Nodes or fewer; a zone with none Ready is fully disrupted.
// Nodes nodeset made for machines still booting are no failure, and a
// scale-up of many would otherwise stop the eviction of pods from the
// zone's dead Nodes until the machines registered.
const StartupExcludeDisruption = "nodeset-unregistered"

// StartupLabels are the labels nodeset gives a Node it makes before its
// machine registered; they go with the startup taints.
func StartupLabels() map[string]string {
	return map[string]string{LabelExcludeDisruption: StartupExcludeDisruption}
}

// AddStartupLabels gives labels the startup labels it does not have (a
// template's own exclude-disruption label stays as it is), and returns it.
func AddStartupLabels(labels map[string]string) map[string]string {
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range StartupLabels() {
		if _, ok := labels[k]; !ok {
			labels[k] = v
		}
	}
	return labels
}

// RemoveStartupLabels removes from labels the startup labels nodeset gave
// them (by value: a template's own label stays).
func RemoveStartupLabels(labels map[string]string) {
	for k, v := range StartupLabels() {
		if labels[k] == v {
			delete(labels, k)
		}
	}
}

// IsStartupTaint reports whether key is one of nodeset's startup taints:
// nodesetv1alpha1.TaintUnregistered or AutoscalerStartupTaint. Both go on a
// new Node together and are lifted together.
func IsStartupTaint(key string) bool {
	return key == nodesetv1alpha1.TaintUnregistered || key == AutoscalerStartupTaint
}

// HasStartupTaint reports whether the Node still has a nodeset startup taint.
func HasStartupTaint(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if IsStartupTaint(t.Key) {
			return true
		}
	}
	return false
}

// WithoutStartupTaints is taints less nodeset's startup taints.
func WithoutStartupTaints(taints []corev1.Taint) []corev1.Taint {
	out := make([]corev1.Taint, 0, len(taints))
	for _, t := range taints {
		if !IsStartupTaint(t.Key) {
			out = append(out, t)
		}
	}
	return out
}

// RegisteredTaints is the Node's taints once registered: less nodeset's
// startup taints and, as the kubelet reports Ready, less the NoSchedule
// taints that only a Ready condition other than True calls for
// (node.kubernetes.io/not-ready, which the TaintNodesByCondition admission
// plugin puts on every new Node, and node.kubernetes.io/unreachable).
// kube-controller-manager's node lifecycle controller removes those from a
// Ready Node by the same rule, each in a write of its own at its client's
// pace (20 a second by default): lifted with the startup taints, the Node is
// schedulable at once and that write is not needed. Should the Node turn
// NotReady between the read and the write, that controller sees the write
// and taints it again.
func RegisteredTaints(node *corev1.Node) []corev1.Taint {
	taints := WithoutStartupTaints(node.Spec.Taints)
	if !IsReady(node) {
		return taints
	}
	return slices.DeleteFunc(taints, func(t corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule && (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable)
	})
}

// KubeletReported reports whether a kubelet has written the Node's status:
// the node info it sends, or a Ready condition, whatever its status, that
// is not the one kube-controller-manager gives a Node no kubelet ever
// reported on. A Node an admin creates for a machine to come has neither.
func KubeletReported(node *corev1.Node) bool {
	if node.Status.NodeInfo.KubeletVersion != "" || node.Status.NodeInfo.MachineID != "" {
		return true
	}
	return slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Reason != nodeStatusNeverUpdated
	})
}

// nodeStatusNeverUpdated is the reason of the Ready condition (Unknown)
// that kube-controller-manager's node lifecycle controller gives a Node
// whose kubelet never posted its status.
const nodeStatusNeverUpdated = "NodeStatusNeverUpdated"

// IsReady reports whether the Node's Ready condition is True.
func IsReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WithoutString returns list without any s, as a new slice.
func WithoutString(list []string, s string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(item string) bool { return item == s })
}

// maxNamed is how many Node names an Event names before "and N more".
const maxNamed = 10

// NameList is how an Event about many Nodes names them: sorted, each once,
// the first ten and then "and N more", so that a scale-down of thousands
// still makes a short message. n is how many distinct names there are.
func NameList(names []string) (n int, listed string) {
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	listed = strings.Join(names[:min(len(names), maxNamed)], ", ")
	if len(names) > maxNamed {
		listed += fmt.Sprintf(" and %d more", len(names)-maxNamed)
	}
	return len(names), listed
}

// jsonPatchOp is one operation of a JSON patch (RFC 6902).
type jsonPatchOp struct {
	Op    string
	Path  string
	Value any
}

// MarshalJSON writes the value of every operation but "remove" (whose
// value may be false or empty).
func (o jsonPatchOp) MarshalJSON() ([]byte, error) {
	if o.Op == "remove" {
		return json.Marshal(struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{o.Op, o.Path})
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{o.Op, o.Path, o.Value})
}

// pointer escapes a key for a JSON pointer (RFC 6901).
func pointer(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

// RemoveFinalizerPatch is a JSON patch that removes finalizer from this
// Node (by UID), where the copy read has it; ok is false when it has not.
// It fails, rather than remove anything else, when the Node was replaced
// under the same name or its finalizers changed since it was read; other
// changes to the Node do not make it conflict as an update would.
func RemoveFinalizerPatch(node *corev1.Node, finalizer string) (patch []byte, ok bool) {
	i := slices.Index(node.Finalizers, finalizer)
	if i < 0 {
		return nil, false
	}
	at := "/metadata/finalizers/" + strconv.Itoa(i)
	return marshalPatch(append(sameUID(node),
		jsonPatchOp{Op: "test", Path: at, Value: finalizer},
		jsonPatchOp{Op: "remove", Path: at})), true
}

// sameUID tests that the Node is the one read (every Node the API server
// returns has a UID; a copy without one tests nothing).
func sameUID(node *corev1.Node) []jsonPatchOp {
	if node.UID == "" {
		return nil
	}
	return []jsonPatchOp{{Op: "test", Path: "/metadata/uid", Value: node.UID}}
}

func marshalPatch(ops []jsonPatchOp) []byte {
	patch, err := json.Marshal(ops)
	if err != nil {
		panic(fmt.Sprintf("a JSON patch of strings and booleans: %v", err)) // cannot happen
	}
	return patch
}

// ProvisioningErrorLimit is the most bytes of a machine's provisioning
// error the node controller records on its Node (the annotation
// nodeset.dev/provisioning-error), and that what reads the annotation
// passes on: another writer of the Node's annotations (its kubelet) is not
// bound by the first.
const ProvisioningErrorLimit = 1024

// GuardedMergePatch is a JSON merge patch that writes the given metadata
// fields and top-level fields (spec, ...) and nothing else, carrying the
// resourceVersion read: the API server applies it only to the object as it
// was read and answers a conflict, as to an update, when it changed since.
// Every other field keeps the bytes and the field manager its owner (a
// GitOps tool's manifest) gave it, and a NodeSet's generation does not
// move for metadata alone. metadata may be nil.
func GuardedMergePatch(resourceVersion string, metadata, fields map[string]any) []byte {
	body := make(map[string]any, len(fields)+1)
	maps.Copy(body, fields)
	meta := make(map[string]any, len(metadata)+1)
	maps.Copy(meta, metadata)
	meta["resourceVersion"] = resourceVersion
	body["metadata"] = meta
	patch, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("a merge patch of JSON values: %v", err)) // callers pass strings, numbers, lists and maps of them
	}
	return patch
}

// ChangePatch is a JSON patch that makes of the Node read what want is, in
// its labels, annotations, finalizers, providerID, unschedulable and
// taints, and tests that the Node is the one read (by UID) and that each
// list it replaces is as read. Unlike an update it does not fail because
// another writer changed something else since (a kubelet's status or
// labels). A list or map read empty is set whole after a test that it is
// still absent: the API server's JSON patch (evanphx/json-patch v4, which
// the tests apply too) passes a test of null on a missing member, and a
// Node's empty lists and maps are always missing from its JSON. Testing
// the resourceVersion instead, as an update would, failed whenever the
// copy read lagged any write at all, which a busy cache often does.
// changed is false when want differs from read in none of these.
func ChangePatch(read, want *corev1.Node) (patch []byte, changed bool) {
	ops := sameUID(read)
	tests := len(ops)
	setAbsent := func(path string, want any) {
		ops = append(ops, jsonPatchOp{Op: "test", Path: path, Value: nil}, jsonPatchOp{Op: "add", Path: path, Value: want})
	}
	mapOps := func(path string, read, want map[string]string) {
		if maps.Equal(read, want) {
			return
		}
		if len(read) == 0 {
			setAbsent(path, want)
			return
		}
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if v, ok := read[k]; !ok || v != want[k] {
				ops = append(ops, jsonPatchOp{Op: "add", Path: path + "/" + pointer(k), Value: want[k]})
			}
		}
		for _, k := range slices.Sorted(maps.Keys(read)) {
			if _, ok := want[k]; !ok {
				ops = append(ops, jsonPatchOp{Op: "remove", Path: path + "/" + pointer(k)})
			}
		}
	}
	listOps := func(path string, read, want any, equal bool, readEmpty, wantEmpty bool) {
		switch {
		case equal:
		case readEmpty:
			setAbsent(path, want)
		case wantEmpty:
			ops = append(ops, jsonPatchOp{Op: "test", Path: path, Value: read}, jsonPatchOp{Op: "remove", Path: path})
		default:
			ops = append(ops, jsonPatchOp{Op: "test", Path: path, Value: read}, jsonPatchOp{Op: "add", Path: path, Value: want})
		}
	}
	mapOps("/metadata/labels", read.Labels, want.Labels)
	mapOps("/metadata/annotations", read.Annotations, want.Annotations)
	listOps("/metadata/finalizers", read.Finalizers, want.Finalizers, slices.Equal(read.Finalizers, want.Finalizers),
		len(read.Finalizers) == 0, len(want.Finalizers) == 0)
	if read.Spec.ProviderID != want.Spec.ProviderID {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/providerID", Value: want.Spec.ProviderID})
	}
	if read.Spec.Unschedulable != want.Spec.Unschedulable {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/unschedulable", Value: want.Spec.Unschedulable})
	}
	listOps("/spec/taints", read.Spec.Taints, want.Spec.Taints, slices.EqualFunc(read.Spec.Taints, want.Spec.Taints, taintsEqual),
		len(read.Spec.Taints) == 0, len(want.Spec.Taints) == 0)
	if len(ops) == tests {
		return nil, false
	}
	return marshalPatch(ops), true
}

func taintsEqual(a, b corev1.Taint) bool {
	return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect && a.TimeAdded.Equal(b.TimeAdded)
}

// InDomain reports whether a label, taint or annotation key's prefix is
// domain or one of its subdomains ("node.kubernetes.io/x" is in
// kubernetes.io; "kubernetes.io.example.com/x" is not).
func InDomain(key, domain string) bool {
	prefix, _, found := strings.Cut(key, "/")
	return found && (prefix == domain || strings.HasSuffix(prefix, "."+domain))
}
