package component

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// StartWorkers starts workers goroutines that take keys from queue and
// sync them until ctx is done or the queue shuts down, in the style of
// sample-controller: a key synced without error is forgotten by the rate
// limiter; one that failed is logged, naming it as what (the logged key's
// name: "nodeset", "node", ...), and added again rate-limited. A write
// refused because the object changed meanwhile (a conflict: someone else,
// e.g. cluster-autoscaler scaling a NodeSet, wrote it first) is no failure:
// the key is added again rate-limited with a V(2) line, no error logged.
func StartWorkers[T comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[T], workers int, what string,
	sync func(context.Context, T) error) {
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for processNext(ctx, queue, what, sync) {
			}
		}, time.Second)
	}
}

// processNext syncs one key; false once the queue has shut down.
func processNext[T comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[T], what string,
	sync func(context.Context, T) error) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	if err := sync(ctx, key); apierrors.IsConflict(err) {
		klog.FromContext(ctx).V(2).Info("Object changed while syncing; requeuing", what, key, "conflict", err.Error())
		queue.AddRateLimited(key)
		return true
	} else if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing; requeuing", what, key)
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}
