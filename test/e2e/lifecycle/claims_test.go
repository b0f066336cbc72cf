package lifecycle

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestADriverIsServedByOneNodeController: an out-of-tree node controller
// started with --drivers naming a driver the built-in node controller
// serves leads on a Lease of its own name, so nothing else would keep the
// two from both making machines for the same Nodes. It finds the driver
// claimed, says so, and serves nothing while the claim is renewed.
func TestADriverIsServedByOneNodeController(t *testing.T) {
	startControllers(t)
	kube, _ := clients(t)
	eventually(t, time.Minute, "the built-in node controller claims simulated", func(ctx context.Context) (bool, string) {
		lease, err := kube.CoordinationV1().Leases("nodeset-system").Get(ctx, nodesetv1alpha1.DriverClaimLease("simulated"), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		return holder == "node-controller", "held by " + holder
	})

	p, _, health := startExampleNodeController(t, []string{"--drivers=simulated"}, nil)
	eventually(t, time.Minute, "the second node controller waits for the claim", func(context.Context) (bool, string) {
		logs := p.Logs()
		return strings.Contains(logs, "Another node controller serves this driver") && strings.Contains(logs, `servedBy="node-controller"`),
			tail(logs, 5)
	})
	code, body, err := get(context.Background(), health, "/readyz")
	assert.NoError(t, err)
	assert.NotEqual(t, http.StatusOK, code, "a node controller serving nothing is not ready: %s", body)
	assert.NotContains(t, p.Logs(), "Provisioned machine")
	assert.NotContains(t, p.Logs(), "Validated NodeClass", "it judges no class of a driver it does not serve")
}
