// Package nodeset is the NodeSetController: it resolves each NodeSet against
// its NodeClass, creates and deletes the set's core v1 Node objects, and
// writes the set's status. It never talks to a cloud.
package nodeset

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/component"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	informers "nodeset.dev/nodeset/pkg/generated/informers/externalversions/nodeset/v1alpha1"
	listers "nodeset.dev/nodeset/pkg/generated/listers/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/plan"
	"nodeset.dev/nodeset/pkg/resolve"
)

// Event reasons.
const (
	ReasonSuccessfulCreate = "SuccessfulCreate"
	ReasonFailedCreate     = "FailedCreate"
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonFailedDelete     = "FailedDelete"
	ReasonNotAccepted      = "NotAccepted"
	ReasonReplacingNode    = "ReplacingOutdatedNode"
	ReasonNodeSetGone      = "NodeSetGone"
)

// FinalizerNodes holds a NodeSet until all its Nodes (and so their machines) are gone.
const FinalizerNodes = "nodeset.dev/nodes"

const byClassIndex = "byNodeClass"

// byWaitingIndex indexes the NodeSets that wait for room in their class's
// limits (LimitExceeded) by their class, so that a machine gone looks at
// the sets waiting, not at every set of the class.
const byWaitingIndex = "waitingByNodeClass"

// byDriverIndex indexes NodeClasses by their driver, so that a driver
// claim's renewal looks up that driver's classes, not every class.
const byDriverIndex = "byDriver"

// byNodeSetIndex indexes Nodes by their NodeSet's key, so that a sync lists
// its own Nodes and not every Node of the cluster.
const byNodeSetIndex = "byNodeSet"

// batchPerNode lengthens a large set's NodeEventBatch: a sync goes over all
// of the set's Nodes, so a set of n Nodes is synced after a Node's change at
// most once per n times this (2 s for 10,000 Nodes), and its syncs cost the
// same CPU per Node and second whatever its size.
const batchPerNode = 200 * time.Microsecond

// Options tunes the controller.
type Options struct {
	// BurstReplicas caps the Node creations or deletions of one sync. Default 500.
	BurstReplicas int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// StatusInterval spaces a set's status writes that only count progress
	// (replica counts, condition messages); 0 writes every change at once.
	StatusInterval time.Duration
	// NodeEventBatch is how long a NodeSet's sync waits after a change of
	// one of its Nodes, so that the changes of many Nodes (a scale-up, a
	// drain wave) are handled by one sync; 0 syncs at once.
	NodeEventBatch time.Duration
	// DriverClaims watches the Leases of DriverClaimsNamespace, where the
	// node controllers claim their drivers; with none, no driver is ever
	// seen claimed.
	DriverClaims          coordinationinformers.LeaseInformer
	DriverClaimsNamespace string
	// DriverClaimGrace is how long a class generation waits for validation
	// with its driver unclaimed before its sets say DriverNotServed.
	// Default DefaultDriverClaimGrace.
	DriverClaimGrace time.Duration
}

// Controller turns NodeSets into Nodes.
type Controller struct {
	kubeClient    kubernetes.Interface
	nodesetClient versioned.Interface
	recorder      record.EventRecorder

	nodeLister  corelisters.NodeLister
	nodeIndexer cache.Indexer
	// nodesSeen is the resourceVersion the Node cache last saw (its
	// informer's LastSyncResourceVersion).
	nodesSeen        func() string
	namespaceLister  corelisters.NamespaceLister
	nodeSetLister    listers.NodeSetLister
	nodeClassLister  listers.NodeClassLister
	nodeSetIndexer   cache.Indexer
	nodeClassIndexer cache.Indexer
	synced           []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]
	// classQueue holds the NodeClasses whose in-use finalizer may need
	// adding or removing.
	classQueue workqueue.TypedRateLimitingInterface[string]
	// wakeQueue holds the NodeClasses whose sets waiting for room are to be
	// looked at (wakeLimited): a burst of Node events of a class is one
	// look, made by a worker, not one in the informer's handler per Node.
	wakeQueue    workqueue.TypedRateLimitingInterface[string]
	expectations *expectations
	burst        int
	// nodeWrites holds a slot per Node create or delete in flight.
	nodeWrites chan struct{}
	classLocks sync.Map // NodeClass name -> *sync.Mutex
	// classCounts keeps each class's count for its limits until what it
	// counts changes.
	classCounts *classCounts
	now         func() time.Time

	statusInterval time.Duration
	nodeEventBatch time.Duration
	statusMu       sync.Mutex
	lastStatus     map[string]time.Time // by set key: the last status write
	sizes          map[string]int       // by set key: Nodes at its last sync; under statusMu

	revalidationMu sync.Mutex
	revalidation   map[string]generationSeen // by class name
	claims         *driverClaims
}

