package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/redact"
	"nodeset.dev/nodeset/pkg/resolve"
)

// defaultRegistrationTimeout applies when a class has none (the schema defaults it).
const defaultRegistrationTimeout = 15 * time.Minute

// ReasonForeignNode is the Event reason of a Node with a class label that
// already has a host of its own, not made by the class's driver: it gets
// no machine.
const ReasonForeignNode = "ForeignNode"

// ReasonSyncPanicked is the Event reason of a Node whose sync panicked.
const ReasonSyncPanicked = "SyncPanicked"

// syncNode reconciles the named Node. The error it returns, which the
// worker logs, is scrubbed of every credential the controller has read:
// a driver's error may quote one. A panic (a driver's bug on a class or
// NodeSet it did not expect) fails this Node's sync alone, retried with
// backoff and told on the Node, instead of taking down the process and
// with it every other Node it serves.
func (c *Controller) syncNode(ctx context.Context, name string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = c.panicked(ctx, r, "sync of Node "+name, "node", name)
			if node, getErr := c.nodes.Get(name); getErr == nil {
				c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonSyncPanicked, "%v; retried with backoff", err)
			}
		}
	}()
	return c.scrubbedError(c.reconcileNode(ctx, name))
}

func (c *Controller) reconcileNode(ctx context.Context, name string) error {
	cached, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.made.forget(name)
		c.released.forget(name)
		c.deprovisioned.forget(name)
		c.recorded.forget(name)
		c.drainConditions.forget(name)
		c.heartbeats.forget(name)
		c.tamperedReported.forget(name)
		c.restored.forget(name)
		c.waiting.forget(name)
		return nil
	}
	if err != nil {
		return err
	}
	if nodeutil.Tampered(cached.Labels) {
		// Relabelled by its kubelet: nothing is done to its machine on the
		// word of those labels, its deletion included; its labels are put
		// back first.
		return c.restoreLabels(ctx, cached)
	}
	className := cached.Labels[nodesetv1alpha1.LabelNodeClass]
	var class *nodesetv1alpha1.NodeClass
	if className == "" {
		// Not a nodeset Node, unless it is held for a driver (its class
		// label was removed by hand): then its deletion is still carried
		// out by the driver recorded on it, as when its class is gone.
		if cached.DeletionTimestamp == nil || cached.Annotations[nodesetv1alpha1.AnnotationDriver] == "" ||
			!slices.Contains(cached.Finalizers, nodesetv1alpha1.FinalizerTermination) {
			return nil
		}
	} else if class, err = c.classes.Get(className); apierrors.IsNotFound(err) {
		class = nil
	} else if err != nil {
		return err
	}
	if nodeutil.Stranger(cached, class, c.opts.Now()) {
		// Registered by a kubelet with nodeset's labels and finalizer:
		// none of nodeset's, whatever its labels claim.
		return c.markStranger(ctx, cached, class)
	}
	// The driver that made the Node's machine is the one to remove it. A
	// class of the Node's class name whose driver is another (made again
	// under the name, or edited with the webhook away) is not the class of
	// that machine: the Node goes as if its class were gone.
	driverName := cached.Annotations[nodesetv1alpha1.AnnotationDriver]
	if class != nil && driverName == "" {
		driverName = class.Spec.Driver
	} else if class != nil && driverName != class.Spec.Driver {
		class = nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "node", name, "driver", driverName)
	ctx = klog.NewContext(ctx, logger)
	node := cached.DeepCopy()
	if groupDriver, ok := c.registry.Group(driverName); ok {
		return c.syncGroupNode(ctx, node, class, groupDriver)
	}
	driver, served := c.registry.Machine(driverName)
	if !served {
		return nil // another node controller's
	}
	if node.DeletionTimestamp != nil {
		c.made.forget(name)
		c.waiting.forget(name)
		classOf := func(context.Context) (drivers.Class, error) {
			return drivers.Class{Name: node.Labels[nodesetv1alpha1.LabelNodeClass]}, nil
		}
		if class != nil {
			// With the class's credentials, read when the machine is to go.
			classOf = func(ctx context.Context) (drivers.Class, error) { return c.terminationClass(ctx, class, c.setOf(node)) }
		}
		return c.terminate(ctx, node, class, machineDeprovisioner(driver, node.Name, classOf))
	}
	if class == nil {
		return nil // provisioned when the class appears
	}
	if c.cacheBehind(node) {
		return nil // the event of the write brings the Node back
	}
	if node.Spec.ProviderID == "" || !slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination) {
		machineClass, err := c.machineClass(ctx, node, class)
		if err != nil {
			c.recorder.Event(node, corev1.EventTypeWarning, ReasonProvisioningFailed, err.Error())
			return err
		}
		return c.provision(ctx, node, class, machineClass, driver)
	}
	return c.register(ctx, node, class, driver)
}

