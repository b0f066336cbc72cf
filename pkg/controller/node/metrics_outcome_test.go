package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corelisters "k8s.io/client-go/listers/core/v1"

	"nodeset.dev/nodeset/drivers"
)

// TestRetriedDriverCallsAreNoErrors: a create the cloud throttled, or one
// still under way, is retried and is no failure of the machine (the Node
// carries no provisioning error for it). Counted as an error, it would
// hold NodeSetProvisioningFailing up, and show a healthy but throttled
// fleet as failing.
func TestRetriedDriverCallsAreNoErrors(t *testing.T) {
	registry := prometheus.NewRegistry()
	m := NewMetrics(registry, func() corelisters.NodeLister { return nil })
	m.Initialize([]string{"eks-asg"})
	start := time.Now()
	m.driverCall("eks-asg", opCreate, start, fmt.Errorf("launching: %w", drivers.ErrThrottled))
	m.driverCall("eks-asg", opCreate, start, fmt.Errorf("launching: %w", drivers.ErrInProgress))
	m.driverCall("eks-asg", opCreate, start, fmt.Errorf("launching: no capacity"))
	m.driverCall("eks-asg", opCreate, start, nil)

	families, err := registry.Gather()
	require.NoError(t, err)
	counts := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "nodeset_driver_call_duration_seconds" {
			continue
		}
		for _, metric := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range metric.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["driver"] == "eks-asg" && labels["operation"] == opCreate {
				counts[labels["outcome"]] = metric.GetHistogram().GetSampleCount()
			}
		}
	}
	assert.Equal(t, map[string]uint64{"success": 1, "error": 1, "retry": 2}, counts,
		"only the real failure is an error; the retried ones are their own outcome, there from the start")
}
