package node

import (
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// Metrics are the node controller's Prometheus metrics.
type Metrics struct {
	provisioning *prometheus.HistogramVec
	registration *prometheus.HistogramVec
	drains       *prometheus.HistogramVec
	driverCalls  *prometheus.HistogramVec
	orphans      *prometheus.CounterVec
	orphanRounds *prometheus.CounterVec
	cloudCalls   *prometheus.CounterVec
	cloudRetries *prometheus.CounterVec
	fenced       *prometheus.CounterVec
	phases       *phaseCollector

	interruptions          *prometheus.CounterVec
	interruptionDrain      prometheus.Histogram
	interruptionDrainsCut  prometheus.Counter
	lifecycleActions       prometheus.Counter
	interruptionUnreadable prometheus.Counter
	interruptionsNotOurs   prometheus.Counter
}

// NewMetrics registers the node controller's metrics on registry; nodes feeds
// the nodes-by-phase gauge at scrape time.
func NewMetrics(registry prometheus.Registerer, nodes func() corelisters.NodeLister) *Metrics {
	buckets := prometheus.ExponentialBuckets(0.1, 2, 14) // 0.1s .. ~27min
	m := &Metrics{
		provisioning: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "nodeset", Name: "node_provisioning_duration_seconds",
			Help: "From Node creation until the driver reported the machine created."}, []string{"driver"}),
		registration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "nodeset", Name: "node_registration_duration_seconds",
			Help: "From machine creation until the kubelet reported Ready.", Buckets: buckets}, []string{"driver"}),
		drains: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "nodeset", Name: "node_drain_duration_seconds",
			Help: "How long drains took, by outcome (drained, timed-out, timed-out-left-cordoned).", Buckets: buckets}, []string{"outcome"}),
		driverCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "nodeset", Name: "driver_call_duration_seconds",
			Help: "Driver calls by driver, operation and outcome (success or error)."}, []string{"driver", "operation", "outcome"}),
		orphans: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeset", Name: "orphan_machines_deleted_total",
			Help: "Machines deleted because no Node accounted for them, by driver."}, []string{"driver"}),
		orphanRounds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeset", Name: "orphan_collection_rounds_total",
			Help: "Orphan collection rounds by outcome (completed, list-failed, caches-not-synced); only completed rounds remove anything."}, []string{"outcome"}),
		cloudCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeset", Name: "cloud_api_calls_total",
			Help: "Calls drivers made to cloud APIs, by driver, API operation and outcome (success, throttled, error); retries are part of one call."},
			[]string{"driver", "operation", "outcome"}),
		cloudRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeset", Name: "cloud_api_retries_total",
			Help: "Retries of cloud API calls (throttled, 5xx, dropped connections), by driver and API operation."},
			[]string{"driver", "operation"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeset", Name: "driver_calls_fenced_total",
			Help: "Driver calls with a side effect not made because this replica was not sure it led, by operation."},
			[]string{"operation"}),
		phases: &phaseCollector{nodes: nodes, desc: prometheus.NewDesc("nodeset_nodes",
			"Nodes managed by nodeset, by NodeSet (empty for static Nodes), NodeClass and phase (provisioning, registering, ready, draining, deleting).",
			[]string{"namespace", "nodeset", "nodeclass", "phase"}, nil),
			longestDrain: prometheus.NewDesc("nodeset_longest_running_drain_seconds",
				"How long the longest drain under way among a NodeSet's Nodes has run, from its nodeset.dev/drain-started; 0 while none drains.",
				[]string{"namespace", "nodeset", "nodeclass"}, nil)},
	}
	m.interruptions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeset", Name: "interruptions_received_total",
		Help: "Interruption notices received from the clouds' queues, by kind (SpotInterruption, RebalanceRecommendation, ScheduledChange, StateChange, TerminationLifecycleAction)."},
		[]string{"kind"})
	m.interruptionDrain = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "nodeset", Name: "interruption_drain_duration_seconds",
		Help: "From an interruption notice (the time the cloud sent it) until its Node was drained.", Buckets: buckets})
	m.interruptionDrainsCut = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeset", Name: "interruption_drains_unfinished_total",
		Help: "Drains of interrupted Nodes that did not finish before the notice's deadline; the machine went with pods on it."})
	m.lifecycleActions = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeset", Name: "lifecycle_actions_completed_total",
		Help: "Cloud group lifecycle actions completed (CONTINUE) once their machine was drained."})
	m.interruptionUnreadable = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeset", Name: "interruption_messages_unparseable_total",
		Help: "Messages on an interruption queue that are no notice nodeset can read; each is deleted, never retried."})
	m.interruptionsNotOurs = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeset", Name: "interruption_messages_unknown_machine_total",
		Help: "Interruption notices for machines that are no NodeSet's; ignored."})
	registry.MustRegister(m.interruptions, m.interruptionDrain, m.interruptionDrainsCut, m.lifecycleActions, m.interruptionUnreadable, m.interruptionsNotOurs)
	registry.MustRegister(m.provisioning, m.registration, m.drains, m.driverCalls, m.orphans, m.orphanRounds, m.cloudCalls, m.cloudRetries, m.fenced, m.phases)
	return m
}

