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

// TestDockerMachineWholeOptionsNeedEveryTextOptionSet: a class that lists
// the whole options map hands tenants every option it leaves unset, and a
// plugin's flags do not say for sure which text options name a file, a URL
// or a host its credentials go to (fake-ssh-host and fake-token speak of
// none). The node controller reports the class Valid=False naming the
// text options it leaves open, and a tenant's NodeSet that sets one gets no
// Node and no machine.
func TestDockerMachineWholeOptionsNeedEveryTextOptionSet(t *testing.T) {
	startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "probe-dm-options")
	_, tenantCS := tenant(t, "tenant-a", ns)
	dir := t.TempDir()
	createClass(t, "dm-whole-options", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Driver, c.Spec.Simulated = nodesetv1alpha1.DriverDockerMachine, nil
		// Every option the words catch is the class's own.
		c.Spec.DockerMachine = &nodesetv1alpha1.DockerMachine{DriverName: fakeplugin.Name, Options: map[string]string{
			"fake-dir": dir, "fake-userdata": "/dev/null", "fake-ssh-key": "/dev/null", "fake-outage": dir + "/no-outage"}}
		c.Spec.TenantOverrides = []string{"options"}
	})

	eventually(t, time.Minute, "the class Valid=False", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "dm-whole-options", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
		if cond == nil || cond.Status != metav1.ConditionFalse {
			return false, fmt.Sprintf("Valid: %+v", cond)
		}
		return strings.Contains(cond.Message, `spec.tenantOverrides[0]: "options" cannot be listed while the class leaves text options unset`) &&
			strings.Contains(cond.Message, "fake-ssh-host") && strings.Contains(cond.Message, "fake-token"), cond.Message
	})

	set := tenantSet("elsewhere", "dm-whole-options", 1)
	set.Spec.DockerMachine = &nodesetv1alpha1.DockerMachine{Options: map[string]string{"fake-ssh-host": "203.0.113.7"}}
	_, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, set, metav1.CreateOptions{})
	require.NoError(t, err)
	acceptedWith(t, ns, "elsewhere", "NodeClassInvalid", "dm-whole-options")
	assert.Empty(t, pluginMachines(t, dir), "no machine")
}
