package component

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/util/workqueue"
)

func TestWorkersRetryFailuresAndForgetSuccesses(t *testing.T) {
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Millisecond),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "test"})
	defer queue.ShutDown()
	var mu sync.Mutex
	calls := map[string]int{}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	StartWorkers(ctx, queue, 2, "key", func(_ context.Context, key string) error {
		mu.Lock()
		defer mu.Unlock()
		calls[key]++
		if key == "flaky" && calls[key] < 3 {
			return errors.New("not yet")
		}
		if calls["flaky"] == 3 && calls["steady"] == 1 {
			close(done)
		}
		return nil
	})
	queue.Add("steady")
	queue.Add("flaky")
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the failing key was not retried until it succeeded")
	}
	// The worker forgets a key after its sync returns: wait for that.
	forgotten := time.Now().Add(time.Minute)
	for queue.NumRequeues("flaky") != 0 && time.Now().Before(forgotten) {
		time.Sleep(time.Millisecond)
	}
	require.Zero(t, queue.NumRequeues("flaky"), "a key that finally synced is forgotten by the rate limiter")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]int{"steady": 1, "flaky": 3}, calls)
}