// recordedMachine is a write of a Node's machine (its providerID) by the
// node controller.
type recordedMachine struct {
	// lifted: the write also lifted the startup taint.
	lifted bool
	at     time.Time
}

// recordedSettle is how long a Node's copy in the cache may not show a
// write of its machine before the controller acts on the copy anyway.
const recordedSettle = 30 * time.Second

// cacheBehind reports whether the cache's copy of node does not show yet
// the machine or registration this controller wrote (and forgets the
// write once it does).
func (c *Controller) cacheBehind(node *corev1.Node) bool {
	w, ok := c.recorded.get(node)
	if !ok {
		return false
	}
	behind := node.Spec.ProviderID == "" || (w.lifted && nodeutil.HasStartupTaint(node))
	if behind && c.opts.Now().Sub(w.at) < recordedSettle {
		return true
	}
	c.recorded.forget(node.Name)
	return false
}

// machineClass is the effective configuration of the Node's machine: the
// class with its NodeSet's permitted overrides, and the class's credentials.
// A NodeSet whose current spec breaks a tenant rule gets no machine from it
// (resolve.ProvisioningSpec), whatever its last Accepted said.
func (c *Controller) machineClass(ctx context.Context, node *corev1.Node, class *nodesetv1alpha1.NodeClass) (drivers.Class, error) {
	spec, err := c.provisioningSpec(class, c.setOf(node))
	if err != nil {
		return drivers.Class{}, err
	}
	return c.withCredentials(ctx, class, spec)
}

// provisioningSpec is resolve.ProvisioningSpec against the catalogue in
// the cache.
func (c *Controller) provisioningSpec(class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet) (nodesetv1alpha1.NodeClassSpec, error) {
	catalogue, err := c.classes.List(labels.Everything())
	if err != nil {
		return nodesetv1alpha1.NodeClassSpec{}, fmt.Errorf("cannot read the NodeClasses whose labels a NodeSet may not set: %w", err)
	}
	return resolve.ProvisioningSpec(catalogue, class, set)
}

// terminationClass is machineClass for taking a machine of set (nil for
// none) away: an edit of the NodeSet that breaks a rule never keeps a
// machine from going, the class's own spec is used then.
func (c *Controller) terminationClass(ctx context.Context, class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet) (drivers.Class, error) {
	spec, err := resolve.EffectiveSpec(class, set)
	if err != nil {
		spec = *class.Spec.DeepCopy()
	}
	return c.withCredentials(ctx, class, spec)
}

// setOf is the NodeSet of the Node in the cache, nil for a lone Node or a
// NodeSet gone.
func (c *Controller) setOf(node *corev1.Node) *nodesetv1alpha1.NodeSet {
	if ns, name, ok := nodeutil.NodeSetOf(node.Labels); ok {
		if set, err := c.sets.NodeSets(ns).Get(name); err == nil {
			return set
		}
	}
	return nil
}

// tellSet records an Event of node on its NodeSet as well, naming the Node
// (a tenant may not read a Node's Events), and reports the NodeSet: nil for
// a lone Node or a NodeSet gone.
func (c *Controller) tellSet(node *corev1.Node, eventType, reason, message string) *nodesetv1alpha1.NodeSet {
	set := c.setOf(node)
	if set != nil {
		c.recorder.Eventf(set, eventType, reason, "Node %s: %s", node.Name, message)
	}
	return set
}

