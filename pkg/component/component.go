// Package component is the process wiring shared by the nodeset binaries:
// Kubernetes-style flags, clients, leader election on a Lease, Prometheus
// metrics, /healthz and /readyz, events and graceful shutdown.
package component

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	nodesetscheme "nodeset.dev/nodeset/pkg/generated/clientset/versioned/scheme"
)

// Options are the flags every nodeset controller binary has.
type Options struct {
	Kubeconfig              string
	LeaderElect             bool
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration
	LeaderElectionNamespace string
	MetricsBindAddress      string
	HealthProbeBindAddress  string
	KubeAPIQPS              float32
	KubeAPIBurst            int
	KubeAPICompression      bool
	Workers                 int
	EnablePprof             bool
}

// AddFlags registers the options, and klog's flags, on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet, defaultWorkers int) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Empty means in-cluster configuration.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "Elect a leader on a Lease so that only one replica acts.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a standby waits before taking over an unrenewed lease.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader tries to renew before it gives up leading.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "How long to wait between tries to acquire or renew the lease.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "nodeset-system", "Namespace of the leader-election Lease.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080", "Address of the Prometheus /metrics endpoint; 0 turns it off.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints; 0 turns them off.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", 200, "Queries per second to the API server, per client (the API server's priority and fairness protects it; this only keeps a runaway controller in check). Events, and the node-controller's drains, have a client and budget of their own. A negative value turns client-side rate limiting off.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", 400, "Burst of queries to the API server.")
	fs.BoolVar(&o.KubeAPICompression, "kube-api-compression", false, "Ask the API server for gzip-compressed responses (watch streams included). Off by default, as for kube-scheduler and kube-controller-manager: on a cluster's network compression costs the API server more CPU than it saves.")
	fs.IntVar(&o.Workers, "workers", defaultWorkers, "Concurrent reconciles.")
	fs.BoolVar(&o.EnablePprof, "pprof", false, "Serve /debug/pprof/ on the metrics address.")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
}

// Clients are what a controller needs to talk to the API server.
type Clients struct {
	Config  *rest.Config
	Kube    kubernetes.Interface
	Nodeset versioned.Interface
	// Recorder records Events as the named component.
	Recorder record.EventRecorder
	// Identity is this replica's leader-election identity; the user agent of
	// every client ends with "replica/<Identity>".
	Identity string
	// Unfenced are clients whose writes go out whether or not this replica
	// leads: for servers that write on behalf of their callers (the
	// autoscaler API), never for controllers.
	Unfenced UnfencedClients
	// NewKube returns one more client, fenced like Kube, with a client-side
	// rate limit of its own (--kube-api-qps and --kube-api-burst), as
	// kube-controller-manager gives each of its controllers one: for work
	// that must not queue behind the rest.
	NewKube func() (kubernetes.Interface, error)
	// MayAct is nil while this replica may act, by the same rule as the
	// fenced clients' writes, and a *NotLeadingError otherwise: for side
	// effects that do not go through the API clients (driver calls to a
	// cloud). Without leader election it is always nil.
	MayAct func() error
	// Watch are the clients for informers: reads only, each on an HTTP/2
	// connection of its own (see OwnConnection).
	Watch UnfencedClients
}

// UnfencedClients write without leading.
type UnfencedClients struct {
	Kube    kubernetes.Interface
	Nodeset versioned.Interface
}

// Process describes one binary for Run.
type Process struct {
	// Name is the component name: user agent, event source, lease name.
	Name string
	// Registry is where the binary's own metrics are registered; Run adds
	// the Go, process and workqueue collectors.
	Registry *prometheus.Registry
	// Ready reports, once leading (and, for a Process that Serves, also on a
	// standby), whether the caches are synced.
	Ready func() bool
	// DebugHandlers are served on the health-probe address (e.g. /debug/machines).
	DebugHandlers map[string]http.Handler
	// Serve, when set, runs on every replica, leader or standby, from start
	// to shutdown: caches and the servers that answer from them (webhooks,
	// APIs for other programs), so that whichever replica a Service picks
	// answers. Controllers' writes belong in Start.
	Serve func(ctx context.Context, clients Clients) error
	// Start runs the controllers of the leader until ctx is done. With
	// leader election the clients are fenced: their writes are refused (with
	// a NotLeadingError) unless this replica leads on a current lease.
	Start func(ctx context.Context, clients Clients) error
}

