package framework

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// WaitForDefaultServiceAccount waits until kube-controller-manager made the
// default ServiceAccount of namespace. The ServiceAccount admission plugin
// refuses pods in a namespace that has none yet, as in any cluster: a test
// that creates a namespace and then pods in it waits here first.
func WaitForDefaultServiceAccount(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("framework: no default ServiceAccount in namespace %s: %w", namespace, err)
	}
	return nil
}

// waitServiceAccount waits until the control plane's kube-controller-manager
// made namespace's default ServiceAccount, failing early if a process exits.
func (cp *ControlPlane) waitServiceAccount(ctx context.Context, namespace string, timeout time.Duration) error {
	kube, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, pid := range cp.PIDs {
			if !processAlive(pid) {
				return false, fmt.Errorf("a control-plane process exited; see %s", filepath.Join(cp.Dir, "logs"))
			}
		}
		_, err := kube.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("framework: kube-controller-manager made no default ServiceAccount in %s: %w", namespace, err)
	}
	return nil
}
