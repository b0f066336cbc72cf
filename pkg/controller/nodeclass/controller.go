// Package nodeclass is the NodeClassController: in the node controller, it
// asks each served driver whether a NodeClass's configuration can work and
// writes the answer as the class's Valid condition, with what kind of driver
// serves it and what a node of the class offers; and for each NodeSet of a
// valid class, what a node of the set's own template offers.
package nodeclass

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/component"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	informers "nodeset.dev/nodeset/pkg/generated/informers/externalversions/nodeset/v1alpha1"
	listers "nodeset.dev/nodeset/pkg/generated/listers/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/redact"
)

// Reasons of the Valid condition.
const (
	ReasonValid                = "Valid"
	ReasonInvalidConfiguration = "InvalidConfiguration"
	ReasonValidationFailed     = "ValidationFailed"
	ReasonValidationPanicked   = "ValidationPanicked"
)

// Controller writes the Valid condition of the NodeClasses whose driver is served.
type Controller struct {
	client   versioned.Interface
	lister   listers.NodeClassLister
	sets     listers.NodeSetLister
	synced   []cache.InformerSynced
	registry drivers.Registry
	queue    workqueue.TypedRateLimitingInterface[string]
	// setQueue holds the NodeSets ("namespace/name") whose template
	// capacity may be stale.
	setQueue workqueue.TypedRateLimitingInterface[string]
	// credentials reads a class's credentials for the driver's calls.
	credentials Credentials
}

// Credentials returns the data of a class's credentials Secret, nil when it
// has none.
type Credentials func(ctx context.Context, class *nodesetv1alpha1.NodeClass) (map[string][]byte, error)

// NewController returns a NodeClassController for the drivers in registry.
func NewController(client versioned.Interface, informer informers.NodeClassInformer, setInformer informers.NodeSetInformer,
	registry drivers.Registry, credentials Credentials) (*Controller, error) {
	if credentials == nil {
		credentials = func(context.Context, *nodesetv1alpha1.NodeClass) (map[string][]byte, error) { return nil, nil }
	}
	c := &Controller{
		client:      client,
		credentials: credentials,
		lister:      informer.Lister(),
		sets:        setInformer.Lister(),
		synced:      []cache.InformerSynced{informer.Informer().HasSynced, setInformer.Informer().HasSynced},
		registry:    registry,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeclass"}),
		setQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeset_capacity"}),
	}
	enqueue := func(obj any) {
		if class, ok := obj.(*nodesetv1alpha1.NodeClass); ok && registry[class.Spec.Driver] != nil {
			c.queue.Add(class.Name)
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	_, err := setInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueSet,
		UpdateFunc: func(old, obj any) {
			// Progress in the status changes nothing here.
			if o, n := old.(*nodesetv1alpha1.NodeSet), obj.(*nodesetv1alpha1.NodeSet); o.Generation != n.Generation || o.Status.TemplateHash != n.Status.TemplateHash || capacityHash(o) != capacityHash(n) {
				c.enqueueSet(obj)
			}
		},
	})
	return c, err
}

func (c *Controller) enqueueSet(obj any) {
	if set, ok := obj.(*nodesetv1alpha1.NodeSet); ok && set.DeletionTimestamp == nil {
		c.setQueue.Add(set.Namespace + "/" + set.Name)
	}
}

func capacityHash(set *nodesetv1alpha1.NodeSet) string {
	if set.Status.Capacity == nil {
		return ""
	}
	return set.Status.Capacity.TemplateHash
}

// Run validates classes until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	defer c.setQueue.ShutDown()
	if !cache.WaitForNamedCacheSync("nodeclass", ctx.Done(), c.synced...) {
		return fmt.Errorf("caches did not sync")
	}
	component.StartWorkers(ctx, c.queue, workers, "nodeclass", c.sync)
	component.StartWorkers(ctx, c.setQueue, workers, "nodeset", c.syncSetCapacity)
	<-ctx.Done()
	return nil
}

// sync judges a class. A panic (a driver's bug on a configuration it did
// not expect) fails this class's sync alone, retried with backoff, instead
// of taking down the process and with it every other class and Node it
// serves: a class with no verdict for its generation gets Valid=Unknown,
// reason ValidationPanicked, with the panic's message.
func (c *Controller) sync(ctx context.Context, name string) (err error) {
	var creds map[string][]byte // read by this sync, kept out of a panic's message
	defer func() {
		if r := recover(); r != nil {
			err = c.panicked(ctx, name, creds, r)
		}
	}()
	err = c.validate(ctx, name, &creds)
	return redact.ShapesOf(redact.Error(creds, err))
}

