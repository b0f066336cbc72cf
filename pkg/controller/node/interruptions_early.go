package node

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"nodeset.dev/nodeset/drivers"
)

// A warning may come before its machine has a Node: a group's instance
// gets its Node at the group's next sync after it has a name, and a
// kubelet's own Node is adopted then too. Such a warning is kept, in the
// leading replica's memory, and acted on once a Node of the driver, of a
// class that reads the queue it came on, has the machine's id in its
// providerID. Its message is not acknowledged while it is kept: the queue
// delivers it again after its visibility timeout, to whoever leads by
// then, so a change of leader does not forget it. Its time runs from the
// queue's first delivery, whichever replica got it; the delivery after it
// expired, or after it was acted on, acknowledges it.
const (
	// earlyWarningHold is the longest a warning waits for its Node. A
	// group's instance gets its Node within a group sync or two of being
	// named (seconds, 30s when the group is steady); a warning whose Node
	// has not come in this time is taken to be for a machine of no
	// NodeSet. It also bounds warnings with no deadline (a rebalance
	// recommendation) or a late one (a scheduled change days ahead, an
	// event time set by whoever sent the message).
	earlyWarningHold = 10 * time.Minute
	// maxEarlyWarnings caps the warnings kept: anyone who may send to the
	// queue may name instances that do not exist. Past it, the oldest is
	// dropped first.
	maxEarlyWarnings = 1000
	// earlyWarningPoll is how often the kept warnings look for their Nodes.
	earlyWarningPoll = time.Second
)

// earlyKey is a kept warning's key: one per machine, kind, driver and
// queue (a queueName) it came on. The queue scopes the Node it waits for,
// to one of a class that reads that queue.
type earlyKey struct {
	driver  string
	queue   string
	machine string
	kind    drivers.InterruptionKind
}

// earlyWarning is a warning kept for a machine that has no Node yet.
type earlyWarning struct {
	key earlyKey
	// notice is the warning, for this machine only.
	notice drivers.Interruption
	// until is when it stops meaning anything: its deadline, or
	// earlyWarningHold after it came.
	until time.Time
}

// earlyWarnings are the warnings kept for machines without a Node, at most
// limit of them, oldest first, and those acted on since, until they expire
// (their messages still come once more, to be acknowledged).
type earlyWarnings struct {
	mu    sync.Mutex
	limit int
	order *list.List // of *earlyWarning, in the order they came
	byKey map[earlyKey]*list.Element
	acted map[earlyKey]time.Time // until when
	// counted are the ids of the notices counted as received, until when
	// they are remembered (see counts).
	counted map[string]time.Time
}

func newEarlyWarnings(limit int) *earlyWarnings {
	return &earlyWarnings{limit: max(limit, 1), order: list.New(), byKey: map[earlyKey]*list.Element{}, acted: map[earlyKey]time.Time{},
		counted: map[string]time.Time{}}
}

// counts reports whether notice n, received at now, is to be counted as
// received: the first delivery of its id is, a delivery of it again within
// earlyWarningHold is not. SQS delivers a message again when its
// acknowledgement came late or was lost, and EventBridge may send an event
// twice; the Node of a notice acted on may still be there, so what it
// finds there does not tell a repeat. A notice without an id is always
// counted; past limit ids, those whose time is up are forgotten, and if
// none is, the notice is counted without being remembered.
func (s *earlyWarnings) counts(n drivers.Interruption, now time.Time) bool {
	if n.ID == "" {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if until, ok := s.counted[n.ID]; ok && now.Before(until) {
		return false
	}
	if len(s.counted) >= s.limit {
		forgetExpired(s.counted, now)
	}
	if len(s.counted) < s.limit {
		s.counted[n.ID] = now.Add(earlyWarningHold)
	}
	return true
}

// earlyWarningUntil is when warning n, first received at received, stops
// meaning anything for a Node that is not there yet: its deadline, and no
// later than earlyWarningHold after it came. A rebalance recommendation
// has no deadline: it holds for earlyWarningHold. A warning whose deadline
// is not after received (a hibernation, a stop happening now) is not kept.
func earlyWarningUntil(n drivers.Interruption, received time.Time) time.Time {
	until := received.Add(earlyWarningHold)
	if n.Kind != drivers.InterruptionRebalance && !n.Deadline.IsZero() && n.Deadline.Before(until) {
		until = n.Deadline
	}
	return until
}

// hold keeps warning w, and reports whether it was not kept before. A
// warning of the same key already kept stays as it is (a notice given
// again changes nothing). When the store is full, the oldest warning is
// dropped and returned.
func (s *earlyWarnings) hold(w earlyWarning) (added bool, dropped *earlyWarning) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byKey[w.key]; ok {
		return false, nil
	}
	if s.order.Len() >= s.limit {
		oldest := s.order.Front()
		dropped = s.order.Remove(oldest).(*earlyWarning)
		delete(s.byKey, dropped.key)
	}
	s.byKey[w.key] = s.order.PushBack(&w)
	return true, dropped
}