// NewController returns a NodeSetController wired to the given informers.
func NewController(
	ctx context.Context,
	kubeClient kubernetes.Interface,
	nodesetClient versioned.Interface,
	recorder record.EventRecorder,
	nodeInformer coreinformers.NodeInformer,
	namespaceInformer coreinformers.NamespaceInformer,
	nodeSetInformer informers.NodeSetInformer,
	nodeClassInformer informers.NodeClassInformer,
	opts Options,
) (*Controller, error) {
	logger := klog.FromContext(ctx)
	if opts.BurstReplicas <= 0 {
		opts.BurstReplicas = 500
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.DriverClaimGrace <= 0 {
		opts.DriverClaimGrace = DefaultDriverClaimGrace
	}
	c := &Controller{
		kubeClient:       kubeClient,
		nodesetClient:    nodesetClient,
		recorder:         recorder,
		nodeLister:       nodeInformer.Lister(),
		nodeIndexer:      nodeInformer.Informer().GetIndexer(),
		nodesSeen:        nodeInformer.Informer().LastSyncResourceVersion,
		namespaceLister:  namespaceInformer.Lister(),
		nodeSetLister:    nodeSetInformer.Lister(),
		nodeClassLister:  nodeClassInformer.Lister(),
		nodeSetIndexer:   nodeSetInformer.Informer().GetIndexer(),
		nodeClassIndexer: nodeClassInformer.Informer().GetIndexer(),
		synced: []cache.InformerSynced{
			nodeInformer.Informer().HasSynced, namespaceInformer.Informer().HasSynced,
			nodeSetInformer.Informer().HasSynced, nodeClassInformer.Informer().HasSynced,
		},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeset"}),
		classQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeclass_protection"}),
		wakeQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeclass_limit_wake"}),
		expectations: newExpectations(opts.Now),
		burst:        opts.BurstReplicas,
		nodeWrites:   make(chan struct{}, MaxNodeWritesInFlight),
		classCounts:  newClassCounts(),
		now:          opts.Now,

		statusInterval: opts.StatusInterval,
		nodeEventBatch: opts.NodeEventBatch,
		lastStatus:     map[string]time.Time{},
		sizes:          map[string]int{},
		revalidation:   map[string]generationSeen{},
		claims:         newDriverClaims(opts.DriverClaimsNamespace, opts.DriverClaimGrace),
	}
	if opts.DriverClaims != nil {
		c.claims.lister, c.claims.synced = opts.DriverClaims.Lister(), opts.DriverClaims.Informer().HasSynced
		if _, err := opts.DriverClaims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.claimChanged(nil, obj) },
			UpdateFunc: c.claimChanged,
			DeleteFunc: func(obj any) { c.claimChanged(obj, nil) },
		}); err != nil {
			return nil, err
		}
	}
	if err := nodeSetInformer.Informer().AddIndexers(cache.Indexers{byClassIndex: func(obj any) ([]string, error) {
		set, ok := obj.(*nodesetv1alpha1.NodeSet)
		if !ok {
			return nil, nil
		}
		return []string{set.Spec.NodeClassName}, nil
	}, byWaitingIndex: func(obj any) ([]string, error) {
		if set, ok := obj.(*nodesetv1alpha1.NodeSet); ok && waitingForRoom(set) {
			return []string{set.Spec.NodeClassName}, nil
		}
		return nil, nil
	}, bySealIndex: nodeutil.IndexSetBySeal}); err != nil {
		return nil, err
	}
	if err := nodeClassInformer.Informer().AddIndexers(cache.Indexers{byDriverIndex: func(obj any) ([]string, error) {
		if class, ok := obj.(*nodesetv1alpha1.NodeClass); ok {
			return []string{class.Spec.Driver}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	if err := nodeInformer.Informer().AddIndexers(cache.Indexers{byNodeSetIndex: func(obj any) ([]string, error) {
		if node, ok := obj.(*corev1.Node); ok {
			if key, ok := nodeSetKey(node); ok {
				return []string{key}, nil
			}
		}
		return nil, nil
	}, bySealIndex: nodeutil.IndexRelabelledBySeal}); err != nil {
		return nil, err
	}
	handlers := []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{nodeSetInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				c.setCounted(nil, obj)
				c.enqueue(obj)
			},
			UpdateFunc: func(old, obj any) {
				c.setCounted(old, obj)
				c.nodeSetUpdated(old, obj)
			},
			DeleteFunc: func(obj any) {
				c.setCounted(obj, nil)
				c.nodeSetDeleted(obj)
			},
		}},
		{nodeClassInformer.Informer(), cache.ResourceEventHandlerDetailedFuncs{
			AddFunc: func(obj any, initial bool) {
				if class, ok := obj.(*nodesetv1alpha1.NodeClass); ok {
					c.classCounts.track(class.Name)
				}
				c.enqueueClass(obj)
				if !initial {
					c.stampsChanged(nil, obj)
				}
			},
			UpdateFunc: func(old, obj any) {
				c.enqueueClass(obj)
				c.stampsChanged(old, obj)
			},
			DeleteFunc: func(obj any) {
				if class, ok := nodeutil.EventObject[*nodesetv1alpha1.NodeClass](obj); ok {
					c.classCounts.untrack(class.Name)
				}
				c.enqueueClass(obj)
				c.stampsChanged(obj, nil)
			},
		}},
		{namespaceInformer.Informer(), cache.ResourceEventHandlerFuncs{
			UpdateFunc: c.namespaceUpdated,
		}},
		{nodeInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.nodeAdded,
			UpdateFunc: c.nodeUpdated,
			DeleteFunc: c.nodeDeleted,
		}},
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			return nil, err
		}
	}
	logger.V(4).Info("NodeSetController wired")
	return c, nil
}

