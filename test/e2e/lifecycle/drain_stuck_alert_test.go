package lifecycle

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// alertFor is the `for` of the alert named in
// deploy/observability/prometheus-rules.yaml (0 when it has none).
func alertFor(t *testing.T, alert string) time.Duration {
	t.Helper()
	text, _ := shippedAlert(t, alert)["for"].(string)
	if text == "" {
		return 0
	}
	d, err := time.ParseDuration(text)
	require.NoError(t, err, "for: %s", text)
	return d
}

// TestNodeDrainStuckIsAboutOneNodesDrain: NodeDrainStuck says one Node's
// drain has run for 30 minutes. It fires for a set whose Node started
// draining 40 minutes ago, and not for a set whose Node started draining
// just now, although both have a Node draining at this instant: a set that
// keeps draining one Node after another (a rolling update, a scale-down of
// many) always has one, and must not fire for it. The rule's `for` may not
// carry the 30 minutes either: it measures how long the expression held
// for the set, not how long a Node drained.
func TestNodeDrainStuckIsAboutOneNodesDrain(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "drain-stuck-alert")
	startedLongAgo := time.Now().Add(-40 * time.Minute).UTC().Format(time.RFC3339)
	stuck := drainingNode(t, c, ns, "drain-stuck-old-sim", "stuck", 2*time.Hour, func(node string) {
		guardedPod(t, ns, "held-long", node, "held-long")
		// As a drain that a restart or a human's edit left behind: its
		// start is kept, so the drain is 40 minutes old.
		_, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, nodesetv1alpha1.AnnotationDrainStarted, startedLongAgo),
			metav1.PatchOptions{})
		require.NoError(t, err)
	})
	moving := drainingNode(t, c, ns, "drain-stuck-new-sim", "moving", 2*time.Hour, func(node string) {
		guardedPod(t, ns, "held-now", node, "held-now")
	})
	t.Cleanup(func() {
		// The drains end once their budgets are gone.
		for _, budget := range []string{"held-long", "held-now"} {
			_ = kube.PolicyV1().PodDisruptionBudgets(ns).Delete(context.Background(), budget, metav1.DeleteOptions{})
		}
	})
	n, err := kube.CoreV1().Nodes().Get(ctx, stuck, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, startedLongAgo, n.Annotations[nodesetv1alpha1.AnnotationDrainStarted])
	_, err = kube.CoreV1().Nodes().Get(ctx, moving, metav1.GetOptions{})
	require.NoError(t, err, "held by its budget")

	assert.LessOrEqual(t, alertFor(t, "NodeDrainStuck"), 5*time.Minute,
		"the 30 minutes are a Node's drain, in the expression, not the set's in `for`")
	expr := alertRule(t, "NodeDrainStuck")
	eventually(t, time.Minute, "NodeDrainStuck fires for the stuck set only", func(ctx context.Context) (bool, string) {
		out, err := evalPromQL(expr, scrape(t, c.NodeMetricsPort))
		if err != nil {
			return false, "the rule does not evaluate: " + err.Error()
		}
		var firing []string
		for _, s := range out {
			if s.labels["namespace"] == ns {
				firing = append(firing, s.labels["nodeset"])
			}
		}
		sort.Strings(firing)
		return slices.Equal(firing, []string{"stuck"}), fmt.Sprintf("firing for %v, want [stuck]", firing)
	})
}

// TestNodeSetProvisioningFailingHoldsBetweenRetries: a failing machine
// create is retried after the work queue's backoff, which grows to 1000 s,
// and at the latest at the node controller's resync (--resync-period, 10
// minutes by default). A rate over a window shorter than twice that gap
// holds no failed create for part of the time while the failure goes on,
// and the alert resolves and fires again, over and over, for one
// unbroken outage. Every window the rule reads must hold at least two
// retries.
func TestNodeSetProvisioningFailingHoldsBetweenRetries(t *testing.T) {
	const longestRetryGap = 10 * time.Minute
	expr := alertRule(t, "NodeSetProvisioningFailing")
	windows := regexp.MustCompile(`\[([0-9]+[smhd])\]`).FindAllStringSubmatch(expr, -1)
	require.NotEmpty(t, windows, "the rule reads rates over windows: %s", expr)
	for _, w := range windows {
		d, err := time.ParseDuration(w[1])
		require.NoError(t, err)
		assert.GreaterOrEqual(t, d, 2*longestRetryGap, "window [%s] of %s", w[1], expr)
	}
}