func (c *Controller) withCredentials(ctx context.Context, class *nodesetv1alpha1.NodeClass, spec nodesetv1alpha1.NodeClassSpec) (drivers.Class, error) {
	credentials, err := c.credentials(ctx, class)
	if err != nil {
		return drivers.Class{}, err
	}
	return drivers.Class{Name: class.Name, Spec: spec, Credentials: credentials}, nil
}

// credentialsTTL is how long a credentials Secret read is used: every
// group poll and Node sync needs it, and a rotated Secret is picked up
// within it.
const credentialsTTL = 30 * time.Second

// credentials are the data of the class's credentials Secret, if it has
// one, read at most once per credentialsTTL.
func (c *Controller) credentials(ctx context.Context, class *nodesetv1alpha1.NodeClass) (map[string][]byte, error) {
	ref := class.Spec.CredentialsSecretRef
	if ref == nil {
		return nil, nil
	}
	key := ref.Namespace + "/" + ref.Name
	c.credentialsMu.Lock()
	cached, ok := c.credentialsCache[key]
	c.credentialsMu.Unlock()
	if ok && c.opts.Now().Sub(cached.read) < credentialsTTL {
		return cached.data, nil
	}
	data, err := ReadCredentials(ctx, c.kube, class)
	if err != nil {
		return nil, err
	}
	c.credentialsMu.Lock()
	c.credentialsCache[key] = credentialsRead{data: data, read: c.opts.Now()}
	c.credentialsMu.Unlock()
	return data, nil
}

type credentialsRead struct {
	data map[string][]byte
	read time.Time
}