// Run builds clients, serves metrics and probes, and runs p.Start under
// leader election until SIGTERM or SIGINT.
func Run(o Options, p Process) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := klog.FromContext(ctx).WithName(p.Name)
	ctx = klog.NewContext(ctx, logger)

	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	// The API server gzips large responses and, with WatchList, an
	// informer's whole watch stream, for clients that accept gzip (Go's
	// transport does unasked): CPU on the API server, the shared resource,
	// for bandwidth a cluster's network has to spare.
	cfg.DisableCompression = !o.KubeAPICompression
	hostname, _ := os.Hostname()
	identity := hostname + "_" + utilrand.String(8)
	// The replica's identity in the user agent tells replicas apart in the
	// API server's audit log; the field manager stays the component's name.
	cfg = rest.AddUserAgent(cfg, p.Name+" replica/"+identity)
	unfenced, err := newClients(cfg)
	if err != nil {
		return err
	}
	var writes *fence
	fenced := unfenced
	if o.LeaderElect {
		writes = newFence(identity, o.RenewDeadline)
		fencedCfg := rest.CopyConfig(cfg)
		fencedCfg.Wrap(writes.roundTripper)
		if fenced, err = newClients(fencedCfg); err != nil {
			return err
		}
	}
	utilRuntimeScheme()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx),
		record.WithCorrelatorOptions(record.CorrelatorOptions{SpamKeyFunc: SpamKeyByReason}))
	// Events get a client of their own, with its own rate limit, so that
	// recording what happened never slows down making it happen.
	eventClients, err := newClients(fenced.Config)
	if err != nil {
		return err
	}
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: eventClients.Kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	watch, err := newClients(OwnConnection(cfg))
	if err != nil {
		return err
	}
	clients := Clients{Config: fenced.Config, Kube: fenced.Kube, Nodeset: fenced.Nodeset,
		Recorder: boundedRecorder{broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: p.Name})},
		Unfenced: UnfencedClients{Kube: unfenced.Kube, Nodeset: unfenced.Nodeset}, Identity: identity,
		Watch:   UnfencedClients{Kube: watch.Kube, Nodeset: watch.Nodeset},
		MayAct:  func() error { return nil },
		NewKube: func() (kubernetes.Interface, error) { return NewKube(fenced.Config) }}
	if writes != nil {
		clients.MayAct = writes.mayAct
	}
	kube := unfenced.Kube

	if p.Registry == nil {
		p.Registry = prometheus.NewRegistry()
	}
	p.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerWorkqueueMetrics(p.Registry)

	var leading, standby atomic.Bool
	ready := func() bool {
		if standby.Load() {
			// A standby is ready to take over; one that serves must also
			// be ready to answer.
			return p.Serve == nil || p.Ready == nil || p.Ready()
		}
		return leading.Load() && (p.Ready == nil || p.Ready())
	}
	servers := []*http.Server{}
	if addr := o.MetricsBindAddress; addr != "" && addr != "0" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(p.Registry, promhttp.HandlerOpts{}))
		if o.EnablePprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		servers = append(servers, &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second})
	}
	if addr := o.HealthProbeBindAddress; addr != "" && addr != "0" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !ready() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		for path, h := range p.DebugHandlers {
			mux.Handle(path, h)
		}
		servers = append(servers, &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second})
	}
	for _, srv := range servers {
		listener, err := net.Listen("tcp", srv.Addr)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", srv.Addr, err)
		}
		go func() {
			if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "HTTP server failed", "address", srv.Addr)
			}
		}()
		defer func() {
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdownCtx)
		}()
	}

	if p.Serve != nil {
		go func() {
			if err := p.Serve(ctx, clients); err != nil {
				logger.Error(err, "Serving stopped with an error")
				os.Exit(1)
			}
		}()
	}
	run := func(ctx context.Context) {
		leading.Store(true)
		standby.Store(false)
		if err := p.Start(ctx, clients); err != nil {
			logger.Error(err, "Controllers stopped with an error")
			os.Exit(1)
		}
	}
	if !o.LeaderElect {
		run(ctx)
		return nil
	}

	if _, err := kube.CoreV1().Namespaces().Get(ctx, o.LeaderElectionNamespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.LeaderElectionNamespace}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			logger.Error(err, "Cannot create the leader-election namespace", "namespace", o.LeaderElectionNamespace)
		}
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.LeaderElectionNamespace, p.Name,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity, EventRecorder: clients.Recorder})
	if err != nil {
		return err
	}
	lock = writes.lock(lock)
	standby.Store(true)
	logger.Info("Waiting to become the leader", "lease", o.LeaderElectionNamespace+"/"+p.Name, "identity", identity)
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaseDuration,
		RenewDeadline:   o.RenewDeadline,
		RetryPeriod:     o.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            p.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: run,
			OnStoppedLeading: func() {
				writes.close()
				if ctx.Err() != nil {
					logger.Info("Stopped leading on shutdown")
					return
				}
				// Another replica may be acting now: stop at once.
				logger.Error(nil, "Lost the leader lease; exiting")
				os.Exit(1)
			},
			OnNewLeader: func(current string) {
				if current != identity {
					logger.Info("Another replica leads", "leader", current)
				}
			},
		},
	})
	return nil
}

