// Package nodeutil holds the small questions every nodeset component asks of
// a core v1 Node.
package nodeutil

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

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