// ReadCredentials returns the data of the class's credentials Secret, nil
// when it has none. Errors name the Secret, never its contents.
func ReadCredentials(ctx context.Context, kube kubernetes.Interface, class *nodesetv1alpha1.NodeClass) (map[string][]byte, error) {
	ref := class.Spec.CredentialsSecretRef
	if ref == nil {
		return nil, nil
	}
	secret, err := kube.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsForbidden(err) {
		// Not a permission to fix, but the rule: the node controller reads
		// credentials only where its Role lets it (docs/tenancy.md).
		return nil, fmt.Errorf("%w: Secret %s/%s of NodeClass %s cannot be read by the node controller: credentials Secrets must be in the namespace its Role grants (nodeset-system by default)",
			drivers.ErrInvalidConfiguration, ref.Namespace, ref.Name, class.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading credentials Secret %s/%s of NodeClass %s: %w", ref.Namespace, ref.Name, class.Name, err)
	}
	return secret.Data, nil
}

func owner(node *corev1.Node, sets func(namespace, name string) (*nodesetv1alpha1.NodeSet, error), cluster string) drivers.Owner {
	o := drivers.Owner{Cluster: cluster, Namespace: node.Labels[nodesetv1alpha1.LabelNodeSetNamespace], Name: node.Labels[nodesetv1alpha1.LabelNodeSet]}
	if o.Namespace != "" && o.Name != "" {
		if set, err := sets(o.Namespace, o.Name); err == nil {
			o.UID = set.UID
		}
	}
	return o
}

// madeMachine is a machine made for a Node whose providerID is not
// recorded yet.
type madeMachine struct {
	providerID string
	created    time.Time
}

// provision makes the Node's machine (idempotently, keyed by the Node's
// name) and records its providerID, the driver and the creation time. A
// NodeSet's Node waits up to Options.ProviderIDWait for its kubelet, so
// that one write records the machine and lifts the startup taint.
func (c *Controller) provision(ctx context.Context, node *corev1.Node, nodeClass *nodesetv1alpha1.NodeClass, class drivers.Class, driver drivers.MachineDriver) error {
	read := node.DeepCopy()
	held := slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination)
	namespace, name, ofSet := nodeutil.NodeSetOf(node.Labels)
	_, sealed := node.Labels[nodesetv1alpha1.LabelSeal]
	if held && !sealed && !ofSet {
		// Holds nodeset's finalizer but not the seal nodeset gives a lone
		// Node with it: an earlier release's, or one whoever made it
		// (a kubelet's credentials included) made held, which until the
		// class's sealedSince is taken at its word (nodeutil.Stranger).
		// Either way, served only if no kubelet could have made it.
		if guarded, err := c.claimGuarded(ctx, node); !guarded || err != nil {
			return err
		}
	}
	if !held {
		if foreign, err := c.hostedElsewhere(ctx, node, nodeClass, class, driver); foreign || err != nil {
			return err
		}
		if ofSet && node.Labels[nodesetv1alpha1.LabelSeal] == "" && node.Spec.ProviderID == "" {
			// Asks for a machine as a NodeSet's: the nodeset controller
			// makes a set's Nodes itself, held and sealed, before their
			// machines. Whoever made this one (anyone who may create a
			// Node, a kubelet's credentials included) gets no machine on
			// the set's account.
			c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonForeignNode,
				"Not provisioned: it claims NodeSet %s/%s, whose Nodes the nodeset controller makes itself; remove the %s and %s labels to ask for a machine of NodeClass %s",
				namespace, name, nodesetv1alpha1.LabelNodeSetNamespace, nodesetv1alpha1.LabelNodeSet, class.Name)
			return nil
		}
		if !ofSet {
			// A lone Node: made by an admin, unless the policy that keeps
			// kubelets from asking for machines was away.
			if guarded, err := c.claimGuarded(ctx, node); !guarded || err != nil {
				return err
			}
		}
		// A static node made by an admin: hold it until its machine is gone,
		// and keep pods off it until the machine registers, which also
		// times its registration (registrationTimeout), as for a NodeSet's.
		node.Finalizers = append(node.Finalizers, nodesetv1alpha1.FinalizerTermination)
		if !ofSet && !sealed {
			// Sealed for its class alone: its kubelet cannot make it a
			// Node of a NodeSet (or of another class) by its labels.
			node.Labels[nodesetv1alpha1.LabelSeal] = nodeutil.SealOf(node.Labels)
		}
		if node.Spec.ProviderID == "" && !nodeutil.IsReady(node) && !nodeutil.HasStartupTaint(node) {
			node.Spec.Taints = append(node.Spec.Taints, resolve.StartupTaints()...)
			node.Labels = nodeutil.AddStartupLabels(node.Labels)
		}
		if node.Spec.ProviderID == "" {
			// Held before its machine is made: deleted while the driver
			// makes it, the Node waits for the machine to go instead of
			// leaving it with no Node to account for it. The driver is
			// recorded with the hold: it is the one to remove a machine
			// its Create may have left, should the class be gone or made
			// again with another driver by then.
			if node.Annotations == nil {
				node.Annotations = map[string]string{}
			}
			node.Annotations[nodesetv1alpha1.AnnotationDriver] = driver.Name()
			written, err := c.writeNode(ctx, c.kube, read, node)
			if err != nil {
				return err
			}
			node, read = written.DeepCopy(), written.DeepCopy()
		}
	}
	registered := false
	if node.Spec.ProviderID == "" {
		made, ok := c.made.get(node)
		if !ok {
			var err error
			if made, err = c.createMachine(ctx, node, class, driver); err != nil {
				if errors.Is(err, drivers.ErrInvalidConfiguration) {
					c.queue.AddAfter(node.Name, time.Minute)
					return nil
				}
				return err
			}
		}
		ready := nodeutil.IsReady(node)
		// A lone Node's machine, or a provisioning error to clear, is
		// written at once.
		if wait := made.created.Add(c.opts.ProviderIDWait).Sub(c.opts.Now()); held && !ready && wait > 0 && node.Annotations[nodesetv1alpha1.AnnotationProvisioningError] == "" {
			// The kubelet's Ready brings the Node back; else the wait's end.
			c.made.set(node, made)
			c.queue.AddAfter(node.Name, wait)
			return nil
		}
		// Remembered until the providerID is written: a write that
		// conflicts is retried without asking the driver again.
		c.made.set(node, made)
		delete(node.Annotations, nodesetv1alpha1.AnnotationProvisioningError)
		node.Spec.ProviderID = made.providerID
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[nodesetv1alpha1.AnnotationDriver] = driver.Name()
		if node.Annotations[nodesetv1alpha1.AnnotationMachineCreated] == "" {
			node.Annotations[nodesetv1alpha1.AnnotationMachineCreated] = made.created.UTC().Format(time.RFC3339)
		}
		if ready && nodeutil.HasStartupTaint(node) {
			if err := c.liftStartupTaint(ctx, node, class.Name, driver); err != nil {
				return err
			}
			registered = true
		}
	}
	if _, err := c.writeNode(ctx, c.kube, read, node); err != nil {
		return err
	}
	c.recorded.set(node, recordedMachine{lifted: registered, at: c.opts.Now()})
	c.made.forget(node.Name)
	if registered {
		c.registered(node, driver)
	}
	return nil
}

