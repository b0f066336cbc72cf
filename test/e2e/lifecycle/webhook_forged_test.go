package lifecycle

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
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

	"nodeset.dev/nodeset/test/framework"
)

// TestForgedReviewsDoNotSpendTheControllersAPIBudget: the webhook's Service
// is reachable from any pod, and without --webhook-client-ca-file (the
// shipped Deployment) anyone may send it reviews of their own making. A
// review of a NodeSet or NodeClass the caches do not hold is answered from
// the API server, through the nodeset controller's own client (its rate
// limit, its priority level): a pod sending reviews for names that do not
// exist would have the controller spend its API budget, which every
// tenant's reconciliation shares, on its behalf. The lookups made for
// objects the caches do not hold are bounded: a flood of forged reviews
// gets a burst of them and a few per second, and the rest are admitted
// unchecked, as with the webhook away (the controllers still hold every
// rule).
func TestForgedReviewsDoNotSpendTheControllersAPIBudget(t *testing.T) {
	c := startControllers(t)
	cp := framework.Shared(t)
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(cp.AdminConfig())
	require.NoError(t, err)

	// A pod checks no certificate: it only wants the answers.
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the attacker's client
	url := fmt.Sprintf("https://127.0.0.1:%d/validate-nodeset", c.WebhookPort)
	review := func(i int) {
		scale := fmt.Sprintf(`{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"forged-%d","namespace":"forged"},"spec":{"replicas":5}}`, i)
		body, err := json.Marshal(&admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: types.UID(strconv.Itoa(i)), Operation: admissionv1.Update,
				Namespace: "forged", Name: fmt.Sprintf("forged-%d", i), SubResource: "scale",
				Object: runtime.RawExtension{Raw: []byte(scale)}},
		})
		require.NoError(t, err)
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}

	const forged = 300
	before := notFoundNodeSetGets(ctx, t, kube)
	start := time.Now()
	for i := range forged {
		review(i)
	}
	elapsed := time.Since(start)
	spent := notFoundNodeSetGets(ctx, t, kube) - before
	// The burst, a few per second, and room for another test's request.
	bound := 50 + 10*elapsed.Seconds() + 5
	t.Logf("%d forged reviews in %s made the nodeset controller send %.0f GETs of NodeSets that do not exist", forged, elapsed, spent)
	assert.LessOrEqual(t, spent, bound, "forged reviews spend the nodeset controller's API budget")
}

var requestTotalRE = regexp.MustCompile(`(?m)^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$`)

// notFoundNodeSetGets is how many GETs of a NodeSet the API server answered
// 404 to, by its own metrics.
func notFoundNodeSetGets(ctx context.Context, t *testing.T, kube kubernetes.Interface) float64 {
	t.Helper()
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	require.NoError(t, err)
	var total float64
	for _, m := range requestTotalRE.FindAllStringSubmatch(string(raw), -1) {
		labels := m[1]
		if !strings.Contains(labels, `code="404"`) || !strings.Contains(labels, `resource="nodesets"`) ||
			!strings.Contains(labels, `verb="GET"`) || !strings.Contains(labels, `subresource=""`) {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err)
		total += v
	}
	return total
}
