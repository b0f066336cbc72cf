package component

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
)

// TestEventMessagesAreBounded: an Event's message may quote text from
// outside (a tenant's value past an absent webhook, a driver's error page)
// of any length; the API server stores it whole, in the Node's namespace,
// for as long as Events live. Each message is cut to MaxEventMessage
// bytes, on a character boundary, saying it was cut.
func TestEventMessagesAreBounded(t *testing.T) {
	fake := record.NewFakeRecorder(10)
	recorder := boundedRecorder{fake}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	long := strings.Repeat("é", 200*1024)
	recorder.Event(node, corev1.EventTypeWarning, "ProvisioningFailed", long)
	recorder.Eventf(node, corev1.EventTypeWarning, "ProvisioningFailed", "value %q refused", long)
	recorder.AnnotatedEventf(node, nil, corev1.EventTypeWarning, "ProvisioningFailed", "%s", long)
	recorder.Event(node, corev1.EventTypeNormal, "Short", "short and whole")
	for range 3 {
		event := <-fake.Events
		require.LessOrEqual(t, len(event), len("Warning ProvisioningFailed ")+MaxEventMessage)
		assert.True(t, utf8.ValidString(event), "cut on a character boundary")
		assert.True(t, strings.HasSuffix(event, "... (cut)"), "says it was cut")
	}
	assert.Equal(t, "Normal Short short and whole", <-fake.Events)
}