// hostedElsewhere reports whether a Node this controller does not hold
// yet already has a host that is not the driver's machine of its name: a
// kubelet reports on it (Ready or not), or it has a providerID, and the
// driver has no machine of that name and providerID. Such a Node (a
// kubelet's, labelled with the class by hand) gets no machine, which would
// be a second host under its name, and is not held: its pods are not
// driven off by the startup taint, and it is never drained or deleted for
// a machine it does not have. An Event says why. A machine the driver has
// is the Node's own, made before a crash lost the write recording it.
func (c *Controller) hostedElsewhere(ctx context.Context, node *corev1.Node, nodeClass *nodesetv1alpha1.NodeClass, class drivers.Class, driver drivers.MachineDriver) (bool, error) {
	if node.Spec.ProviderID == "" && !nodeutil.KubeletReported(node) {
		return false, nil
	}
	_, sealed := node.Labels[nodesetv1alpha1.LabelSeal]
	if !sealed && nodeutil.KubeletReported(node) && nodeutil.MadeSealed(node, nodeClass) {
		// Since the class's Nodes are sealed, nodeset seals a lone Node
		// before its machine is made: an unsealed Node whose host came
		// first was registered by that host's kubelet, with the labels
		// it chose (a Node deleted by hand, and registered again by its
		// kubelet with the class label, would otherwise have its
		// machine taken for a lone Node's, of no NodeSet).
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonForeignNode,
			"Not provisioned: a kubelet reports on it, and it was registered after NodeClass %s began sealing its Nodes (status.sealedSince); remove the %s label, or delete the Node and create it again without a host",
			class.Name, nodesetv1alpha1.LabelNodeClass)
		return true, nil
	}
	machine, err := driver.Get(ctx, class, node.Name)
	switch {
	case err == nil && (node.Spec.ProviderID == "" || node.Spec.ProviderID == machine.ProviderID):
		return false, nil
	case err != nil && !errors.Is(err, drivers.ErrNotFound):
		return false, err
	}
	host := "its kubelet reports Ready"
	if !nodeutil.IsReady(node) {
		host = "a kubelet reports on it"
	}
	if node.Spec.ProviderID != "" {
		host = fmt.Sprintf("it has providerID %s", node.Spec.ProviderID)
	}
	c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonForeignNode,
		"Not provisioned: %s, and driver %s has no machine of that name (%s) to match; remove the %s label, or delete the Node and create it again without a host",
		host, driver.Name(), node.Name, nodesetv1alpha1.LabelNodeClass)
	return true, nil
}

