package node

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// objectMemory keeps a value per object (a Node, a NodeSet) in memory, by
// its key (a Node's name, a NodeSet's namespace/name), for that object's
// UID only: a new object of the same name finds nothing. Entries are
// forgotten by key, when the cache sees the object gone or the value is
// used up.
type objectMemory[V any] struct {
	mu      sync.Mutex
	entries map[string]remembered[V]
}

type remembered[V any] struct {
	uid   types.UID
	value V
}

func newObjectMemory[V any]() *objectMemory[V] {
	return &objectMemory[V]{entries: map[string]remembered[V]{}}
}

// memoryKey is obj's key: its name, or namespace/name.
func memoryKey(obj metav1.Object) string {
	return cache.MetaObjectToName(obj).String()
}

// set remembers value for obj.
func (m *objectMemory[V]) set(obj metav1.Object, value V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries[memoryKey(obj)] = remembered[V]{uid: obj.GetUID(), value: value}
}

// get is the value remembered for obj, if any.
func (m *objectMemory[V]) get(obj metav1.Object) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[memoryKey(obj)]
	if !ok || e.uid != obj.GetUID() {
		var zero V
		return zero, false
	}
	return e.value, true
}

// has reports whether something is remembered for obj.
func (m *objectMemory[V]) has(obj metav1.Object) bool {
	_, ok := m.get(obj)
	return ok
}

// oldest is the key of the entry that match accepts and that orders
// first by before, "" when none is accepted.
func (m *objectMemory[V]) oldest(match func(V) bool, before func(a, b V) bool) string {
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

// forget forgets the object of key (memoryKey).
func (m *objectMemory[V]) forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, key)
}
