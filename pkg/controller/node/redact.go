package node

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"nodeset.dev/nodeset/pkg/redact"
)

// scrub is text without any value of the credentials Secrets this
// controller has read, nor anything that has the form of a credential
// (redact.Shapes: the controller's own, from the SDK's default chain, are
// in no Secret). Drivers scrub their own errors; this is the second
// line, at the places text from drivers is kept or shown (Events, the
// provisioning-error annotation, a NodeSet's status.group.message), so a
// driver that forgets cannot leak a credential there.
func (c *Controller) scrub(text string) string {
	c.credentialsMu.Lock()
	var values redact.Set
	for _, read := range c.credentialsCache {
		values.Add(read.data)
	}
	c.credentialsMu.Unlock()
	return redact.Shapes(values.String(text))
}

// scrubbingRecorder records Events with their messages scrubbed.
type scrubbingRecorder struct {
	record.EventRecorder
	scrub func(string) string
}

func (r scrubbingRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.EventRecorder.Event(object, eventtype, reason, r.scrub(message))
}

func (r scrubbingRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.EventRecorder.Event(object, eventtype, reason, r.scrub(fmt.Sprintf(messageFmt, args...)))
}

func (r scrubbingRecorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.EventRecorder.AnnotatedEventf(object, annotations, eventtype, reason, "%s", r.scrub(fmt.Sprintf(messageFmt, args...)))
}