// writeNode writes, through client, what the sync changed of the Node
// read: a JSON patch of the changed fields, so that the kubelet's writes
// meanwhile (its labels, its status) do not make it conflict as an update
// from the copy read would; the taints and finalizers it replaces must
// still be as read. It returns the Node as written (want when nothing
// changed).
func (c *Controller) writeNode(ctx context.Context, client kubernetes.Interface, read, want *corev1.Node) (*corev1.Node, error) {
	patch, changed := nodeutil.ChangePatch(read, want)
	if !changed {
		return want, nil
	}
	return client.CoreV1().Nodes().Patch(ctx, want.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
}

// createMachine has the driver make the Node's machine. A failure is
// told on the Node (an Event, and the provisioning-error annotation that
// cluster-autoscaler reads).
func (c *Controller) createMachine(ctx context.Context, node *corev1.Node, class drivers.Class, driver drivers.MachineDriver) (madeMachine, error) {
	logger := klog.FromContext(ctx)
	if err := c.mayAct(opCreate); err != nil {
		return madeMachine{}, err
	}
	start := c.opts.Now()
	providerID, err := driver.Create(ctx, drivers.Machine{
		Name:    node.Name,
		NodeUID: node.UID,
		Owner:   owner(node, func(ns, name string) (*nodesetv1alpha1.NodeSet, error) { return c.sets.NodeSets(ns).Get(name) }, c.opts.Cluster),
		Class:   class,
		Labels:  node.Labels,
		Taints:  node.Spec.Taints,
	})
	if err == nil {
		// An answer the Node cannot record is a failure, retried and told:
		// no providerID, or another Node's (two Nodes of one machine:
		// deleting either would take the other's, and cluster-autoscaler
		// tells Nodes apart by it).
		if providerID == "" {
			err = fmt.Errorf("driver %s answered no providerID for machine %s", driver.Name(), node.Name)
		} else if holder := c.providerIDHolder(node, providerID); holder != "" {
			// Not named in the error, which the Node's NodeSet shows its
			// tenant: the other Node may be another tenant's.
			logger.Info("A driver answered the providerID another Node has", "providerID", providerID, "holder", holder)
			err = fmt.Errorf("driver %s answered providerID %s for machine %s, which another Node has already", driver.Name(), providerID, node.Name)
		}
	}
	c.metrics.driverCall(driver.Name(), opCreate, start, err)
	if errors.Is(err, drivers.ErrInProgress) || errors.Is(err, drivers.ErrThrottled) {
		// Retried, and not a failure of the machine: recorded on the Node it
		// would be a failed instance for cluster-autoscaler, which deletes
		// the node and backs its group off.
		logger.V(2).Info("Machine creation goes on; retrying", "reason", c.scrub(err.Error()))
		return madeMachine{}, err
	}
	if err != nil {
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonProvisioningFailed, "Driver %s could not create the machine: %v", driver.Name(), err)
		code := "ProvisioningFailed"
		if errors.Is(err, drivers.ErrOutOfCapacity) {
			code = "OutOfCapacity"
			c.waitForRoom(node, class.Name)
		} else {
			// Refused for another reason: room freed would not help it.
			c.waiting.forget(node.Name)
		}
		if recordErr := c.recordProvisioningError(ctx, node, code+": "+err.Error()); recordErr != nil {
			logger.V(2).Info("Could not record the provisioning error on the Node", "err", c.scrubbedError(recordErr))
		}
		return madeMachine{}, err
	}
	c.waiting.forget(node.Name)
	made := madeMachine{providerID: providerID, created: c.opts.Now()}
	c.metrics.provisioning.WithLabelValues(driver.Name()).Observe(made.created.Sub(node.CreationTimestamp.Time).Seconds())
	c.routine.record(node, ReasonProvisioned, driver.Name(), fmt.Sprintf("Driver %s created machine %s", driver.Name(), providerID))
	logger.V(2).Info("Provisioned machine", "providerID", providerID)
	return made, nil
}

// providerIDHolder is the name of another Node that has providerID in the
// cache, "" when none has.
//
// Only a Node nodeset made or took (sealed, which no kubelet can do) holds
// a providerID: a kubelet may set its own Node's providerID once, to
// anything, and one that took the providerID of another tenant's machine
// would otherwise keep that machine's Node from ever recording it.
func (c *Controller) providerIDHolder(node *corev1.Node, providerID string) string {
	objs, _ := c.nodeIndexer.ByIndex(providerIDIndex, providerID)
	for _, obj := range objs {
		if other, ok := obj.(*corev1.Node); ok && other.Name != node.Name {
			if _, sealed := other.Labels[nodesetv1alpha1.LabelSeal]; sealed {
				return other.Name
			}
		}
	}
	return ""
}