// OwnConnection is cfg for clients that each get an HTTP/2 connection of
// their own. client-go shares one connection among every client of the
// same TLS settings, and a controller's informers then read their watch
// events on the connection that also carries its workers' requests and
// responses: in the benchmark (1000 Nodes, no client limits), a Node's
// kubelet Ready reached the node controller's informer about a second
// after the API server had written it, where an informer on a connection
// of its own saw it within a tenth of that. A dial function of its own
// makes client-go build a transport for the client instead of sharing
// its cached one.
func OwnConnection(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = dialer.DialContext
	return cfg
}

type clientSet struct {
	Config  *rest.Config
	Kube    kubernetes.Interface
	Nodeset versioned.Interface
}

func newClients(cfg *rest.Config) (clientSet, error) {
	kube, err := NewKube(cfg)
	if err != nil {
		return clientSet{}, err
	}
	nodeset, err := versioned.NewForConfig(cfg)
	if err != nil {
		return clientSet{}, err
	}
	return clientSet{Config: cfg, Kube: kube, Nodeset: nodeset}, nil
}

// NewKube is a client of the built-in APIs that speaks protobuf, as
// kube-controller-manager and the kubelet do: decoding a Node costs the
// client several times less than from JSON, and the API server serializes
// each watched change once for every protobuf watcher. Clients of
// NodeSets and NodeClasses (custom resources, JSON only) use cfg as it is.
func NewKube(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return kubernetes.NewForConfig(cfg)
}

// utilRuntimeScheme lets Events refer to NodeSets and NodeClasses.
func utilRuntimeScheme() {
	_ = nodesetscheme.AddToScheme(scheme.Scheme)
}

// SpamKeyByReason is client-go's key for its Event spam filter (a burst of
// 25 Events per source, object and type, then one per five minutes) with the
// reason added, so that one kind of Event cannot use up an object's budget
// for the others: a NodeSet's routine Provisioned and Registered Events
// during a long scale-up must not silence its OrphanMachineDeleted or
// GroupDeleted.
func SpamKeyByReason(event *corev1.Event) string {
	ref := event.InvolvedObject
	return strings.Join([]string{event.Source.Component, event.Source.Host, ref.Kind, ref.Namespace, ref.Name,
		string(ref.UID), ref.APIVersion, event.Type, event.Reason}, "/")
}

// StripManagedFields is an informer transform that drops metadata.managedFields
// from cached objects: controllers never read them, and on Nodes written by
// several managers they are a good part of each object. An Update of a cached
// object omits the field, which leaves the server's copy as it is.
func StripManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}
