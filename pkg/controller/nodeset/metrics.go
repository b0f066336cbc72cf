package nodeset

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"

	"nodeset.dev/nodeset/pkg/generated/listers/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/plan"
)

// ReplicasCollector exposes every NodeSet's replica counts from the informer
// cache at scrape time: nodeset_nodeset_replicas{namespace, nodeset,
// nodeclass, type} with type desired, current, ready, available or updated.
type ReplicasCollector struct {
	lister func() v1alpha1.NodeSetLister
	desc   *prometheus.Desc
}

// NewReplicasCollector returns the collector; lister may return nil until
// the informer exists.
func NewReplicasCollector(lister func() v1alpha1.NodeSetLister) *ReplicasCollector {
	return &ReplicasCollector{lister: lister, desc: prometheus.NewDesc("nodeset_nodeset_replicas",
		"Replicas of each NodeSet by type: desired (spec.replicas), current, ready, available and updated (status).",
		[]string{"namespace", "nodeset", "nodeclass", "type"}, nil)}
}

// Describe sends the metric's description.
func (r *ReplicasCollector) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

// Collect sends one series per NodeSet and type.
func (r *ReplicasCollector) Collect(ch chan<- prometheus.Metric) {
	lister := r.lister()
	if lister == nil {
		return
	}
	sets, err := lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, set := range sets {
		for typ, v := range map[string]int32{"desired": plan.Replicas(set), "current": set.Status.Replicas, "ready": set.Status.ReadyReplicas,
			"available": set.Status.AvailableReplicas, "updated": set.Status.UpdatedReplicas} {
			ch <- prometheus.MustNewConstMetric(r.desc, prometheus.GaugeValue, float64(v), set.Namespace, set.Name, set.Spec.NodeClassName, typ)
		}
	}
}
