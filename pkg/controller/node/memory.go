package node

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// nodeMemory keeps a value per Node in memory, by name, for that Node's UID
// only: a new Node of the same name finds nothing. Entries are forgotten by
// name, when the cache sees the Node gone or the value is used up.
type nodeMemory[V any] struct {
	mu      sync.Mutex
	entries map[string]remembered[V]
}

type remembered[V any] struct {
	uid   types.UID
	value V
}

func newNodeMemory[V any]() *nodeMemory[V] {
	return &nodeMemory[V]{entries: map[string]remembered[V]{}}
}

// set remembers value for node.
func (m *nodeMemory[V]) set(node *corev1.Node, value V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries[node.Name] = remembered[V]{uid: node.UID, value: value}
}

// get is the value remembered for node, if any.
func (m *nodeMemory[V]) get(node *corev1.Node) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[node.Name]
	if !ok || e.uid != node.UID {
		var zero V
		return zero, false
	}
	return e.value, true
}

// has reports whether something is remembered for node.
func (m *nodeMemory[V]) has(node *corev1.Node) bool {
	_, ok := m.get(node)
	return ok
}

// oldest is the name of the entry that match accepts and that orders
// first by before, "" when none is accepted.
func (m *nodeMemory[V]) oldest(match func(V) bool, before func(a, b V) bool) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var name string
	var first V
	for n, e := range m.entries {
		if match(e.value) && (name == "" || before(e.value, first) || !before(first, e.value) && n < name) {
			name, first = n, e.value
		}
	}
	return name
}

// forget forgets the Node name.
func (m *nodeMemory[V]) forget(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, name)
}