// Run starts workers and blocks until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	defer c.classQueue.ShutDown()
	defer c.wakeQueue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting NodeSetController")
	if !cache.WaitForNamedCacheSync("nodeset", ctx.Done(), c.synced...) {
		return fmt.Errorf("caches did not sync")
	}
	c.catchUp(ctx, catchUpTimeout)
	component.StartWorkers(ctx, c.queue, workers, "nodeset", c.syncNodeSet)
	component.StartWorkers(ctx, c.classQueue, 1, "nodeclass", c.syncClassProtection)
	component.StartWorkers(ctx, c.wakeQueue, 1, "nodeclass-wake", c.syncLimitWake)
	logger.Info("Started workers", "count", workers)
	<-ctx.Done()
	logger.Info("Shutting down NodeSetController")
	return nil
}

// WaitForCacheSync blocks until the caches synced or ctx is done.
func (c *Controller) WaitForCacheSync(ctx context.Context) bool {
	return cache.WaitForNamedCacheSync("nodeset", ctx.Done(), c.synced...)
}

// HasSynced reports whether the controller's caches have synced.
func (c *Controller) HasSynced() bool {
	for _, synced := range c.synced {
		if !synced() {
			return false
		}
	}
	return true
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) enqueueClass(obj any) {
	class, ok := nodeutil.EventObject[*nodesetv1alpha1.NodeClass](obj)
	if !ok {
		return
	}
	c.classQueue.Add(class.Name)
	sets, err := c.nodeSetIndexer.ByIndex(byClassIndex, class.Name)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, set := range sets {
		c.enqueue(set)
	}
}

