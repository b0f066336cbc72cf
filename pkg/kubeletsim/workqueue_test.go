package kubeletsim

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A kubelet's registration is taken before renewals queued earlier, and
// each kind in the order it came; a stopped queue gives nothing more.
func TestRegistrationsGoBeforeRenewals(t *testing.T) {
	q := newWorkQueue()
	var order []string
	item := func(name string) func(context.Context) {
		return func(context.Context) { order = append(order, name) }
	}
	q.add(false, item("renew a"))
	q.add(false, item("renew b"))
	q.add(true, item("register c"))
	q.add(true, item("register d"))
	for range 4 {
		fn, ok := q.take()
		require.True(t, ok)
		fn(context.Background())
	}
	assert.Equal(t, []string{"register c", "register d", "renew a", "renew b"}, order)

	done := make(chan bool)
	go func() {
		_, ok := q.take()
		done <- ok
	}()
	q.stop()
	assert.False(t, <-done, "a stopped queue wakes its takers with nothing")
}
