// Package node is the NodeController: for every Node of a class whose driver
// it serves, it provisions the machine, records the providerID, lifts the
// startup taint once the kubelet reports Ready, replaces machines that never
// register, and on deletion cordons, drains, deprovisions and only then lets
// the Node go.
package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/component"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	informers "nodeset.dev/nodeset/pkg/generated/informers/externalversions/nodeset/v1alpha1"
	listers "nodeset.dev/nodeset/pkg/generated/listers/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// Event reasons on Nodes.
const (
	ReasonProvisioned         = "Provisioned"
	ReasonProvisioningFailed  = "ProvisioningFailed"
	ReasonRegistered          = "Registered"
	ReasonRegistrationTimeout = "RegistrationTimeout"
	ReasonDrainStarted        = "DrainStarted"
	ReasonEvictionBlocked     = "EvictionBlocked"
	ReasonEvictionFailed      = "EvictionFailed"
	ReasonDrainTimedOut       = "DrainTimedOut" // nodesetv1alpha1.ReasonDrainTimedOut; a literal for the docs check
	ReasonDrained             = "Drained"
	ReasonDeprovisioned       = "Deprovisioned"
	ReasonDeprovisionFailed   = "DeprovisionFailed"
)

// DefaultWorkers is the node controller's default --workers. A leaving
// Node holds a worker through its cordon, its pod list and its release,
// round trips of about half a second together on an API server as busy as
// a scale-down of 10,000 Nodes makes it: with 128 workers the node
// controller trailed the deletions by 3-4 s per Node there (median, in
// the benchmark), with 256 by 0.4 s. 256 requests in flight stay below
// the 300 that one flow may queue at a priority level (6 queues of 50).
const DefaultWorkers = 256

// Options tunes the controller.
type Options struct {
	// Cluster names the cluster in the owner tags drivers put on machines.
	Cluster string
	// DrainRecheck is how often a drain waiting on pods is looked at again. Default 2s.
	DrainRecheck time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Evict posts one pod eviction; when nil, a POST to the eviction
	// subresource (on the Drain client) that returns a refusal at once
	// instead of retrying it.
	Evict func(ctx context.Context, pod *corev1.Pod, options *metav1.DeleteOptions) error
	// Drain is the client of the drains: the cordons, the drains' progress,
	// their pod lists and evictions. Given its own rate limit, a scale-down's
	// cordons do not queue behind the releases of Nodes already drained (a
	// Node leaving takes two writes of this controller, each of which would
	// otherwise wait for the other's). The main client when nil.
	Drain kubernetes.Interface
	// NodeSets writes the NodeSets' RemediationAllowed condition; without it
	// the cap still holds but is only reported in Events.
	NodeSets versioned.Interface
	// Remediation caps the replacement of unhealthy Nodes.
	Remediation RemediationOptions
	// GroupPollInterval is how often the cloud group of each NodeSet of a
	// group driver is looked at when nothing changes (every 2s while its
	// machines come and go). Default 30s.
	GroupPollInterval time.Duration
	// ProviderIDWait is how long after making a NodeSet's machine the
	// providerID waits for the kubelet to report Ready, so that recording it
	// and lifting the startup taint are one write. A machine whose kubelet
	// is slower gets its providerID on its own once the wait is over. 0
	// records it at once.
	ProviderIDWait time.Duration
	// EventPeriod is how often the routine steps of a NodeSet's Nodes are
	// told, as one Event per step on the NodeSet. Default 5s.
	EventPeriod time.Duration
	// RequireNodeClaimsPolicy: a lone Node (of a class, of no NodeSet) gets
	// a machine only if it was made after the ValidatingAdmissionPolicy
	// NodeClaimsPolicy and its binding, which keep kubelets from making
	// such a request, were in force. Off: any lone Node gets one.
	RequireNodeClaimsPolicy bool
	// MayAct says whether this replica may make a driver call with a side
	// effect now (create, delete, resize or terminate a machine or group):
	// nil while it surely leads. The API clients are fenced the same way;
	// this fence covers the clouds. Nil: always.
	MayAct func() error
}

