package node

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	listers "nodeset.dev/nodeset/pkg/generated/listers/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// routineEvents gathers the routine steps of a NodeSet's Nodes (a machine
// made, a kubelet registered, a machine deleted) and tells them as one Event
// on the NodeSet per step and period, naming the Nodes, the way the
// NodeSetController says "Created 12 node(s)". An Event per Node and step
// would be three writes per Node, more than the Node itself takes; the
// Node's own fields (providerID, the machine-created annotation, the Ready
// condition) already carry what such an Event would say. Warnings, and the
// steps of a lone (static) Node, are still recorded on the Node at once.
type routineEvents struct {
	recorder record.EventRecorder
	sets     listers.NodeSetLister

	mu      sync.Mutex
	pending map[routineKey][]string
}

type routineKey struct {
	namespace, set string
	reason         string
	// detail is the driver (or the cloud group), part of the message.
	detail string
}

func newRoutineEvents(recorder record.EventRecorder, sets listers.NodeSetLister) *routineEvents {
	return &routineEvents{recorder: recorder, sets: sets, pending: map[routineKey][]string{}}
}

// record notes a routine step of node: for a NodeSet's Node, until the
// next flush; for a lone Node, as an Event on it now, with single as its
// message.
func (e *routineEvents) record(node *corev1.Node, reason, detail, single string) {
	namespace, set, ok := nodeutil.NodeSetOf(node.Labels)
	if !ok {
		e.recorder.Event(node, corev1.EventTypeNormal, reason, single)
		return
	}
	key := routineKey{namespace: namespace, set: set, reason: reason, detail: detail}
	e.mu.Lock()
	e.pending[key] = append(e.pending[key], node.Name)
	e.mu.Unlock()
}

// flush records one Event per NodeSet and step noted since the last flush.
func (e *routineEvents) flush() {
	e.mu.Lock()
	pending := e.pending
	e.pending = map[routineKey][]string{}
	e.mu.Unlock()
	for key, names := range pending {
		n, listed := nodeutil.NameList(names)
		e.recorder.Event(e.setRef(key.namespace, key.set), corev1.EventTypeNormal, key.reason, routineMessage(key, n, listed))
	}
}

func routineMessage(key routineKey, n int, listed string) string {
	switch key.reason {
	case ReasonProvisioned:
		return fmt.Sprintf("Driver %s created the machines of %d node(s): %s", key.detail, n, listed)
	case ReasonRegistered:
		return fmt.Sprintf("%d node(s) registered (the kubelet reports Ready; startup taint removed): %s", n, listed)
	case ReasonDeprovisioned:
		return fmt.Sprintf("Driver %s deleted the machines of %d node(s): %s", key.detail, n, listed)
	case ReasonNodeCreated:
		return fmt.Sprintf("Created %d node(s) for machines of cloud group %s: %s", n, key.detail, listed)
	}
	return fmt.Sprintf("%d node(s): %s", n, listed)
}

// setRef is the NodeSet to record on; a reference by name when it is gone
// from the cache (its last Nodes' deletion outlives it).
func (e *routineEvents) setRef(namespace, name string) runtime.Object {
	if set, err := e.sets.NodeSets(namespace).Get(name); err == nil {
		return set
	}
	return &corev1.ObjectReference{
		APIVersion: nodesetv1alpha1.GroupVersion.String(), Kind: "NodeSet",
		Namespace: namespace, Name: name,
	}
}