// panicked turns a panic in the sync of the named class into its error,
// and into its Valid condition when the class has no verdict for its
// generation yet.
func (c *Controller) panicked(ctx context.Context, name string, creds map[string][]byte, r any) error {
	cached, getErr := c.lister.Get(name)
	if getErr != nil {
		return fmt.Errorf("validating NodeClass %s panicked: %s", name, redact.String(creds, fmt.Sprint(r)))
	}
	err := fmt.Errorf("driver %s panicked validating NodeClass %s: %s", cached.Spec.Driver, name, redact.String(creds, fmt.Sprint(r)))
	klog.FromContext(ctx).Error(err, "Recovered from a panic", "nodeclass", name, "stack", redact.String(creds, string(debug.Stack())))
	driver := c.registry[cached.Spec.Driver]
	if driver == nil {
		return err
	}
	return c.undecided(ctx, cached.DeepCopy(), driver, ReasonValidationPanicked, err)
}

// validate writes the class's verdict, keeping in *creds the credentials
// it read.
func (c *Controller) validate(ctx context.Context, name string, read *map[string][]byte) error {
	cached, err := c.lister.Get(name)
	if err != nil {
		return nil // deleted
	}
	driver := c.registry[cached.Spec.Driver]
	if driver == nil {
		return nil
	}
	class := cached.DeepCopy()
	condition := metav1.Condition{Type: nodesetv1alpha1.NodeClassValid, ObservedGeneration: class.Generation}
	problem := SpecErrors(&class.Spec)
	if problem == nil {
		problem = driver.Validate(ctx, drivers.Class{Name: class.Name, Spec: class.Spec})
		if drivers.CouldNotAnswer(problem) {
			// A plugin that hung or crashed, a throttled call: no word on
			// the class, which would otherwise stay Valid=False, its
			// NodeSets frozen, until something made it be looked at again.
			return c.undecided(ctx, class, driver, ReasonValidationFailed,
				fmt.Errorf("driver %s could not validate NodeClass %s now: %w", class.Spec.Driver, class.Name, problem))
		}
	}
	var (
		creds    map[string][]byte
		credsErr error
	)
	if problem == nil {
		// Reported, and retried: the Secret may not be there yet (its
		// creation is watched, too).
		creds, credsErr = c.credentials(ctx, class)
		*read = creds
		if credsErr != nil {
			credsErr = fmt.Errorf("spec.credentialsSecretRef: %w", credsErr)
		}
		problem = credsErr
	}
	if cloud, ok := driver.(drivers.CloudValidator); ok && problem == nil {
		// The cloud's word on the image, the network, the credentials.
		// A cloud's error may echo what it was sent: the class's
		// credentials never reach the condition or the log.
		err := redact.Error(creds, cloud.ValidateCloud(ctx, drivers.Class{Name: class.Name, Spec: class.Spec, Credentials: creds}))
		if err != nil && !errors.Is(err, drivers.ErrInvalidConfiguration) {
			err = fmt.Errorf("validating NodeClass %s against the cloud: %w", class.Name, err)
			return c.undecided(ctx, class, driver, ReasonValidationFailed, err)
		}
		problem = err
	}
	switch {
	case problem == nil:
		condition.Status, condition.Reason = metav1.ConditionTrue, ReasonValid
		condition.Message = fmt.Sprintf("driver %s accepts the configuration", class.Spec.Driver)
	default:
		condition.Status, condition.Reason, condition.Message = metav1.ConditionFalse, ReasonInvalidConfiguration, conditionMessage(problem)
	}
	status := *class.Status.DeepCopy()
	status.ObservedGeneration = class.Generation
	meta.SetStatusCondition(&status.Conditions, condition)
	status.Capacity = nil
	status.DriverKind = KindOf(driver)
	status.SealedSince = SealedSince(class, time.Now())
	if problem == nil {
		capacity, err := driver.Capacity(ctx, drivers.Class{Name: class.Name, Spec: class.Spec, Credentials: creds})
		err = redact.Error(creds, err)
		switch {
		case err == nil:
			status.Capacity = &nodesetv1alpha1.NodeCapacity{Resources: capacity.Resources, Allocatable: capacity.Allocatable,
				Labels: capacity.Labels, Taints: capacity.Taints}
		case errors.Is(err, drivers.ErrNotImplemented):
		case errors.Is(err, drivers.ErrInvalidConfiguration):
			// The cloud refused the configuration (an unknown instance
			// type, bad credentials): its word, not a retry.
			condition.Status, condition.Reason, condition.Message = metav1.ConditionFalse, ReasonInvalidConfiguration, conditionMessage(err)
			meta.SetStatusCondition(&status.Conditions, condition)
		default:
			return c.undecided(ctx, class, driver, ReasonValidationFailed, fmt.Errorf("reading the capacity of NodeClass %s from driver %s: %w", class.Name, class.Spec.Driver, err))
		}
	}
	if equality.Semantic.DeepEqual(status, class.Status) {
		c.enqueueSetsOf(class.Name)
		return credsErr
	}
	class.Status = status
	klog.FromContext(ctx).V(2).Info("Validated NodeClass", "nodeclass", name, "valid", condition.Status, "message", condition.Message)
	if _, err := c.client.NodesetV1alpha1().NodeClasses().UpdateStatus(ctx, class, metav1.UpdateOptions{}); err != nil {
		return err
	}
	c.enqueueSetsOf(class.Name)
	return credsErr
}

