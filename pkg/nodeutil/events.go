package nodeutil

import "k8s.io/client-go/tools/cache"

// EventObject is an informer event's object as a T, a deleted one's too:
// a deletion the informer missed comes as a tombstone holding the object's
// last state known. false when the object is no T.
func EventObject[T any](obj any) (T, bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	t, ok := obj.(T)
	return t, ok
}