// Label values of the node controller's metrics.
const (
	opCreate        = "create"
	opDelete        = "delete"
	opList          = "list"
	opEnsureGroup   = "ensure-group"
	opDescribeGroup = "describe-group"
	opTerminate     = "terminate-machine"
	opDeleteGroup   = "delete-group"
	opListGroups    = "list-groups"
	opRegistered    = "registered"

	opReceiveInterruptions = "receive-interruptions"
	opAckInterruptions     = "ack-interruptions"
	opCompleteLifecycle    = "complete-lifecycle-action"
	opLifecycleHeartbeat   = "lifecycle-heartbeat"

	callSucceeded = "success"
	callFailed    = "error"
	callRetried   = "retry"

	drainDrained          = "drained"
	drainTimedOut         = "timed-out"
	drainTimedOutCordoned = "timed-out-left-cordoned"

	roundCompleted       = "completed"
	roundListFailed      = "list-failed"
	roundCachesNotSynced = "caches-not-synced"
	roundPanicked        = "panicked"
)

// Initialize creates every series whose label values are known in advance,
// at zero, so dashboards and alerts see them before the first event.
func (m *Metrics) Initialize(driverNames []string) {
	for _, d := range driverNames {
		m.provisioning.WithLabelValues(d)
		m.registration.WithLabelValues(d)
		m.orphans.WithLabelValues(d)
		for _, op := range []string{opCreate, opDelete, opList, opEnsureGroup, opDescribeGroup, opTerminate, opDeleteGroup, opListGroups} {
			for _, outcome := range []string{callSucceeded, callFailed, callRetried} {
				m.driverCalls.WithLabelValues(d, op, outcome)
			}
		}
	}
	for _, outcome := range []string{drainDrained, drainTimedOut, drainTimedOutCordoned} {
		m.drains.WithLabelValues(outcome)
	}
	for _, op := range []string{opCreate, opDelete, opEnsureGroup, opTerminate, opDeleteGroup, opRegistered,
		opReceiveInterruptions, opAckInterruptions, opCompleteLifecycle, opLifecycleHeartbeat} {
		m.fenced.WithLabelValues(op)
	}
	for _, kind := range []drivers.InterruptionKind{drivers.InterruptionSpot, drivers.InterruptionRebalance, drivers.InterruptionScheduled,
		drivers.InterruptionStateChange, drivers.InterruptionTermination} {
		m.interruptions.WithLabelValues(string(kind))
	}
	for _, outcome := range []string{roundCompleted, roundListFailed, roundCachesNotSynced, roundPanicked} {
		m.orphanRounds.WithLabelValues(outcome)
	}
}