// undecided reports a validation that could not finish (the cloud did not
// answer, the driver panicked) and returns err so it is retried. A class
// whose current generation has a verdict keeps it: a blip in the cloud must
// not take the nodes of a valid class away. A new generation, or a class
// never judged, gets Valid=Unknown with reason (ValidationFailed,
// ValidationPanicked) and the error, so that it has a verdict after one
// sync.
func (c *Controller) undecided(ctx context.Context, class *nodesetv1alpha1.NodeClass, driver drivers.Driver, reason string, err error) error {
	if valid := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid); valid != nil &&
		valid.ObservedGeneration == class.Generation && valid.Status != metav1.ConditionUnknown {
		return err
	}
	status := *class.Status.DeepCopy()
	status.ObservedGeneration = class.Generation
	status.DriverKind = KindOf(driver)
	status.SealedSince = SealedSince(class, time.Now())
	status.Capacity = nil
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: nodesetv1alpha1.NodeClassValid, Status: metav1.ConditionUnknown,
		ObservedGeneration: class.Generation, Reason: reason, Message: conditionMessage(err)})
	if equality.Semantic.DeepEqual(status, class.Status) {
		return err
	}
	class.Status = status
	if _, updateErr := c.client.NodesetV1alpha1().NodeClasses().UpdateStatus(ctx, class, metav1.UpdateOptions{}); updateErr != nil {
		return errors.Join(err, updateErr)
	}
	c.enqueueSetsOf(class.Name)
	return err
}

// maxConditionMessage is the most bytes of a condition's message the API
// server takes (metav1.Condition's schema, maxLength 32768). A cloud's or a
// plugin's error (an HTML error page, a plugin's whole output) may be
// longer: written whole, the status update would be refused, and the class
// would never get its verdict.
const maxConditionMessage = 32768

// conditionMessage is err's text as the Valid condition tells it: cut to
// maxConditionMessage bytes, without what has the form of a credential.
// The class's own credentials are scrubbed before (redact.Error).
func conditionMessage(err error) string {
	return redact.Cut(redact.Shapes(err.Error()), maxConditionMessage)
}

// UpgradeGrace is how long after a node controller of this release first
// serves a class that an earlier release served, Nodes made without a seal
// are still taken as nodeset's (nodeutil.Stranger): those an earlier
// nodeset controller makes while both controllers are upgraded.
const UpgradeGrace = 10 * time.Minute

// SealedSince is the class's status.sealedSince: kept once written; else
// the class's creation, when no node controller has served it yet (every
// Node of it is made sealed), or UpgradeGrace from now, when an earlier
// release served it (its status has a verdict or a driver kind but no
// sealedSince).
func SealedSince(class *nodesetv1alpha1.NodeClass, now time.Time) *metav1.Time {
	switch {
	case class.Status.SealedSince != nil:
		return class.Status.SealedSince
	case len(class.Status.Conditions) == 0 && class.Status.DriverKind == "":
		return class.CreationTimestamp.DeepCopy()
	default:
		since := metav1.NewTime(now.Add(UpgradeGrace)).Rfc3339Copy()
		return &since
	}
}

// EnqueueClassesOfSecret validates again the classes whose
// credentialsSecretRef names the Secret namespace/name, and returns their
// names: a Secret created, fixed or rotated is seen at once, not on the
// next retry.
func (c *Controller) EnqueueClassesOfSecret(namespace, name string) []string {
	classes, err := c.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	var enqueued []string
	for _, class := range classes {
		if ref := class.Spec.CredentialsSecretRef; ref != nil && ref.Namespace == namespace && ref.Name == name && c.registry[class.Spec.Driver] != nil {
			c.queue.Add(class.Name)
			enqueued = append(enqueued, class.Name)
		}
	}
	return enqueued
}
