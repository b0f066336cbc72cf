package nodeset

import (
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"nodeset.dev/nodeset/pkg/plan"
)

// expectationsTTL bounds how long a controller waits for its informer to
// observe its own writes before it acts again regardless.
const expectationsTTL = 5 * time.Minute

// expectations remembers, per NodeSet, the Node creations and deletions the
// controller issued but its informer has not observed yet, so a lagging cache
// never makes it create a Node twice or delete one again (the ReplicaSet
// controller's pattern).
type expectations struct {
	mu    sync.Mutex
	now   func() time.Time
	items map[string]*expectation
	// version is bumped by each change of what unobservedCreations reads
	// (a creation expected, named, observed or given up, an expectation
	// restarted or dropped), so that a class count made from one read is
	// known to be out of date (classCounts).
	version uint64
}

// unobservedRead is what a read of the unobserved creations saw: the
// expectations' version, and when the first of the creations it counted
// expires (zero for none).
type unobservedRead struct {
	version uint64
	until   time.Time
}

type expectation struct {
	creations int
	// named are the Nodes of creations issued, by name (the controller
	// names them), until the informer shows them or their create fails:
	// a Node the cache shows while still named here is counted once
	// (unobservedCreations, ClassCount).
	named     sets.Set[string]
	deletions sets.Set[string]
	// unknown are creations whose answer was lost (the Node may or may not
	// be stored), by name, with when: counted in creations until a look
	// at the API server settles each.
	unknown map[string]time.Time
	// unknownDeletes are deletions whose answer was lost (the Node may or
	// may not be going), by name: expected until a look at the API server
	// settles each, so no second victim is picked in the meantime.
	unknownDeletes map[string]unknownDelete
	timestamp      time.Time
}

// unknownDelete is a deletion of unknown outcome: when, and of which Node.
type unknownDelete struct {
	at  time.Time
	uid types.UID
}

func newExpectations(now func() time.Time) *expectations {
	return &expectations{now: now, items: map[string]*expectation{}}
}

// satisfied reports whether every write issued for key has been observed, or
// the expectation expired, or none was ever recorded.
func (e *expectations) satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.items[key]
	if !ok {
		return true
	}
	if exp.creations <= 0 && exp.deletions.Len() == 0 {
		return true
	}
	return e.expired(exp)
}

// expiresIn is how long until key's expectation expires, when it still
// waits for writes to be observed.
func (e *expectations) expiresIn(key string) (time.Duration, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.items[key]
	if !ok || (exp.creations <= 0 && exp.deletions.Len() == 0) || e.expired(exp) {
		return 0, false
	}
	return exp.timestamp.Add(expectationsTTL).Sub(e.now()), true
}

// createUnknown records that the creation of the named Node, counted in
// key's creations, may or may not have been stored.
func (e *expectations) createUnknown(key, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.items[key]; ok && !e.expired(exp) {
		exp.unknown[name] = e.now()
	}
}

// unknownCreates are key's creations of unknown outcome at least settle
// old, and how long until the next younger one is; none once key's
// expectation expired.
func (e *expectations) unknownCreates(key string, settle time.Duration) (names []string, next time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.items[key]
	if !ok || e.expired(exp) {
		return nil, 0
	}
	due, next := settling(exp.unknown, func(at time.Time) time.Time { return at }, settle, e.now())
	return slices.Collect(maps.Keys(due)), next
}

// settling are the writes of unknown outcome in pending that were made
// (when) at least settle before now, and how long until the next younger
// one is.
func settling[V any](pending map[string]V, when func(V) time.Time, settle time.Duration, now time.Time) (due map[string]V, next time.Duration) {
	for name, v := range pending {
		if wait := when(v).Add(settle).Sub(now); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		if due == nil {
			due = map[string]V{}
		}
		due[name] = v
	}
	return due, next
}

// unknownSettled records what a look found of a creation of unknown
// outcome: stored, it is observed as any other (by the informer); not
// stored, it never will be.
func (e *expectations) unknownSettled(key, name string, stored bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.items[key]
	if !ok {
		return
	}
	if _, pending := exp.unknown[name]; !pending {
		return
	}
	delete(exp.unknown, name)
	if !stored {
		e.version++
		exp.named.Delete(name)
		if exp.creations > 0 {
			exp.creations--
		}
	}
}

// deleteUnknown records that the deletion of the named Node (of uid),
// expected for key, may or may not have been carried out.
func (e *expectations) deleteUnknown(key, name string, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.items[key]; ok && !e.expired(exp) {
		exp.unknownDeletes[name] = unknownDelete{at: e.now(), uid: uid}
	}
}