// recordProvisioningError sets the Node's provisioning-error annotation
// (with a patch, so the finalizer the caller added in memory is not written
// half-way).
func (c *Controller) recordProvisioningError(ctx context.Context, node *corev1.Node, message string) error {
	message = redact.Cut(c.scrub(message), nodeutil.ProvisioningErrorLimit)
	if node.Annotations[nodesetv1alpha1.AnnotationProvisioningError] == message {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		nodesetv1alpha1.AnnotationProvisioningError: message}}})
	if err != nil {
		return err
	}
	_, err = c.kube.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}

// register lifts the startup taint once the kubelet reports Ready, and
// replaces a machine that did not register in time.
func (c *Controller) register(ctx context.Context, node *corev1.Node, class *nodesetv1alpha1.NodeClass, driver drivers.Driver) error {
	if nodeutil.IsReady(node) {
		if !nodeutil.HasStartupTaint(node) {
			if want, ok := sealed(node, class); ok {
				// Made before the seal existed: sealed as labelled now.
				return c.patchLabels(ctx, node, want, "sealing")
			}
			return nil
		}
		read := node.DeepCopy()
		if err := c.liftStartupTaint(ctx, node, class.Name, driver); err != nil {
			return err
		}
		if _, err := c.writeNode(ctx, c.kube, read, node); err != nil {
			return err
		}
		c.recorded.set(node, recordedMachine{lifted: true, at: c.opts.Now()})
		c.registered(node, driver)
		return nil
	}
	if !nodeutil.HasStartupTaint(node) {
		// Registered once, NotReady now.
		return c.replaceUnhealthy(ctx, node, class)
	}
	timeout := registrationTimeout(class)
	if overdue, _ := c.unhealthyFor(node, class); overdue < 0 {
		c.queue.AddAfter(node.Name, -overdue)
		return nil
	}
	msg := fmt.Sprintf("The machine did not register within %s; replacing it", timeout)
	if _, _, ok := nodeutil.NodeSetOf(node.Labels); ok {
		// The NodeSetController makes the replacement; the deletion path
		// deprovisions this machine.
		return c.remediate(ctx, node, class, ReasonRegistrationTimeout, msg)
	}
	machines, ok := driver.(drivers.MachineDriver)
	if ok {
		// A replica that is not sure it leads neither tells nor deletes.
		if err := c.mayAct(opDelete); err != nil {
			return err
		}
	}
	c.recorder.Event(node, corev1.EventTypeWarning, ReasonRegistrationTimeout, msg)
	if !ok {
		return nil // a group's machine: only its NodeSet replaces it
	}
	klog.FromContext(ctx).Info("Registration timed out; replacing the machine", "timeout", timeout)
	// A static node stays: remove its machine and make a new one under the
	// same name, with the class's credentials (which the driver scrubs from
	// its errors). The Node keeps its providerID, which the API server
	// never lets change: a driver keyed by name gives the new machine the
	// same one. A crash in between finds the Node overdue again (once the
	// restarted controller has given it the whole timeout, unhealthyFor),
	// and Delete and Create are idempotent.
	machineClass, err := c.terminationClass(ctx, class, c.setOf(node))
	if err != nil {
		return err
	}
	start := c.opts.Now()
	err = machines.Delete(ctx, machineClass, node.Name)
	c.metrics.driverCall(driver.Name(), opDelete, start, err)
	if err != nil {
		if errors.Is(err, drivers.ErrInProgress) {
			c.queue.AddAfter(node.Name, c.opts.DrainRecheck)
			return nil
		}
		return err
	}
	provisioning, err := c.machineClass(ctx, node, class)
	if err != nil {
		return err
	}
	made, err := c.createMachine(ctx, node, provisioning, machines)
	if err != nil {
		return err
	}
	if made.providerID != node.Spec.ProviderID {
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonRegistrationTimeout,
			"Driver %s made the new machine as %s, which the Node, recorded as %s, cannot take (a providerID never changes): delete the Node and create it again",
			driver.Name(), made.providerID, node.Spec.ProviderID)
	}
	// The new machine's registration is timed from now.
	read := node.DeepCopy()
	node.Annotations[nodesetv1alpha1.AnnotationMachineCreated] = made.created.UTC().Format(time.RFC3339)
	_, err = c.writeNode(ctx, c.kube, read, node)
	return err
}