// stampsChanged syncs every NodeSet when a class's stamped labels change
// (old or cur nil for a class added or deleted): a NodeSet of any class
// may set none of them (resolve.CatalogueConflicts).
func (c *Controller) stampsChanged(old, cur any) {
	stamped := func(obj any) map[string]string {
		if class, ok := nodeutil.EventObject[*nodesetv1alpha1.NodeClass](obj); ok {
			return resolve.StampedLabels(&class.Spec)
		}
		return map[string]string{}
	}
	if maps.Equal(stamped(old), stamped(cur)) {
		return
	}
	sets, err := c.nodeSetLister.List(everything)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, set := range sets {
		c.enqueue(set)
	}
}

// nodeSetUpdated syncs a changed NodeSet, except when the change is the
// status this controller wrote itself: a sync whose status write queued the
// set again at once would retry a failure in a hot loop, past the rate
// limiter's backoff. A periodic resync (same resourceVersion) always syncs.
func (c *Controller) nodeSetUpdated(oldObj, newObj any) {
	oldSet, newSet := oldObj.(*nodesetv1alpha1.NodeSet), newObj.(*nodesetv1alpha1.NodeSet)
	if oldSet.ResourceVersion != newSet.ResourceVersion && onlyOwnStatusChanged(oldSet, newSet) {
		return
	}
	c.enqueue(newObj)
}

// onlyOwnStatusChanged reports whether two versions of a NodeSet differ in
// nothing but the status fields the nodeset controller writes (the node
// controller's status.group is read by the sync, so a change of it counts).
func onlyOwnStatusChanged(old, cur *nodesetv1alpha1.NodeSet) bool {
	return old.Generation == cur.Generation &&
		equality.Semantic.DeepEqual(old.Labels, cur.Labels) &&
		equality.Semantic.DeepEqual(old.Annotations, cur.Annotations) &&
		equality.Semantic.DeepEqual(old.Finalizers, cur.Finalizers) &&
		equality.Semantic.DeepEqual(old.DeletionTimestamp, cur.DeletionTimestamp) &&
		equality.Semantic.DeepEqual(old.Status.Group, cur.Status.Group)
}

// wakeLimited syncs at once the NodeSets of a class that wait for room in
// its limits (LimitExceeded), when a machine of the class is gone or a
// creation the count held as pending is settled (by the wake worker, for
// the Node events: wakeClass): as many as there is room
// for, the one that has waited longest first (waitedLonger), and no more.
// The class is counted once here, not once by each waiting set's sync: with
// thousands of waiting sets, syncing them all for each machine gone would
// cost sets × sets per machine and hold up every other tenant's sets in the
// queue behind them. The set with key except ("" for none) is left to its
// own sync's requeue.
func (c *Controller) wakeLimited(className, except string) {
	if className == "" {
		return
	}
	objs, err := c.nodeSetIndexer.ByIndex(byWaitingIndex, className)
	if err != nil {
		return
	}
	var waiting []*nodesetv1alpha1.NodeSet
	for _, obj := range objs {
		if set := obj.(*nodesetv1alpha1.NodeSet); set.Namespace+"/"+set.Name != except {
			waiting = append(waiting, set)
		}
	}
	if len(waiting) == 0 {
		return
	}
	class, err := c.nodeClassLister.Get(className)
	if err != nil || !plan.Limited(class) {
		// No limit left to wait for: each set is told so by its sync.
		for _, set := range waiting {
			c.enqueue(set)
		}
		return
	}
	count, err := c.ClassCount(class)
	if err != nil {
		utilruntime.HandleError(err)
		for _, set := range waiting {
			c.enqueue(set)
		}
		return
	}
	slices.SortFunc(waiting, waitedLonger)
	var given plan.Usage // the room handed out so far, class-wide
	givenIn := map[string]int64{}
	for _, set := range waiting {
		key := set.Namespace + "/" + set.Name
		others := count.Usage(set.Namespace, key)
		others.Class += given.Class
		others.Namespace += givenIn[set.Namespace]
		own, want := count.Machines(key), int64(plan.Replicas(set))
		room, _ := plan.Room(class, set.Namespace, others)
		if room <= own && want > room {
			continue // neither grows nor fits: left waiting
		}
		// It grows into the room, or fits again (a lowered limit now met).
		c.enqueue(set)
		take := max(min(want, room)-own, 0)
		given.Class += take
		givenIn[set.Namespace] += take
	}
}