// kept are the warnings still meaningful at now, oldest first; those that
// are not any more are forgotten and returned as expired, and those acted
// on that expired are forgotten too.
func (s *earlyWarnings) kept(now time.Time) (live, expired []earlyWarning) {
	s.mu.Lock()
	defer s.mu.Unlock()
	forgetExpired(s.acted, now)
	forgetExpired(s.counted, now)
	for e := s.order.Front(); e != nil; {
		next := e.Next()
		w := e.Value.(*earlyWarning)
		if now.Before(w.until) {
			live = append(live, *w)
		} else {
			s.order.Remove(e)
			delete(s.byKey, w.key)
			expired = append(expired, *w)
		}
		e = next
	}
	return live, expired
}

// forgetExpired deletes from until the keys whose time is up at now.
func forgetExpired[K comparable](until map[K]time.Time, now time.Time) {
	for key, t := range until {
		if !now.Before(t) {
			delete(until, key)
		}
	}
}

// done drops the warning w, acted on, and remembers it until it expires.
func (s *earlyWarnings) done(w earlyWarning) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[w.key]; ok {
		s.order.Remove(e)
		delete(s.byKey, w.key)
	}
	s.acted[w.key] = w.until
}

// actedOn reports whether the warning of key was acted on and has not
// expired at now.
func (s *earlyWarnings) actedOn(key earlyKey, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.acted[key]
	return ok && now.Before(until)
}

// len is how many warnings are kept.
func (s *earlyWarnings) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

// earlyOutcome is what became of a warning for a machine without a Node.
type earlyOutcome int

const (
	// earlyNotKept: it means nothing (expired, or nothing to drain
	// ahead of), or there is no store.
	earlyNotKept earlyOutcome = iota
	// earlyKept: kept for its Node; its message is to come again.
	earlyKept
	// earlyKeptAgain: kept already, come again; kept still.
	earlyKeptAgain
	// earlyActedOn: kept before and acted on since; its message may go.
	earlyActedOn
)

// errKeptEarly is the answer for a notice kept for a Node to come: it is
// not acknowledged, so that it comes again, to whoever leads then.
var errKeptEarly = errors.New("kept for a Node to come: the notice is to come again")

// keepEarly keeps warning n, received on queue, for machine id of driver,
// which has no Node of a class reading queue yet, when it still means
// something. Its time runs from the queue's first delivery of n when the
// queue says (n.Received), from now otherwise. An Auto Scaling termination
// is not kept: the group's sync makes no Node for an instance it
// terminates; nor is a warning for a machine this process terminated
// lately (a notice come again after its Node was drained and released, or
// sent twice), which will have no Node again.
func (c *Controller) keepEarly(ctx context.Context, early *earlyWarnings, driver, queue, id string, n drivers.Interruption) earlyOutcome {
	now := c.opts.Now()
	received := now
	if !n.Received.IsZero() && n.Received.Before(now) {
		received = n.Received
	}
	until := earlyWarningUntil(n, received)
	if early == nil || n.Kind == drivers.InterruptionTermination || !now.Before(until) {
		return earlyNotKept
	}
	key := earlyKey{driver: driver, queue: queue, machine: id, kind: n.Kind}
	if early.actedOn(key, now) {
		return earlyActedOn
	}
	if c.recentlyTerminatedMachine(id) {
		return earlyNotKept
	}
	one := n
	one.MachineIDs = []string{id}
	logger := klog.FromContext(ctx)
	added, dropped := early.hold(earlyWarning{key: key, notice: one, until: until})
	if dropped != nil {
		logger.V(2).Info("Too many interruption notices kept for machines without a Node; dropped the oldest, whose message comes again until it expires",
			"limit", early.limit, "machine", dropped.key.machine, "kind", dropped.key.kind)
	}
	if !added {
		return earlyKeptAgain
	}
	logger.V(2).Info("Interruption notice for a machine without a Node yet; kept until its Node appears", "machine", id, "kind", n.Kind, "until", until.UTC().Format(time.RFC3339))
	return earlyKept
}

// actOnEarlyWarnings acts on each kept warning whose Node has appeared, as
// it would have on receipt, and forgets those that no longer mean
// anything. One that fails is tried again on the next round, until it
// expires.
func (c *Controller) actOnEarlyWarnings(ctx context.Context, early *earlyWarnings) {
	defer func() {
		if r := recover(); r != nil {
			_ = c.panicked(ctx, r, "acting on interruption notices kept for their Nodes") // logged; tried again next round
		}
	}()
	logger := klog.FromContext(ctx)
	live, expired := early.kept(c.opts.Now())
	for _, w := range expired {
		// Counted as for no NodeSet's machine when its message comes
		// once more, and is acknowledged.
		logger.V(2).Info("Interruption notice for a machine of no NodeSet; no Node appeared before it expired", "machine", w.key.machine, "kind", w.key.kind)
	}
	for _, w := range live {
		node := c.nodeOfMachine(w.key.driver, w.key.queue, w.key.machine)
		if node == nil {
			continue
		}
		logger := klog.LoggerWithValues(logger, "node", node.Name, "machine", w.key.machine, "kind", w.key.kind)
		ctx := klog.NewContext(ctx, logger)
		if err := c.actOn(ctx, w.key.driver, w.key.queue, node, w.notice); err != nil {
			logger.Error(nil, "Acting on an interruption notice that came before its Node failed; tried again", "err", c.scrub(err.Error()))
			continue
		}
		early.done(w)
		logger.V(2).Info("Acted on an interruption notice that came before its Node")
	}
}