// Controller provisions, registers, drains and deprovisions the machines behind Nodes.
type Controller struct {
	kube     kubernetes.Interface
	recorder record.EventRecorder
	registry drivers.Registry
	metrics  *Metrics
	opts     Options

	nodes   corelisters.NodeLister
	classes listers.NodeClassLister
	sets    listers.NodeSetLister
	synced  []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]
	// nodeRetries is queue's backoff of a Node whose sync failed.
	nodeRetries workqueue.TypedRateLimiter[string]
	// groups holds the NodeSets (namespace/name) of group drivers whose
	// cloud group is to be synced.
	groups workqueue.TypedRateLimitingInterface[string]
	// groupSizes are the cloud groups sized, and the sizes last given.
	groupSizes groupSizes
	// heldGroups are the refusals told in an Event for the NodeSets whose
	// cloud groups holdGroup holds. The hold is looked at again every poll
	// until the NodeSetController's verdict comes, and as long as it does
	// not (that controller down or behind) an Event each time would be an
	// API write for every held set every poll; the recorder's spam filter
	// lets 25 through per set before it slows them to one in five minutes.
	// A refusal is told again once it changes (another class, another
	// reason), once the hold has ended (the group grown, a verdict given)
	// and begun again, and for a new set of the same name.
	heldGroups  *objectMemory[string]
	nodeIndexer cache.Indexer
	// setIndexer indexes the NodeSets by the seal of their Nodes.
	setIndexer cache.Indexer

	credentialsMu    sync.Mutex
	credentialsCache map[string]credentialsRead

	terminatedMu sync.Mutex
	// terminated are the providerIDs of group machines terminated lately.
	terminated map[string]time.Time

	// made are the machines made for Nodes whose providerID is not
	// recorded yet (Options.ProviderIDWait).
	made *objectMemory[madeMachine]
	// released are the Nodes whose finalizer this controller removed, until
	// the cache sees them gone: a sync on the cache's older copy would
	// otherwise deprovision and release them again.
	released *objectMemory[struct{}]
	// deprovisioned are the Nodes whose machine the driver confirmed gone
	// and whose release failed: the release is retried alone, without a
	// second drain (its pod list, Event and duration) or delete.
	deprovisioned *objectMemory[struct{}]
	// recorded are the Nodes whose machine (and registration) this
	// controller wrote, until the cache shows the write: a sync on the
	// cache's older copy would otherwise make the same write again, and
	// be refused for the taints it tests.
	recorded *objectMemory[recordedMachine]
	// drainConditions are the Draining conditions this controller wrote,
	// until the cache sees the Node gone (drainConditionOf).
	drainConditions *objectMemory[corev1.NodeCondition]
	// heartbeats are when the lifecycle action of a draining interrupted
	// Node was last kept waiting.
	heartbeats *objectMemory[time.Time]
	// tamperedReported are the relabelled Nodes told about, with the
	// resourceVersion told about: once per change of the Node.
	tamperedReported *objectMemory[string]
	// restored are the relabelled Nodes whose labels were put back lately.
	restored *objectMemory[restoreRecord]
	// waiting are the Nodes whose machine the cloud had no room for
	// (retryWaiting).
	waiting *objectMemory[waitingForRoom]

	routine *routineEvents
	pods    *PodLists

	// started is when Run's caches synced: a registered Node is judged
	// NotReady for no longer than this controller has watched it.
	started time.Time
}

// maxNodeRetryDelay caps the backoff of a Node whose sync failed. A Node
// whose machine the cloud would not make (no room in the zone, a quota used
// up, its API down) is tried again at least this often, so room the cloud
// gains by itself (capacity back, a quota raised, another account's
// machines gone), which nodeset cannot see, is taken within minutes rather
// than after client-go's default cap of 1000 s. Five minutes is also
// cluster-autoscaler's first backoff of a node group whose scale-up failed.
const maxNodeRetryDelay = 5 * time.Minute

