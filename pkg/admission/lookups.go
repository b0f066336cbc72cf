package admission

import (
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/equality"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	listers "nodeset.dev/nodeset/pkg/generated/listers/nodeset/v1alpha1"
)

// Lookups the webhook may have the Admitter make of objects its caches do
// not hold: a burst for a catalogue applied with its NodeSets, then a few
// a second.
const (
	LookupBurst = 50
	LookupRate  = 10
)

// BoundLookups bounds the reviews that admitter answers from the API server
// instead of its caches (a NodeSet, NodeClass or, when the admitter is a
// NamespaceCache, Namespace newer than the caches). The
// webhook's port is reachable from pods, and anyone may send it reviews of
// NodeSets and classes that do not exist: each would have the nodeset
// controller spend its own API budget, shared by every tenant's
// reconciliation. Past LookupBurst, and LookupRate a second, such a review is
// admitted unchecked, as with the webhook away: the controller judges the
// NodeSet once its caches hold it.
func BoundLookups(admitter Admitter, sets listers.NodeSetLister, classes listers.NodeClassLister) Admitter {
	return &boundedLookups{admitter: admitter, sets: sets, classes: classes, budget: rate.NewLimiter(LookupRate, LookupBurst)}
}

type boundedLookups struct {
	admitter Admitter
	sets     listers.NodeSetLister
	classes  listers.NodeClassLister
	budget   *rate.Limiter
}

// NamespaceCache is an Admitter that reads the Namespace of a NodeSet from
// the API server when its cache does not hold it (a class that admits
// namespaces by label): it says whether the cache does.
type NamespaceCache interface {
	NamespaceCached(name string) bool
}

func (b *boundedLookups) Admit(set, old *nodesetv1alpha1.NodeSet) (reason, message string) {
	metadataOnly := old != nil && equality.Semantic.DeepEqual(old.Spec, set.Spec)
	if !metadataOnly && (!b.classCached(set.Spec.NodeClassName) || !b.namespaceCached(set.Namespace)) && !b.budget.Allow() {
		return "", ""
	}
	return b.admitter.Admit(set, old)
}

func (b *boundedLookups) AdmitScale(namespace, name string, replicas int32) (reason, message string) {
	set, err := b.sets.NodeSets(namespace).Get(name)
	if (err != nil || !b.classCached(set.Spec.NodeClassName) || !b.namespaceCached(namespace)) && !b.budget.Allow() {
		return "", ""
	}
	return b.admitter.AdmitScale(namespace, name, replicas)
}

// namespaceCached reports whether the admitter holds the Namespace in its
// cache, true when it reads none.
func (b *boundedLookups) namespaceCached(name string) bool {
	cache, ok := b.admitter.(NamespaceCache)
	return !ok || cache.NamespaceCached(name)
}

func (b *boundedLookups) classCached(name string) bool {
	_, err := b.classes.Get(name)
	return err == nil
}