// wakeClass has the sets of a class waiting for room looked at by the
// wake worker (syncLimitWake); "" is no class.
func (c *Controller) wakeClass(className string) {
	if className != "" {
		c.wakeQueue.Add(className)
	}
}

// syncLimitWake looks at the sets of a class waiting for room: the
// events that queued the class while it waited are handled by one count.
func (c *Controller) syncLimitWake(_ context.Context, className string) error {
	c.wakeLimited(className, "")
	return nil
}

// waitingForRoom reports whether a NodeSet waits for room in its class's
// limits: refused for them (LimitExceeded), and not deleted (a deleted set
// grows no more).
func waitingForRoom(set *nodesetv1alpha1.NodeSet) bool {
	if set.DeletionTimestamp != nil {
		return false
	}
	accepted := findCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	return accepted != nil && accepted.Reason == ReasonLimitExceeded
}

// waitedLonger orders NodeSets waiting for room by how long they have
// waited: since their Accepted condition turned False, then since they
// were made, then by key.
func waitedLonger(a, b *nodesetv1alpha1.NodeSet) int {
	since := func(set *nodesetv1alpha1.NodeSet) time.Time {
		if accepted := findCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted); accepted != nil {
			return accepted.LastTransitionTime.Time
		}
		return time.Time{}
	}
	if d := since(a).Compare(since(b)); d != 0 {
		return d
	}
	if d := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); d != 0 {
		return d
	}
	return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
}

func (c *Controller) namespaceUpdated(oldObj, newObj any) {
	oldNS, newNS := oldObj.(*corev1.Namespace), newObj.(*corev1.Namespace)
	if fmt.Sprint(oldNS.Labels) == fmt.Sprint(newNS.Labels) {
		return
	}
	sets, err := c.nodeSetLister.NodeSets(newNS.Name).List(everything)
	if err != nil {
		return
	}
	for _, set := range sets {
		c.enqueue(set)
	}
}

// nodeSetKey returns the key of the NodeSet a Node belongs to, from its
// labels, for a Node nodeset holds: one with the nodeset.dev/termination
// finalizer (a NodeSet's Nodes are created with it, a group's get it from
// the node controller), or one already being deleted. Labels alone prove
// nothing: a kubelet's own Node labelled by hand with a set's labels is
// not one of its replicas, and would otherwise be picked by a scale-down
// or a rollout and, holding no finalizer, go at once, undrained.
func nodeSetKey(node *corev1.Node) (string, bool) {
	namespace, name, ok := nodeutil.NodeSetOf(node.Labels)
	if !ok || !nodeutil.Held(node) {
		return "", false
	}
	return namespace + "/" + name, true
}

func (c *Controller) nodeAdded(obj any) {
	node := obj.(*corev1.Node)
	c.nodeCounted(nil, node)
	c.enqueueSealOwner(node)
	key, ok := nodeSetKey(node)
	if !ok {
		return
	}
	waiting := !c.expectations.satisfied(key)
	if node.DeletionTimestamp != nil {
		c.expectations.deletionObserved(key, node.Name)
	} else {
		c.expectations.nodeObserved(key, node.Name)
		if waiting {
			// A set of the class held back by its limits while this Node
			// was on its way counts again, with the creation settled.
			c.wakeClass(node.Labels[nodesetv1alpha1.LabelNodeClass])
		}
	}
	c.enqueueForNode(key, waiting)
}