// liftStartupTaint tells the driver the machine registered, then removes
// the startup taints from node, with the condition taints its Ready rules
// out (nodeutil.RegisteredTaints), and the startup labels
// (nodeutil.StartupLabels); in memory, the caller writes it.
func (c *Controller) liftStartupTaint(ctx context.Context, node *corev1.Node, className string, driver drivers.Driver) error {
	if observer, ok := driver.(drivers.RegistrationObserver); ok {
		if err := c.mayAct(opRegistered); err != nil {
			return err
		}
		if err := observer.Registered(ctx, drivers.Class{Name: className}, node.Name); err != nil {
			return fmt.Errorf("driver %s: after registration of %s: %w", driver.Name(), node.Name, err)
		}
	}
	node.Spec.Taints = nodeutil.RegisteredTaints(node)
	nodeutil.RemoveStartupLabels(node.Labels)
	return nil
}

// registered records a registration that was written.
func (c *Controller) registered(node *corev1.Node, driver drivers.Driver) {
	if created, ok := machineCreated(node); ok {
		c.metrics.registration.WithLabelValues(driver.Name()).Observe(c.opts.Now().Sub(created).Seconds())
	}
	c.routine.record(node, ReasonRegistered, driver.Name(), "The kubelet reports Ready; startup taint removed")
}

func machineCreated(node *corev1.Node) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, node.Annotations[nodesetv1alpha1.AnnotationMachineCreated])
	return t, err == nil
}

func labelsFor(key, value string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{key: value})
}

// panicked is the error of what, which panicked with r (a driver's bug):
// scrubbed, and logged with the panic's stack, so that the sync or round
// that recovered it fails alone and the process goes on.
func (c *Controller) panicked(ctx context.Context, r any, what string, keysAndValues ...any) error {
	err := c.scrubbedError(fmt.Errorf("%s panicked: %v", what, r))
	klog.FromContext(ctx).Error(err, "Recovered from a panic", append(keysAndValues, "stack", c.scrub(string(debug.Stack())))...)
	return err
}

// errorTextLimit bounds the text of an error a sync returns, which the
// worker logs at each retry: a driver's error may carry a cloud's whole
// answer (an HTML error page) or a plugin's output.
const errorTextLimit = 4096

// scrubbedError is err with the credentials this controller has read
// removed from its text, cut to errorTextLimit bytes; it still unwraps to
// err, so its kind is kept.
func (c *Controller) scrubbedError(err error) error {
	if err == nil {
		return nil
	}
	text := redact.Cut(c.scrub(err.Error()), errorTextLimit)
	if text == err.Error() {
		return err
	}
	return &redactedError{text: text, err: err}
}

type redactedError struct {
	text string
	err  error
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// waitingForRoom is a Node whose machine its class's cloud had no room for,
// since its first refused create.
type waitingForRoom struct {
	class string
	since time.Time
}

// waitForRoom remembers node as waiting for room in class's cloud.
func (c *Controller) waitForRoom(node *corev1.Node, class string) {
	if w, ok := c.waiting.get(node); ok && w.class == class {
		return
	}
	c.waiting.set(node, waitingForRoom{class: class, since: c.opts.Now()})
}

// retryWaiting tries again at once the create of the Node of class that
// has waited longest for room, as a machine of the class is gone: its
// retry would otherwise wait out its backoff (up to minutes) while the room
// stands empty. One Node a machine: every waiting Node at once would ask the
// cloud for many machines for one freed.
func (c *Controller) retryWaiting(class string) {
	if class == "" {
		return
	}
	name := c.waiting.oldest(func(w waitingForRoom) bool { return w.class == class },
		func(a, b waitingForRoom) bool { return a.since.Before(b.since) })
	if name != "" {
		c.queue.Add(name)
	}
}
