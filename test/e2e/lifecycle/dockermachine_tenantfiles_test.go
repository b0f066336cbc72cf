package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

// TestDockerMachineTenantFileOptionsWithoutTheWebhook: a class that lets
// tenants set a plugin option taking a file path would let a NodeSet make
// the plugin, on the node controller's host, read the node controller's
// service-account token into its machine's user data. The node controller
// reports such a class Valid=False naming the entry, and a tenant's
// NodeSet that points the option at the token gets no Node and no machine.
func TestDockerMachineTenantFileOptionsWithoutTheWebhook(t *testing.T) {
	startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "probe-dm-files")
	_, tenantCS := tenant(t, "tenant-a", ns)
	dir := t.TempDir()
	createClass(t, "dm-tenant-files", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Driver, c.Spec.Simulated = nodesetv1alpha1.DriverDockerMachine, nil
		c.Spec.DockerMachine = &nodesetv1alpha1.DockerMachine{DriverName: fakeplugin.Name, Options: map[string]string{"fake-dir": dir}}
		c.Spec.TenantOverrides = []string{"options.fake-userdata"}
	})
	withoutWebhook(t)

	eventually(t, time.Minute, "the class Valid=False", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "dm-tenant-files", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
		if cond == nil || cond.Status != metav1.ConditionFalse {
			return false, fmt.Sprintf("Valid: %+v", cond)
		}
		return strings.Contains(cond.Message, `spec.tenantOverrides[0]: "options.fake-userdata" cannot be listed`), cond.Message
	})

	set := tenantSet("steal", "dm-tenant-files", 1)
	set.Spec.DockerMachine = &nodesetv1alpha1.DockerMachine{Options: map[string]string{
		"fake-userdata": "/var/run/secrets/kubernetes.io/serviceaccount/token"}}
	_, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, set, metav1.CreateOptions{})
	require.NoError(t, err, "no webhook, the schema admits it")
	acceptedWith(t, ns, "steal", "NodeClassInvalid", "dm-tenant-files")
	assert.Empty(t, pluginMachines(t, dir), "no machine")
}