// newNodeRetries is client-go's default controller backoff (5 ms doubling
// per failure of an item, and 10 retries a second overall with bursts of
// 100) with each Node's delay capped at maxNodeRetryDelay.
func newNodeRetries() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, maxNodeRetryDelay),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// NewController returns a NodeController for the drivers in registry.
func NewController(
	kube kubernetes.Interface,
	recorder record.EventRecorder,
	nodeInformer coreinformers.NodeInformer,
	nodeClassInformer informers.NodeClassInformer,
	nodeSetInformer informers.NodeSetInformer,
	registry drivers.Registry,
	metrics *Metrics,
	opts Options,
) (*Controller, error) {
	if opts.DrainRecheck <= 0 {
		opts.DrainRecheck = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.GroupPollInterval <= 0 {
		opts.GroupPollInterval = 30 * time.Second
	}
	if opts.EventPeriod <= 0 {
		opts.EventPeriod = 5 * time.Second
	}
	if opts.Drain == nil {
		opts.Drain = kube
	}
	if opts.Evict == nil {
		opts.Evict = evictWithoutRetries(opts.Drain)
	}
	nodeRetries := newNodeRetries()
	c := &Controller{
		kube: kube, recorder: recorder, registry: registry, metrics: metrics, opts: opts,
		nodes:   nodeInformer.Lister(),
		classes: nodeClassInformer.Lister(),
		sets:    nodeSetInformer.Lister(),
		synced: []cache.InformerSynced{nodeInformer.Informer().HasSynced,
			nodeClassInformer.Informer().HasSynced, nodeSetInformer.Informer().HasSynced},
		nodeRetries: nodeRetries,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(nodeRetries,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "node"}),
		groups: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "group"}),
		nodeIndexer:      nodeInformer.Informer().GetIndexer(),
		groupSizes:       groupSizes{sizes: map[string]groupSize{}},
		terminated:       map[string]time.Time{},
		made:             newObjectMemory[madeMachine](),
		released:         newObjectMemory[struct{}](),
		deprovisioned:    newObjectMemory[struct{}](),
		recorded:         newObjectMemory[recordedMachine](),
		drainConditions:  newObjectMemory[corev1.NodeCondition](),
		heartbeats:       newObjectMemory[time.Time](),
		tamperedReported: newObjectMemory[string](),
		restored:         newObjectMemory[restoreRecord](),
		waiting:          newObjectMemory[waitingForRoom](),
		heldGroups:       newObjectMemory[string](),
		setIndexer:       nodeSetInformer.Informer().GetIndexer(),
		routine:          newRoutineEvents(recorder, nodeSetInformer.Lister()),
		pods:             NewPodLists(opts.Drain),

		credentialsCache: map[string]credentialsRead{},
	}
	c.recorder = scrubbingRecorder{EventRecorder: recorder, scrub: c.scrub}
	c.routine.recorder = c.recorder
	if err := nodeInformer.Informer().AddIndexers(cache.Indexers{providerIDIndex: indexByProviderID, machineIDIndex: indexByMachineID, sealIndex: nodeutil.IndexRelabelledBySeal}); err != nil {
		return nil, err
	}
	if err := nodeSetInformer.Informer().AddIndexers(cache.Indexers{setSealIndex: nodeutil.IndexSetBySeal}); err != nil {
		return nil, err
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.enqueueNode(obj)
			if node, ok := obj.(*corev1.Node); ok {
				c.enqueueNodeGroup(node)
			}
		},
		UpdateFunc: func(old, obj any) {
			c.enqueueNode(obj)
			if oldNode, node := old.(*corev1.Node), obj.(*corev1.Node); (oldNode.DeletionTimestamp == nil) != (node.DeletionTimestamp == nil) {
				c.enqueueNodeGroup(node)
			}
		},
		DeleteFunc: func(obj any) {
			c.enqueueNode(obj)
			if node, ok := nodeutil.EventObject[*corev1.Node](obj); ok {
				c.enqueueNodeGroup(node)
			}
		},
	}); err != nil {
		return nil, err
	}
	if _, err := nodeSetInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueGroup,
		UpdateFunc: func(_, obj any) { c.enqueueGroup(obj) },
		DeleteFunc: c.enqueueGroup,
	}); err != nil {
		return nil, err
	}
	// A class that appears or changes may unblock its Nodes.
	if _, err := nodeClassInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueClassNodes,
		UpdateFunc: func(_, obj any) { c.enqueueClassNodes(obj) },
	}); err != nil {
		return nil, err
	}
	return c, nil
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

// WaitForCacheSync blocks until the caches synced or ctx is done.
func (c *Controller) WaitForCacheSync(ctx context.Context) bool {
	return cache.WaitForNamedCacheSync("node", ctx.Done(), c.synced...)
}

// Run starts workers and blocks until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	defer c.groups.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting NodeController", "drivers", c.registryNames())
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("caches did not sync")
	}
	c.started = c.opts.Now()
	component.StartWorkers(ctx, c.queue, workers, "node", c.syncNode)
	component.StartWorkers(ctx, c.groups, workers, "nodeset", c.syncGroup)
	go wait.Until(c.routine.flush, c.opts.EventPeriod, ctx.Done())
	go c.runInterruptions(ctx)
	go wait.UntilWithContext(ctx, c.sealUnsealed, sealPeriod)
	<-ctx.Done()
	c.routine.flush()
	logger.Info("Shutting down NodeController")
	return nil
}

func (c *Controller) registryNames() []string {
	var names []string
	for name := range c.registry {
		names = append(names, name)
	}
	return names
}

func (c *Controller) enqueueNode(obj any) {
	node, ok := nodeutil.EventObject[*corev1.Node](obj)
	if !ok {
		return
	}
	// A Node of a class, or one held for its machine whose class label was
	// removed by hand: its deletion still deprovisions the machine.
	if node.Labels[nodesetv1alpha1.LabelNodeClass] == "" && !slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination) {
		return
	}
	c.queue.Add(node.Name)
}

func (c *Controller) enqueueClassNodes(obj any) {
	class, ok := obj.(*nodesetv1alpha1.NodeClass)
	if !ok || c.registry[class.Spec.Driver] == nil {
		return
	}
	nodes, err := c.nodes.List(labelsFor(nodesetv1alpha1.LabelNodeClass, class.Name))
	if err != nil {
		return
	}
	for _, n := range nodes {
		c.queue.Add(n.Name)
	}
	if _, ok := c.registry.Group(class.Spec.Driver); ok {
		sets, err := c.sets.List(labels.Everything())
		if err != nil {
			return
		}
		for _, set := range sets {
			if set.Spec.NodeClassName == class.Name {
				c.groups.Add(set.Namespace + "/" + set.Name)
			}
		}
	}
}