// CloudCalls returns what a driver reports each cloud API call to.
func (m *Metrics) CloudCalls(driver string) func(operation, outcome string, attempts int) {
	return func(operation, outcome string, attempts int) {
		m.cloudCalls.WithLabelValues(driver, operation, outcome).Inc()
		if attempts > 1 {
			m.cloudRetries.WithLabelValues(driver, operation).Add(float64(attempts - 1))
		}
	}
}

func (m *Metrics) orphanDeleted(driver string) { m.orphans.WithLabelValues(driver).Inc() }

func (m *Metrics) orphanRound(outcome string) { m.orphanRounds.WithLabelValues(outcome).Inc() }

func (m *Metrics) fencedCall(operation string) { m.fenced.WithLabelValues(operation).Inc() }

func (m *Metrics) interruptionReceived(kind drivers.InterruptionKind) {
	m.interruptions.WithLabelValues(string(kind)).Inc()
}

func (m *Metrics) interruptionDrained(took time.Duration) {
	m.interruptionDrain.Observe(took.Seconds())
}

func (m *Metrics) interruptionDrainCut() { m.interruptionDrainsCut.Inc() }

func (m *Metrics) lifecycleCompleted() { m.lifecycleActions.Inc() }

func (m *Metrics) interruptionUnparseable() { m.interruptionUnreadable.Inc() }

func (m *Metrics) interruptionUnknown() { m.interruptionsNotOurs.Inc() }

func (m *Metrics) driverCall(driver, operation string, start time.Time, err error) {
	outcome := callSucceeded
	switch {
	case errors.Is(err, drivers.ErrThrottled), errors.Is(err, drivers.ErrInProgress):
		outcome = callRetried // no failure of the machine: tried again
	case err != nil:
		outcome = callFailed
	}
	m.driverCalls.WithLabelValues(driver, operation, outcome).Observe(time.Since(start).Seconds())
}

// phaseCollector counts Nodes by class and phase, and times each set's
// longest drain, from the informer cache when scraped.
type phaseCollector struct {
	nodes        func() corelisters.NodeLister
	desc         *prometheus.Desc
	longestDrain *prometheus.Desc
}

func (p *phaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.desc
	ch <- p.longestDrain
}

func (p *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	lister := p.nodes()
	if lister == nil {
		return
	}
	selector, _ := labels.Parse(nodesetv1alpha1.LabelNodeClass)
	nodes, err := lister.List(nodeutil.Members(selector))
	if err != nil {
		return
	}
	counts := map[[4]string]int{}
	// Per set, the start of its oldest drain under way (zero for none): a
	// set that keeps some Node draining, one after another, has none that
	// is old.
	oldest := map[[3]string]time.Time{}
	for _, n := range nodes {
		set := [3]string{n.Labels[nodesetv1alpha1.LabelNodeSetNamespace], n.Labels[nodesetv1alpha1.LabelNodeSet],
			n.Labels[nodesetv1alpha1.LabelNodeClass]}
		phase := nodeutil.Phase(n)
		counts[[4]string{set[0], set[1], set[2], phase}]++
		first, seen := oldest[set]
		if !seen {
			oldest[set] = time.Time{}
		}
		if phase != nodeutil.PhaseDraining || !slices.Contains(n.Finalizers, nodesetv1alpha1.FinalizerTermination) {
			continue
		}
		started, err := time.Parse(time.RFC3339, n.Annotations[nodesetv1alpha1.AnnotationDrainStarted])
		if err != nil {
			started = n.DeletionTimestamp.Time // deleted, not cordoned yet
		}
		if first.IsZero() || started.Before(first) {
			oldest[set] = started
		}
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, float64(v), k[0], k[1], k[2], k[3])
	}
	now := time.Now()
	for k, started := range oldest {
		age := 0.0
		if !started.IsZero() {
			age = max(now.Sub(started).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(p.longestDrain, prometheus.GaugeValue, age, k[0], k[1], k[2])
	}
}
