package autoscaler

import (
	"context"
	"sync"
)

// turns hands out, by key, one turn at a time, each caller waiting for
// its own as long as its context allows. A key's entry is kept only while
// someone holds or waits for its turn, so the keys of NodeSets and
// classes written once are not kept until the process ends.
type turns struct {
	mu    sync.Mutex
	byKey map[string]*turn
}

// turn is one key's: a slot of one, and how many hold or wait for it.
type turn struct {
	slot  chan struct{}
	users int
}

// take waits for key's turn; release gives it back. The error is the
// context's when it ends first.
func (t *turns) take(ctx context.Context, key string) (release func(), err error) {
	t.mu.Lock()
	if t.byKey == nil {
		t.byKey = map[string]*turn{}
	}
	tn := t.byKey[key]
	if tn == nil {
		tn = &turn{slot: make(chan struct{}, 1)}
		t.byKey[key] = tn
	}
	tn.users++
	t.mu.Unlock()
	select {
	case tn.slot <- struct{}{}:
		return func() {
			<-tn.slot
			t.leave(key, tn)
		}, nil
	case <-ctx.Done():
		t.leave(key, tn)
		return nil, ctx.Err()
	}
}

// leave drops a holder or waiter of key's turn, and the entry with the last.
func (t *turns) leave(key string, tn *turn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tn.users--
	if tn.users == 0 {
		delete(t.byKey, key)
	}
}

// len is how many keys have a holder or a waiter.
func (t *turns) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byKey)
}
