// Package node is the NodeController: for every Node of a class whose driver
// it serves, it provisions the machine, records the providerID, lifts the
// startup taint once the kubelet reports Ready, replaces machines that never
// register, and on deletion cordons, drains, deprovisions and only then lets
// the Node go.
package node

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	informers "nodeset.dev/nodeset/pkg/generated/informers/externalversions/nodeset/v1alpha1"
	listers "nodeset.dev/nodeset/pkg/generated/listers/nodeset/v1alpha1"
)

// Event reasons on Nodes.
const (
	ReasonProvisioned         = "Provisioned"
	ReasonProvisioningFailed  = "ProvisioningFailed"
	ReasonRegistered          = "Registered"
	ReasonRegistrationTimeout = "RegistrationTimeout"
	ReasonDrainStarted        = "DrainStarted"
	ReasonEvictionBlocked     = "EvictionBlocked"
	ReasonDrainTimedOut       = "DrainTimedOut"
	ReasonDrained             = "Drained"
	ReasonDeprovisioned       = "Deprovisioned"
	ReasonDeprovisionFailed   = "DeprovisionFailed"
)

// Options tunes the controller.
type Options struct {
	// Cluster names the cluster in the owner tags drivers put on machines.
	Cluster string
	// DrainRecheck is how often a drain waiting on pods is looked at again. Default 2s.
	DrainRecheck time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Evict posts one pod eviction; when nil, a POST to the eviction
	// subresource that returns a refusal at once instead of retrying it.
	Evict func(ctx context.Context, pod *corev1.Pod) error
	// NodeSets writes the NodeSets' RemediationAllowed condition; without it
	// the cap still holds but is only reported in Events.
	NodeSets versioned.Interface
	// Remediation caps the replacement of unhealthy Nodes.
	Remediation RemediationOptions
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
	if opts.Evict == nil {
		opts.Evict = evictWithoutRetries(kube)
	}
	c := &Controller{
		kube: kube, recorder: recorder, registry: registry, metrics: metrics, opts: opts,
		nodes:   nodeInformer.Lister(),
		classes: nodeClassInformer.Lister(),
		sets:    nodeSetInformer.Lister(),
		synced: []cache.InformerSynced{nodeInformer.Informer().HasSynced,
			nodeClassInformer.Informer().HasSynced, nodeSetInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "node"}),
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueNode,
		UpdateFunc: func(_, obj any) { c.enqueueNode(obj) },
		DeleteFunc: c.enqueueNode,
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
	logger := klog.FromContext(ctx)
	logger.Info("Starting NodeController", "drivers", c.registryNames())
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("caches did not sync")
	}
	for range workers {
		go wait.UntilWithContext(ctx, c.runWorker, time.Second)
	}
	<-ctx.Done()
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

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	name, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(name)
	if err := c.syncNode(ctx, name); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing Node; requeuing", "node", name)
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	return true
}

func (c *Controller) enqueueNode(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok || node.Labels[nodesetv1alpha1.LabelNodeClass] == "" {
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
}
