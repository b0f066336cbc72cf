// Package nodecontrollerapp is the node-controller program: flags, clients,
// leader election, the drivers (the built-in simulated, docker-machine,
// eks-asg and eks-managed, and any an out-of-tree binary adds, machine or
// group drivers alike, all made by one kind of factory) and the
// NodeController, NodeClassController and orphan collection on top of them.
// An out-of-tree driver is a binary that calls Main with its own Driver (see
// docs/drivers/out-of-tree.md).
package nodecontrollerapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/drivers/dockermachine"
	"nodeset.dev/nodeset/drivers/eksasg"
	"nodeset.dev/nodeset/drivers/eksmanaged"
	"nodeset.dev/nodeset/drivers/simulated"
	"nodeset.dev/nodeset/pkg/component"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/pkg/controller/nodeclass"
	"nodeset.dev/nodeset/pkg/generated/informers/externalversions"
	nodesetlisters "nodeset.dev/nodeset/pkg/generated/listers/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/kubeletsim"
	"nodeset.dev/nodeset/pkg/kubestore"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// Driver is a driver a node controller can serve: one of the built-in ones,
// or one an out-of-tree binary adds.
type Driver struct {
	// Name is the NodeClass spec.driver value it serves.
	Name string
	// New makes the driver once the API clients exist, when the driver is
	// served (--drivers). It returns a drivers.MachineDriver or a
	// drivers.GroupDriver; the node controller publishes which in the
	// status.driverKind of the driver's NodeClasses.
	New func(ctx context.Context, env Env) (drivers.Driver, error)
}

// Env is what a driver may need when it is made.
type Env struct {
	// Clients are the process's API clients.
	Clients component.Clients
	// Cluster is --cluster-name, for the owner tags of machines.
	Cluster string
	// NodeClasses lists the NodeClasses, once the caches have synced.
	NodeClasses nodesetlisters.NodeClassLister
	// CloudCalls returns the observer of a driver's cloud API calls for
	// the nodeset_cloud_api_* metrics.
	CloudCalls func(driver string) func(operation, outcome string, attempts int)
}

// interruptionOptions tune the reading of interruption queues.
type interruptionOptions struct {
	receiveWait, visibilityTimeout time.Duration
}

// builtins are the drivers every node controller can serve, made from the
// flags they read.
func builtins(dm *dockerMachineOptions, aws *awscloud.SDKConfig, groupPoll *time.Duration, notices *interruptionOptions) []Driver {
	return []Driver{
		{Name: nodesetv1alpha1.DriverSimulated, New: func(context.Context, Env) (drivers.Driver, error) {
			return simulated.New(nil), nil
		}},
		{Name: nodesetv1alpha1.DriverDockerMachine, New: func(_ context.Context, env Env) (drivers.Driver, error) {
			return dm.driver(env.Clients)
		}},
		{Name: nodesetv1alpha1.DriverEKSASG, New: func(_ context.Context, env Env) (drivers.Driver, error) {
			config := *aws
			config.Observe = env.CloudCalls(nodesetv1alpha1.DriverEKSASG)
			config.Fence, config.AppID = env.Clients.MayAct, env.Clients.Identity
			configs := awscloud.NewAWSConfigs(config)
			return eksasg.New(eksasg.Options{
				Cluster:      env.Cluster,
				Clients:      awscloud.ClientsFrom(configs),
				Clusters:     eksasg.NewClusterLookup(configs),
				Scopes:       awsScopes(env.Clients.Kube, env.NodeClasses),
				PollInterval: min(15*time.Second, *groupPoll/2),
				Queues:       eksasg.SQSFrom(configs),
				ReceiveWait:  notices.receiveWait, VisibilityTimeout: notices.visibilityTimeout,
			}), nil
		}},
		{Name: nodesetv1alpha1.DriverEKSManaged, New: func(_ context.Context, env Env) (drivers.Driver, error) {
			config := *aws
			config.Observe = env.CloudCalls(nodesetv1alpha1.DriverEKSManaged)
			config.Fence, config.AppID = env.Clients.MayAct, env.Clients.Identity
			return eksmanaged.New(eksmanaged.Options{
				Cluster: env.Cluster,
				Clients: eksmanaged.SDKClients(config),
				Scopes:  eksManagedScopes(env.Clients.Kube, env.NodeClasses),
			}), nil
		}},
	}
}

