package nodeutil

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestEventObject: an event's object is read as the type asked for,
// through a tombstone too; another type is no such object.
func TestEventObject(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	got, ok := EventObject[*corev1.Node](node)
	assert.True(t, ok)
	assert.Same(t, node, got)

	got, ok = EventObject[*corev1.Node](cache.DeletedFinalStateUnknown{Key: "a", Obj: node})
	assert.True(t, ok, "a deletion the informer missed")
	assert.Same(t, node, got)

	_, ok = EventObject[*corev1.Pod](node)
	assert.False(t, ok)
	_, ok = EventObject[*corev1.Node](cache.DeletedFinalStateUnknown{Key: "b", Obj: &corev1.Pod{}})
	assert.False(t, ok)
	_, ok = EventObject[*corev1.Node](nil)
	assert.False(t, ok)
}