// unknownDeletions are key's deletions of unknown outcome at least settle
// old, by name, and how long until the next younger one is; none once
// key's expectation expired.
func (e *expectations) unknownDeletions(key string, settle time.Duration) (map[string]unknownDelete, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.items[key]
	if !ok || e.expired(exp) {
		return nil, 0
	}
	return settling(exp.unknownDeletes, func(d unknownDelete) time.Time { return d.at }, settle, e.now())
}

// unknownDeleteSettled records what a look found of a deletion of unknown
// outcome: carried out, it is observed as any other (by the informer); not
// carried out, it never will be, and the Node may be chosen again.
func (e *expectations) unknownDeleteSettled(key, name string, done bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.items[key]
	if !ok {
		return
	}
	if _, pending := exp.unknownDeletes[name]; !pending {
		return
	}
	delete(exp.unknownDeletes, name)
	if !done {
		exp.deletions.Delete(name)
	}
}

// expectCreations records that count more Node creations were issued for key.
func (e *expectations) expectCreations(key string, count int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.current(key).creations += count
	e.version++
}

// expectDeletions records that the named Nodes' deletions were issued for key.
func (e *expectations) expectDeletions(key string, names []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.current(key).deletions.Insert(names...)
}

// expired reports whether exp outlived expectationsTTL. Callers hold mu.
func (e *expectations) expired(exp *expectation) bool {
	return e.now().Sub(exp.timestamp) > expectationsTTL
}

// current is key's unexpired expectation, a fresh one when it has none; it
// restarts the clock. Callers hold mu.
func (e *expectations) current(key string) *expectation {
	exp, ok := e.items[key]
	if !ok || e.expired(exp) {
		exp = &expectation{deletions: sets.New[string](), named: sets.New[string](), unknown: map[string]time.Time{}, unknownDeletes: map[string]unknownDelete{}}
		e.items[key] = exp
	}
	if exp.creations > 0 {
		e.version++ // the counted creations expire later
	}
	exp.timestamp = e.now()
	return exp
}

// pendingCreations are the unobserved creations of the keys match accepts.
func (e *expectations) pendingCreations(match func(key string) bool) plan.Pending {
	pending, _, _ := e.unobservedCreations(match)
	return pending
}

// currentVersion is the expectations' version (unobservedRead).
func (e *expectations) currentVersion() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.version
}

// unobservedCreations are the unobserved creations of the keys match
// accepts, and the names of the Nodes among them, read together: a Node
// of those names that a cache read after this one shows is in both
// counts, and is to be taken out of one (countClass); and what the read
// saw (unobservedRead).
func (e *expectations) unobservedCreations(match func(key string) bool) (plan.Pending, map[string][]string, unobservedRead) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pending, names := plan.Pending{}, map[string][]string{}
	read := unobservedRead{version: e.version}
	for key, exp := range e.items {
		if exp.creations > 0 && !e.expired(exp) && match(key) {
			pending[key] += int64(exp.creations)
			names[key] = exp.named.UnsortedList()
			if until := exp.timestamp.Add(expectationsTTL); read.until.IsZero() || until.Before(read.until) {
				read.until = until
			}
		}
	}
	return pending, names, read
}

// creating records the name of a Node whose creation, counted in key's
// creations, is about to be issued.
func (e *expectations) creating(key, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.items[key]; ok && !e.expired(exp) {
		e.version++
		exp.named.Insert(name)
	}
}

// createFailed forgets the name of a Node whose create call failed; its
// count is lowered with creationObserved.
func (e *expectations) createFailed(key, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.items[key]; ok && exp.named.Has(name) {
		e.version++
		exp.named.Delete(name)
	}
}

// creationObserved lowers the pending creations of key by one: a create
// call failed, or was never made.
func (e *expectations) creationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.items[key]; ok && exp.creations > 0 {
		e.version++
		exp.creations--
	}
}

// nodeObserved lowers the pending creations of key by one and forgets the
// Node's name, at once: the informer saw the new Node.
func (e *expectations) nodeObserved(key, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.items[key]; ok && exp.creations > 0 {
		e.version++
		exp.creations--
		exp.named.Delete(name)
	}
}

// deletionObserved marks the named Node's deletion as observed (or failed).
func (e *expectations) deletionObserved(key, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.items[key]; ok {
		exp.deletions.Delete(name)
	}
}

// deleting reports whether a deletion of the named Node was issued for key
// and not observed yet (within the expectations' lifetime).
func (e *expectations) deleting(key, name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.items[key]
	return ok && !e.expired(exp) && exp.deletions.Has(name)
}

// forget drops key's expectations, when its NodeSet is gone.
func (e *expectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.items[key]; ok && exp.creations > 0 {
		e.version++
	}
	delete(e.items, key)
}
