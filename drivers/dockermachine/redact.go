package dockermachine

import (
	"context"
	"errors"

	"nodeset.dev/nodeset/pkg/redact"
)

// credentialValues are the credential values this process has handed to
// plugins: the values of every credentials Secret a class of this driver
// was created or validated with, and the contents of the machines'
// credential files. Every text that comes back from a plugin (its errors,
// its output, which libmachine sends to one process-wide log) is scrubbed
// of all of them, whichever machine it is about: a plugin may echo any
// value it was given, and the controller does not always pass a class's
// credentials (a machine deleted after its class was).
var credentialValues redact.Set

// outputSecretsKey keys the values, besides credentialValues, that the
// output of the plugins opened with a context is scrubbed of.
type outputSecretsKey struct{}

// withOutputSecrets is ctx with values that the output of a plugin opened
// with it is scrubbed of too: the bootstrap token in the user data of the
// machine it creates, which the plugin may print as it sends it to its
// cloud (amazonec2 logs the body of every request at its debug level, the
// user data base64-encoded in RunInstances'). It is known to that plugin
// process alone, for as long as its output is read.
func withOutputSecrets(ctx context.Context, values map[string][]byte) context.Context {
	return context.WithValue(ctx, outputSecretsKey{}, redact.New(values))
}

// outputSecrets are the values withOutputSecrets gave ctx, or nil.
func outputSecrets(ctx context.Context) *redact.Set {
	s, _ := ctx.Value(outputSecretsKey{}).(*redact.Set)
	return s
}

// maxErrorText bounds the text of the driver's errors: a plugin may quote
// its cloud's answer whole (an error page, a dump of the request), which
// would otherwise reach Events and log lines at every retry.
const maxErrorText = 4 << 10

// remember adds credentials to the values scrubbed from plugin text.
func remember(credentials map[string][]byte) { credentialValues.Add(credentials) }

// scrubbed is err without any credential value this process knows of,
// including those in the machine's credential files, nor anything that has
// the form of a credential (redact.Shapes), cut to maxErrorText
// once scrubbed (so the cut leaves no part of a value behind).
func (d *Driver) scrubbed(machine string, err error) error {
	if err == nil {
		return nil
	}
	if machine != "" {
		remember(d.fileCredentials(machine))
	}
	err = redact.ShapesOf(credentialValues.Error(err))
	msg := err.Error()
	if len(msg) <= maxErrorText {
		return err
	}
	return &boundedError{msg: redact.Cut(msg, maxErrorText), cause: err}
}

// boundedError is an error whose text was cut; it is still the sentinel
// errors its cause wraps (errors.Is).
type boundedError struct {
	msg   string
	cause error
}

func (e *boundedError) Error() string { return e.msg }

func (e *boundedError) Is(target error) bool { return errors.Is(e.cause, target) }
