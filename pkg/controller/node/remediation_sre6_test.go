package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// A controller that starts while a machine made long ago has not
// registered (kubelet and controller kept away by the same outage) gives
// it the whole registration timeout from its start before replacing it.
func TestAStartingControllerGivesUnregisteredMachinesTheWholeRegistrationTimeout(t *testing.T) {
	booting := setNode("web-a", "sim")
	booting.Spec.ProviderID = "test:///web-a"
	booting.Annotations = map[string]string{nodesetv1alpha1.AnnotationMachineCreated: testNow.Add(-time.Hour).UTC().Format(time.RFC3339)}
	f := remediationFixture(t, 100, booting)

	f.controller.started = testNow.Add(-9 * time.Minute)
	overdue, ok := f.controller.unhealthyFor(f.get("web-a"), testClass("sim"))
	require.True(t, ok)
	assert.Equal(t, -time.Minute, overdue, "due 10 minutes (the class's registration timeout) after the start, not after the machine was made")
	require.NoError(t, f.sync("web-a"))
	assert.Nil(t, f.get("web-a").DeletionTimestamp, "kept: this controller has watched it for 9 minutes only")

	f.controller.started = testNow.Add(-11 * time.Minute)
	require.NoError(t, f.sync("web-a"))
	_, err := f.kube.CoreV1().Nodes().Get(context.Background(), "web-a", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "replaced once watched unregistered for the whole timeout: %v", err)
}
