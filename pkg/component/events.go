package component

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"nodeset.dev/nodeset/pkg/redact"
)

// MaxEventMessage is the most bytes of an Event's message the components
// write. A message may quote text from outside (a tenant's value that got
// past an absent webhook, a driver's or a cloud's error page) of any
// length, and the API server would store it whole, for as long as Events
// live; a person reads the first lines.
const MaxEventMessage = 4096

// boundedRecorder cuts every message to MaxEventMessage bytes.
type boundedRecorder struct {
	record.EventRecorder
}

func (r boundedRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.EventRecorder.Event(object, eventtype, reason, redact.Cut(message, MaxEventMessage))
}

func (r boundedRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.EventRecorder.Event(object, eventtype, reason, redact.Cut(fmt.Sprintf(messageFmt, args...), MaxEventMessage))
}

func (r boundedRecorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.EventRecorder.AnnotatedEventf(object, annotations, eventtype, reason, "%s", redact.Cut(fmt.Sprintf(messageFmt, args...), MaxEventMessage))
}
