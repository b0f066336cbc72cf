package lifecycle

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/test/framework"
)

// TestForgedReviewsOfUnknownNamespacesDoNotSpendTheControllersAPIBudget:
// a class that admits namespaces by a label selector is judged against the
// NodeSet's Namespace, and a Namespace the caches do not hold is read from
// the API server through the nodeset controller's own client. Anyone who
// reaches the webhook's port may send reviews of NodeSets of such a class
// (a class every tenant can read) in namespaces that do not exist: each
// would have the controller spend its API budget, which every tenant's
// reconciliation shares, as reviews of unknown NodeSets and classes would.
// Those lookups are bounded the same way: a burst, then a few a second.
func TestForgedReviewsOfUnknownNamespacesDoNotSpendTheControllersAPIBudget(t *testing.T) {
	c := startControllers(t)
	cp := framework.Shared(t)
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(cp.AdminConfig())
	require.NoError(t, err)
	createClass(t, "hostile6-tiered", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromSelector,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"hostile6.example.com/tier": "gold"}}}
	})
	waitClassValid(t, "hostile6-tiered")

	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the attacker's client
	url := fmt.Sprintf("https://127.0.0.1:%d/validate-nodeset", c.WebhookPort)
	review := func(i int) {
		namespace := fmt.Sprintf("hostile6-forged-%d", i)
		set := tenantSet("forged", "hostile6-tiered", 1)
		set.Namespace = namespace
		set.APIVersion, set.Kind = nodesetv1alpha1.GroupVersion.String(), "NodeSet"
		raw, err := json.Marshal(set)
		require.NoError(t, err)
		body, err := json.Marshal(&admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: types.UID(strconv.Itoa(i)), Operation: admissionv1.Create,
				Namespace: namespace, Name: "forged", Object: runtime.RawExtension{Raw: raw}},
		})
		require.NoError(t, err)
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}

	const forged = 300
	before := notFoundGets(ctx, t, kube, "namespaces")
	start := time.Now()
	for i := range forged {
		review(i)
	}
	elapsed := time.Since(start)
	spent := notFoundGets(ctx, t, kube, "namespaces") - before
	// The burst, a few per second, and room for another test's request.
	bound := 50 + 10*elapsed.Seconds() + 5
	t.Logf("%d forged reviews in %s made the nodeset controller send %.0f GETs of Namespaces that do not exist", forged, elapsed, spent)
	assert.LessOrEqual(t, spent, bound, "forged reviews spend the nodeset controller's API budget")
}

// notFoundGets is how many GETs of an object of resource the API server
// answered 404 to, by its own metrics.
func notFoundGets(ctx context.Context, t *testing.T, kube kubernetes.Interface, resource string) float64 {
	t.Helper()
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	require.NoError(t, err)
	var total float64
	for _, m := range requestTotalRE.FindAllStringSubmatch(string(raw), -1) {
		labels := m[1]
		if !strings.Contains(labels, `code="404"`) || !strings.Contains(labels, `resource="`+resource+`"`) ||
			!strings.Contains(labels, `verb="GET"`) || !strings.Contains(labels, `subresource=""`) {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err)
		total += v
	}
	return total
}
