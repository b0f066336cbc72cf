package node

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

func TestScrubbingRecorder(t *testing.T) {
	c := &Controller{credentialsCache: map[string]credentialsRead{
		"nodeset-system/creds": {data: map[string][]byte{"token": []byte("planted-token-9f8e7d")}},
	}}
	fake := record.NewFakeRecorder(3)
	r := scrubbingRecorder{EventRecorder: fake, scrub: c.scrub}
	node := &corev1.Node{}
	r.Event(node, corev1.EventTypeWarning, "ProvisioningFailed", "plugin said planted-token-9f8e7d")
	r.Eventf(node, corev1.EventTypeWarning, "ProvisioningFailed", "plugin said %q", "planted-token-9f8e7d")
	r.AnnotatedEventf(node, nil, corev1.EventTypeWarning, "ProvisioningFailed", "plugin said %s", "planted-token-9f8e7d")
	for _, want := range []string{
		`Warning ProvisioningFailed plugin said [redacted:token]`,
		`Warning ProvisioningFailed plugin said "[redacted:token]"`,
		`Warning ProvisioningFailed plugin said [redacted:token]`,
	} {
		assert.Equal(t, want, <-fake.Events)
	}
	assert.Equal(t, "no credential here", c.scrub("no credential here"))
}
