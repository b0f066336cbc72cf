package framework

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// StartPods plays the kubelet's part that simulated machines leave out: every
// pod of namespace that the scheduler binds to a Node starts at once (phase
// Running, Ready), so that controllers counting Ready pods (ReplicaSets,
// Deployments, PodDisruptionBudgets) see them run. A pod is started once;
// what happens to it later (the node lifecycle controller marking it not
// Ready, an eviction) is left alone. It runs until ctx is done.
func StartPods(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace))
	pods := factory.Core().V1().Pods()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "framework_pods"})
	enqueue := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && pending(pod) {
			queue.Add(pod.Name)
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		queue.ShutDown()
		factory.Shutdown()
	}()
	go func() {
		for {
			name, quit := queue.Get()
			if quit {
				return
			}
			pod, err := pods.Lister().Pods(namespace).Get(name)
			if err == nil && pending(pod) {
				err = startPod(ctx, kube, pod)
			}
			if err != nil && ctx.Err() == nil {
				queue.AddRateLimited(name)
			} else {
				queue.Forget(name)
			}
			queue.Done(name)
		}
	}()
	return nil
}

// pending: bound, not terminating, not started yet.
func pending(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodPending
}

func startPod(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) error {
	pod = pod.DeepCopy()
	now := metav1.NewTime(time.Now())
	pod.Status.Phase = corev1.PodRunning
	pod.Status.StartTime = &now
	pod.Status.Conditions = nil
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	_, err := kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}