// enqueueForNode syncs a NodeSet after a change of one of its Nodes, at
// most once per NodeEventBatch: the delaying queue keeps the earliest time
// a key is due, so every change within the period joins the first. When
// the change is the last one the set's expectations were waiting for
// (waiting was true before it was observed), the sync is due at once: the
// next batch of creations or deletions waits for nothing else.
func (c *Controller) enqueueForNode(key string, waiting bool) {
	if c.nodeEventBatch <= 0 || (waiting && c.expectations.satisfied(key)) {
		c.queue.Add(key)
		return
	}
	c.queue.AddAfter(key, c.batchFor(key))
}

// batchFor is the NodeEventBatch of the set with key: longer for a large
// set (batchPerNode).
func (c *Controller) batchFor(key string) time.Duration {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	return max(c.nodeEventBatch, time.Duration(c.sizes[key])*batchPerNode)
}

// setNodes returns the cached Nodes of the NodeSet with key, less those
// none of nodeset's (stranger), and remembers how many there are for the
// set's NodeEventBatch.
func (c *Controller) setNodes(key string) ([]*corev1.Node, error) {
	objs, err := c.nodeIndexer.ByIndex(byNodeSetIndex, key)
	if err != nil {
		return nil, err
	}
	nodes := make([]*corev1.Node, 0, len(objs))
	for _, obj := range objs {
		if node, ok := obj.(*corev1.Node); ok && !c.stranger(node) {
			nodes = append(nodes, node)
		}
	}
	c.statusMu.Lock()
	c.sizes[key] = len(nodes)
	c.statusMu.Unlock()
	return nodes, nil
}

// stranger reports whether a Node that claims a NodeSet by its labels and
// holds nodeset's finalizer is none of nodeset's (nodeutil.Stranger): a
// kubelet registered it so. Such a Node is no replica, from the moment it
// appears: the node controller marks it with the seal "none" soon after,
// and no listing counts it from then on, but a scale-down in between
// would take it for one of the set's and remove one of the set's own.
func (c *Controller) stranger(node *corev1.Node) bool {
	if _, sealed := node.Labels[nodesetv1alpha1.LabelSeal]; sealed {
		return false
	}
	class, err := c.nodeClassLister.Get(node.Labels[nodesetv1alpha1.LabelNodeClass])
	return err == nil && nodeutil.Stranger(node, class, c.now())
}

func (c *Controller) nodeUpdated(oldObj, newObj any) {
	oldNode, newNode := oldObj.(*corev1.Node), newObj.(*corev1.Node)
	if oldNode.ResourceVersion == newNode.ResourceVersion {
		return
	}
	c.nodeCounted(oldNode, newNode)
	c.enqueueSealOwner(newNode)
	newKey, ok := nodeSetKey(newNode)
	if ok {
		waiting := !c.expectations.satisfied(newKey)
		if newNode.DeletionTimestamp != nil && oldNode.DeletionTimestamp == nil {
			c.expectations.deletionObserved(newKey, newNode.Name)
		}
		c.enqueueForNode(newKey, waiting)
	}
	if oldKey, ok := nodeSetKey(oldNode); ok && oldKey != newKey {
		c.enqueueForNode(oldKey, false)
	}
}

func (c *Controller) nodeDeleted(obj any) {
	node, ok := nodeutil.EventObject[*corev1.Node](obj)
	if !ok {
		return
	}
	c.nodeCounted(node, nil)
	if key, ok := nodeSetKey(node); ok {
		waiting := !c.expectations.satisfied(key)
		c.expectations.deletionObserved(key, node.Name)
		c.enqueueForNode(key, waiting)
	}
	c.wakeClass(node.Labels[nodesetv1alpha1.LabelNodeClass])
	if class, err := c.nodeClassLister.Get(node.Labels[nodesetv1alpha1.LabelNodeClass]); err == nil && class.DeletionTimestamp != nil {
		c.classQueue.Add(class.Name) // a deleted class may wait for this Node
	}
}

// isNotFound is apierrors.IsNotFound, named for the listers' errors too.
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