// Main runs a node controller named name (its user agent, event source and
// leader-election Lease) with the built-in drivers and extra, and returns
// the process's exit code. --drivers chooses which are served; it defaults
// to extra's names, or simulated when there are none.
func Main(name string, extra ...Driver) int {
	var (
		opts         component.Options
		driverNames  []string
		cluster      string
		resync       time.Duration
		kubelets     kubeletsim.Options
		kubeletQPS   float32
		kubeletBurst int
		kubeletsAuth string
		dm           dockerMachineOptions
		orphanEvery  time.Duration
		orphanAge    time.Duration
		remediation  nodecontroller.RemediationOptions
		groupPoll    time.Duration
		awsConfig    awscloud.SDKConfig
		idWait       time.Duration
		eventPeriod  time.Duration
		claimsPolicy bool
	)
	fs := pflag.NewFlagSet(name, pflag.ExitOnError)
	opts.AddFlags(fs, nodecontroller.DefaultWorkers)
	fs.StringSliceVar(&driverNames, "drivers", nil, "Drivers to serve, comma-separated.")
	fs.StringVar(&cluster, "cluster-name", "nodeset", "Cluster name drivers put in the owner tags of machines.")
	fs.DurationVar(&resync, "resync-period", 10*time.Minute, "How often every Node is reconciled even without changes.")
	fs.DurationVar(&kubelets.RenewInterval, "simulated-lease-renew-interval", 10*time.Second, "How often simulated kubelets renew their node Lease.")
	fs.DurationVar(&kubelets.LeaseDuration, "simulated-lease-duration", 40*time.Second, "The node Lease duration simulated kubelets declare.")
	fs.Float32Var(&kubeletQPS, "simulated-kube-api-qps", 200, "Queries per second of all simulated kubelets together (they have their own client, as real kubelets do).")
	fs.IntVar(&kubeletBurst, "simulated-kube-api-burst", 400, "Burst of queries of all simulated kubelets together.")
	fs.DurationVar(&kubelets.StatusInterval, "simulated-status-interval", 5*time.Minute, "How often simulated kubelets re-post an unchanged Ready status (the kubelet's nodeStatusReportFrequency; their Lease renewals are the heartbeat).")
	fs.StringVar(&kubeletsAuth, "simulated-kubelet-kubeconfig", "", "Kubeconfig of the simulated kubelets' own identity; the controller's when empty. A user in the system:nodes group has its Node and Lease writes put in the API server's node-high priority level, as real kubelets' are.")
	fs.IntVar(&kubelets.Workers, "simulated-kubelet-workers", 8, "Simulated kubelets' requests in flight at once, all together (real kubelets each have their own).")
	fs.DurationVar(&remediation.UnhealthyTimeout, "unhealthy-timeout", 5*time.Minute, "How long a registered Node of a NodeSet may be NotReady before it is replaced. 0 never replaces registered Nodes.")
	fs.IntVar(&remediation.MaxUnhealthyPercent, "max-unhealthy-percent", 20, "Unhealthy and unregistered Nodes of a NodeSet are replaced only while they are at most this percentage of its replicas (rounded up, at least 1).")
	fs.IntVar(&remediation.MaxUnhealthy, "max-unhealthy", 10, "And at most this many.")
	fs.DurationVar(&orphanEvery, "orphan-collection-interval", 5*time.Minute, "How often machines that no Node accounts for are looked for. 0 disables orphan collection.")
	fs.DurationVar(&orphanAge, "orphan-min-age", 10*time.Minute, "How old a machine without a Node must be before it is deleted as an orphan.")
	fs.StringVar(&dm.namespace, "docker-machine-namespace", "nodeset-system", "Namespace of the Secrets holding docker-machine machine records (the plugins' saved configurations).")
	fs.StringVar(&dm.storePath, "docker-machine-store-path", "/var/lib/nodeset/docker-machine", "Directory docker-machine plugins keep their files in (SSH keys); keep it on a persistent volume.")
	fs.StringVar(&dm.apiServerURL, "docker-machine-api-server-url", "", "API server address new docker-machine machines join; the node controller's own by default.")
	fs.DurationVar(&dm.tokenTTL, "bootstrap-token-ttl", time.Hour, "How long the bootstrap token made for each new machine is valid.")
	fs.DurationVar(&idWait, "provider-id-wait", 10*time.Second, "How long after making a NodeSet's machine its providerID waits for the kubelet to report Ready, so that recording it and lifting the startup taint are one write of the Node; a slower machine gets its providerID on its own. 0 records it at once.")
	fs.BoolVar(&claimsPolicy, "require-node-claims-policy", true, "Give a lone Node (of a class, of no NodeSet) a machine only if it was made after the ValidatingAdmissionPolicy "+nodecontroller.NodeClaimsPolicy+" and its binding (deploy/admission) were installed: without them any kubelet's credentials could ask for machines. false gives every lone Node a machine.")
	fs.DurationVar(&eventPeriod, "routine-event-period", 5*time.Second, "How often the routine steps of a NodeSet's Nodes (Provisioned, Registered, Deprovisioned, NodeCreated) are told as one Event per step on the NodeSet, naming the Nodes.")
	fs.DurationVar(&groupPoll, "group-poll-interval", 30*time.Second, "How often the cloud group of each NodeSet of a group driver (eks-asg) is looked at when nothing changes; all the groups of a region are looked at in one batch.")
	fs.StringVar(&awsConfig.Endpoint, "aws-endpoint-url", "", "Send every AWS API call here instead of AWS (an emulator, a VPC endpoint proxy).")
	fs.Float64Var(&awsConfig.QPS, "aws-api-qps", 10, "AWS API calls per second of the eks-asg driver, client-side, all regions together.")
	fs.IntVar(&awsConfig.Burst, "aws-api-burst", 20, "Burst of AWS API calls of the eks-asg driver.")
	fs.IntVar(&awsConfig.MaxAttempts, "aws-max-attempts", 5, "Attempts of an AWS API call that was throttled or failed on the server side; retries back off exponentially with jitter.")
	var notices interruptionOptions
	fs.DurationVar(&notices.receiveWait, "interruption-receive-wait", 20*time.Second, "How long one receive from an interruption queue waits for messages (SQS long polling, whole seconds, at most 20s).")
	fs.DurationVar(&notices.visibilityTimeout, "interruption-visibility-timeout", 30*time.Second, "How long a received interruption message stays hidden; one that was not acted on (a crash, a failed write) comes again after it.")
	known := append(builtins(&dm, &awsConfig, &groupPoll, &notices), extra...)
	defaultDrivers := []string{nodesetv1alpha1.DriverSimulated}
	if len(extra) > 0 {
		defaultDrivers = nil
		for _, d := range extra {
			defaultDrivers = append(defaultDrivers, d.Name)
		}
	}
	var knownNames []string
	for _, d := range known {
		knownNames = append(knownNames, d.Name)
	}
	fs.Lookup("drivers").Usage = "Drivers to serve, comma-separated. Known: " + strings.Join(knownNames, ", ") + "."
	fs.Lookup("drivers").DefValue = strings.Join(defaultDrivers, ",")
	_ = fs.Parse(os.Args[1:])
	if !fs.Changed("drivers") {
		driverNames = defaultDrivers
	}

	served, err := chooseDrivers(driverNames, known)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	// Made at leader start, once the clients exist; published whole, so
	// /debug/machines never reads a registry being filled.
	var registryOnce atomic.Pointer[drivers.Registry]
	var nodeLister atomic.Pointer[corelisters.NodeLister]
	var controller atomic.Pointer[nodecontroller.Controller]
	metricsRegistry := prometheus.NewRegistry()
	metrics := nodecontroller.NewMetrics(metricsRegistry, func() corelisters.NodeLister {
		if l := nodeLister.Load(); l != nil {
			return *l
		}
		return nil
	})
	metrics.Initialize(driverNames)

	err = component.Run(opts, component.Process{
		Name:     name,
		Registry: metricsRegistry,
		Ready: func() bool {
			c := controller.Load()
			return c != nil && c.HasSynced()
		},
		DebugHandlers: map[string]http.Handler{"/debug/machines": machinesHandler(registryOnce.Load)},
		Start: func(ctx context.Context, clients component.Clients) error {
			claims := newDriverClaims(clients.Kube, opts.LeaderElectionNamespace, name, time.Now)
			servedNames := make([]string, 0, len(served))
			for _, d := range served {
				servedNames = append(servedNames, d.Name)
			}
			if err := claims.claimAll(ctx, servedNames); err != nil {
				return err
			}
			ctx, lost := context.WithCancelCause(ctx)
			defer lost(nil)
			go func() {
				if err := claims.renew(ctx, servedNames); err != nil {
					lost(err)
				}
			}()
			kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(clients.Watch.Kube, resync, kubeinformers.WithTransform(component.StripNodeStatusButVolumes))
			nodesetFactory := externalversions.NewSharedInformerFactoryWithOptions(clients.Watch.Nodeset, resync, externalversions.WithTransform(component.StripManagedFields))
			nodes := kubeFactory.Core().V1().Nodes()
			classes := nodesetFactory.Nodeset().V1alpha1().NodeClasses()
			registry, err := makeDrivers(ctx, served, Env{Clients: clients, Cluster: cluster, NodeClasses: classes.Lister(), CloudCalls: metrics.CloudCalls})
			if err != nil {
				return err
			}
			registryOnce.Store(&registry)
			sim, _ := registry[nodesetv1alpha1.DriverSimulated].(*simulated.Driver)
			drainKube, err := clients.NewKube()
			if err != nil {
				return err
			}
			c, err := nodecontroller.NewController(clients.Kube, clients.Recorder, nodes, classes,
				nodesetFactory.Nodeset().V1alpha1().NodeSets(), registry, metrics, nodecontroller.Options{
					Cluster: cluster, NodeSets: clients.Nodeset, Remediation: remediation, GroupPollInterval: groupPoll,
					ProviderIDWait: idWait, EventPeriod: eventPeriod, RequireNodeClaimsPolicy: claimsPolicy, MayAct: clients.MayAct, Drain: drainKube,
				})
			if err != nil {
				return err
			}
			classController, err := nodeclass.NewController(clients.Nodeset, classes, nodesetFactory.Nodeset().V1alpha1().NodeSets(), registry,
				func(ctx context.Context, class *nodesetv1alpha1.NodeClass) (map[string][]byte, error) {
					return nodecontroller.ReadCredentials(ctx, clients.Kube, class)
				})
			if err != nil {
				return err
			}
			secrets, err := watchCredentialsSecrets(ctx, clients.Config, resync, classController)
			if err != nil {
				return err
			}
			lister := nodes.Lister()
			nodeLister.Store(&lister)
			var fleet *kubeletsim.Fleet
			if sim != nil {
				kubeletConfig := rest.CopyConfig(clients.Config)
				if kubeletsAuth != "" {
					if kubeletConfig, err = clientcmd.BuildConfigFromFlags("", kubeletsAuth); err != nil {
						return fmt.Errorf("loading --simulated-kubelet-kubeconfig: %w", err)
					}
					kubeletConfig.DisableCompression = clients.Config.DisableCompression
				}
				kubeletConfig.QPS, kubeletConfig.Burst = kubeletQPS, kubeletBurst
				// Its own field manager ("nodeset-simulated-kubelet"); the
				// replica, as for every request of the process.
				kubeletConfig.UserAgent = "nodeset-simulated-kubelet/v1alpha1 replica/" + clients.Identity
				kubeletClient, err := component.NewKube(kubeletConfig)
				if err != nil {
					return err
				}
				fleet = kubeletsim.New(kubeletClient, lister, sim, kubelets)
				if err := fleet.FinishPods(kubeFactory.Core().V1().Pods()); err != nil {
					return err
				}
			}
			kubeFactory.Start(ctx.Done())
			nodesetFactory.Start(ctx.Done())
			secrets.Start(ctx.Done())
			defer secrets.Shutdown()
			defer kubeFactory.Shutdown()
			defer nodesetFactory.Shutdown()
			if !c.WaitForCacheSync(ctx) {
				return ctx.Err()
			}
			if sim != nil {
				adoptSimulatedMachines(ctx, sim, lister, classes.Lister().Get, cluster)
				go fleet.Run(ctx)
			}
			go func() {
				if err := classController.Run(ctx, 2); err != nil {
					klog.FromContext(ctx).Error(err, "NodeClassController stopped")
				}
			}()
			if orphanEvery > 0 {
				go c.RunOrphanCollection(ctx, orphanEvery, orphanAge)
			}
			controller.Store(c)
			err = c.Run(ctx, opts.Workers)
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return cause
			}
			return err
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// chooseDrivers are the known drivers named in --drivers.
func chooseDrivers(names []string, known []Driver) ([]Driver, error) {
	var knownNames []string
	for _, d := range known {
		knownNames = append(knownNames, d.Name)
	}
	var out []Driver
	for _, name := range names {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(known, func(d Driver) bool { return d.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown driver %q in --drivers; known drivers: %s", name, strings.Join(knownNames, ", "))
		}
		if !slices.ContainsFunc(out, func(d Driver) bool { return d.Name == name }) {
			out = append(out, known[i])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--drivers is empty; known drivers: %s", strings.Join(knownNames, ", "))
	}
	return out, nil
}

// makeDrivers makes the served drivers, each through its factory, and
// checks each is a machine or a group driver serving the name it is
// registered under.
func makeDrivers(ctx context.Context, served []Driver, env Env) (drivers.Registry, error) {
	registry := drivers.Registry{}
	for _, d := range served {
		driver, err := d.New(ctx, env)
		if err != nil {
			return nil, fmt.Errorf("driver %s: %w", d.Name, err)
		}
		_, machine := driver.(drivers.MachineDriver)
		_, group := driver.(drivers.GroupDriver)
		switch {
		case driver == nil || (!machine && !group):
			return nil, fmt.Errorf("driver %s is neither a drivers.MachineDriver nor a drivers.GroupDriver", d.Name)
		case machine && group:
			return nil, fmt.Errorf("driver %s is both a drivers.MachineDriver and a drivers.GroupDriver; it must be one", d.Name)
		case driver.Name() != d.Name:
			return nil, fmt.Errorf("driver %s calls itself %q (Name)", d.Name, driver.Name())
		}
		registry[d.Name] = driver
	}
	return registry, nil
}

// awsScopes are the regions of the eks-asg classes, each with the
// credentials of one class there, for orphan collection.
func awsScopes(kube kubernetes.Interface, classes nodesetlisters.NodeClassLister) func() []eksasg.Scope {
	return func() []eksasg.Scope {
		var out []eksasg.Scope
		for _, c := range classScopes(kube, classes, nodesetv1alpha1.DriverEKSASG) {
			out = append(out, eksasg.Scope{Region: c.region, Credentials: c.credentials, Classes: c.classes})
		}
		return out
	}
}

// eksManagedScopes are the clusters of the eks-managed classes, for orphan
// collection.
func eksManagedScopes(kube kubernetes.Interface, classes nodesetlisters.NodeClassLister) func() []eksmanaged.Scope {
	return func() []eksmanaged.Scope {
		var out []eksmanaged.Scope
		for _, c := range classScopes(kube, classes, nodesetv1alpha1.DriverEKSManaged) {
			out = append(out, eksmanaged.Scope{Region: c.region, Cluster: c.cluster, Credentials: c.credentials, Classes: c.classes})
		}
		return out
	}
}

type classScope struct {
	region, cluster string
	credentials     map[string][]byte
	classes         []string
}

// classScopes are the distinct regions and clusters of the classes of an
// AWS driver, each with the credentials of one class there and the names
// of the classes that share them. A class whose Secret cannot be read, or
// lacks a key, is left out (never searched with the node controller's own
// identity): its scope is then not searched, which only delays orphan
// collection.
func classScopes(kube kubernetes.Interface, classes nodesetlisters.NodeClassLister, driver string) []classScope {
	all, err := classes.List(labels.Everything())
	if err != nil {
		return nil
	}
	// In name order: a scope is named by its classes, and the name must be
	// the same from one look to the next (the lister's order is not).
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	seen := map[string]int{}
	var out []classScope
	for _, class := range all {
		if class.Spec.Driver != driver {
			continue
		}
		var scope classScope
		switch s := class.Spec; {
		case s.EKSAutoscalingGroup != nil:
			scope.region = s.EKSAutoscalingGroup.Region
		case s.EKSManagedNodeGroup != nil:
			scope.region, scope.cluster = s.EKSManagedNodeGroup.Region, s.EKSManagedNodeGroup.ClusterName
		}
		if scope.region == "" {
			continue
		}
		if ref := class.Spec.CredentialsSecretRef; ref != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			secret, err := kube.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			cancel()
			if err != nil || awscloud.CheckCredentials(drivers.Class{Spec: class.Spec, Credentials: secret.Data}) != nil {
				continue
			}
			scope.credentials = secret.Data
		}
		key := scope.region + "/" + scope.cluster + "/" + string(scope.credentials[awscloud.CredentialAccessKeyID])
		if i, ok := seen[key]; ok {
			out[i].classes = append(out[i].classes, class.Name)
			continue
		}
		seen[key] = len(out)
		scope.classes = []string{class.Name}
		out = append(out, scope)
	}
	return out
}

type dockerMachineOptions struct {
	namespace, storePath, apiServerURL string
	tokenTTL                           time.Duration
}

// driver makes the docker-machine driver, with its records in Secrets and a
// bootstrap token per machine.
func (o dockerMachineOptions) driver(clients component.Clients) (*dockermachine.Driver, error) {
	if err := os.MkdirAll(o.storePath, 0o700); err != nil {
		return nil, fmt.Errorf("--docker-machine-store-path: %w", err)
	}
	tokens, err := kubestore.NewBootstrapTokens(clients.Kube, clients.Config, o.apiServerURL, o.tokenTTL)
	if err != nil {
		return nil, err
	}
	return dockermachine.New(dockermachine.Options{
		Store:     kubestore.MachineRecords{Client: clients.Kube, Namespace: o.namespace},
		Joiner:    tokens,
		StorePath: o.storePath,
		Fence:     clients.MayAct,
	}), nil
}

// adoptSimulatedMachines rebuilds the simulated machines of a restarted node
// controller from the Nodes that carry a simulated providerID.
func adoptSimulatedMachines(ctx context.Context, sim *simulated.Driver, nodes corelisters.NodeLister, class func(string) (*nodesetv1alpha1.NodeClass, error), cluster string) {
	all, err := nodes.List(labels.Everything())
	if err != nil {
		return
	}
	adopted := 0
	for _, n := range all {
		name, err := simulated.NameFromProviderID(n.Spec.ProviderID)
		if err != nil || name != n.Name {
			continue
		}
		machineClass := drivers.Class{Name: n.Labels[nodesetv1alpha1.LabelNodeClass]}
		if c, err := class(machineClass.Name); err == nil {
			machineClass.Spec = c.Spec
		}
		created := n.CreationTimestamp.Time
		if t, err := time.Parse(time.RFC3339, n.Annotations[nodesetv1alpha1.AnnotationMachineCreated]); err == nil {
			created = t
		}
		// The owner as the Node's labels say (without the UID, which only
		// the machine knew); the cluster is this controller's.
		sim.Adopt(name, created, machineClass, drivers.Owner{Cluster: cluster,
			Namespace: n.Labels[nodesetv1alpha1.LabelNodeSetNamespace], Name: n.Labels[nodesetv1alpha1.LabelNodeSet]})
		adopted++
	}
	klog.FromContext(ctx).Info("Adopted simulated machines from their Nodes", "count", adopted)
}

// machineEntry is one line of /debug/machines.
type machineEntry struct {
	Driver     string `json:"driver"`
	Name       string `json:"name"`
	ProviderID string `json:"providerID"`
	State      string `json:"state"`
	// Namespace and NodeSet of the machine's owner; empty for a lone Node's.
	Namespace string `json:"namespace,omitempty"`
	NodeSet   string `json:"nodeSet,omitempty"`
}

// machinesHandler lists every machine of the served machine drivers, for
// operators and tests; 503 until the leader has made its drivers.
func machinesHandler(registry func() *drivers.Registry) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		current := registry()
		if current == nil {
			http.Error(w, "the drivers are made when this replica leads", http.StatusServiceUnavailable)
			return
		}
		out := []machineEntry{}
		for name := range *current {
			driver, ok := current.Machine(name)
			if !ok {
				continue
			}
			machines, err := driver.List(r.Context())
			if err != nil {
				// Not the driver's text: it may quote a credential, and the
				// node controller, which scrubs what it logs, has its own
				// look at List in orphan collection.
				http.Error(w, fmt.Sprintf("listing the machines of driver %s failed", name), http.StatusServiceUnavailable)
				return
			}
			for _, m := range machines {
				out = append(out, machineEntry{Driver: name, Name: m.Name, ProviderID: m.ProviderID, State: string(m.State),
					Namespace: m.Owner.Namespace, NodeSet: m.Owner.Name})
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

// credentialsNamespace is where the classes' credentials Secrets are read
// (the only namespace deploy/rbac lets the node controller read Secrets in).
const credentialsNamespace = "nodeset-system"

// watchCredentialsSecrets watches the metadata of the Secrets in
// credentialsNamespace (never their data) and has the classes naming one
// validated again when it is created, changed or deleted.
func watchCredentialsSecrets(ctx context.Context, config *rest.Config, resync time.Duration, classes *nodeclass.Controller) (metadatainformer.SharedInformerFactory, error) {
	client, err := metadata.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	factory := metadatainformer.NewFilteredSharedInformerFactory(client, resync, credentialsNamespace, nil)
	informer := factory.ForResource(corev1.SchemeGroupVersion.WithResource("secrets")).Informer()
	enqueue := func(obj any) {
		if m, ok := nodeutil.EventObject[*metav1.PartialObjectMetadata](obj); ok {
			if enqueued := classes.EnqueueClassesOfSecret(m.Namespace, m.Name); len(enqueued) > 0 {
				klog.FromContext(ctx).V(2).Info("Credentials Secret changed; validating its NodeClasses again",
					"secret", m.Namespace+"/"+m.Name, "nodeclasses", enqueued)
			}
		}
	}
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(old, obj any) {
			// A resync delivers the Secret unchanged: nothing to see.
			if o, ok := old.(*metav1.PartialObjectMetadata); ok {
				if n, ok := obj.(*metav1.PartialObjectMetadata); ok && o.ResourceVersion == n.ResourceVersion {
					return
				}
			}
			enqueue(obj)
		},
		DeleteFunc: enqueue,
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Watching credentials Secrets")
	}
	return factory, err
}
