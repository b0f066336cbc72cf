package framework

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
)

// Scale sets a NodeSet's replicas through its /scale subresource, as
// kubectl scale does, retrying on conflicts (the controllers write its
// status meanwhile).
func Scale(ctx context.Context, cs versioned.Interface, namespace, name string, replicas int32) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := cs.NodesetV1alpha1().NodeSets(namespace).GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = replicas
		_, err = cs.NodesetV1alpha1().NodeSets(namespace).UpdateScale(ctx, name, s, metav1.UpdateOptions{})
		return err
	})
}
