package dockermachine

import (
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

// remember adds credentials to the values scrubbed from plugin text.
func remember(credentials map[string][]byte) { credentialValues.Add(credentials) }

// scrubbed is err without any credential value this process knows of,
// including those in the machine's credential files.
func (d *Driver) scrubbed(machine string, err error) error {
	if err == nil {
		return nil
	}
	if machine != "" {
		remember(d.fileCredentials(machine))
	}
	return credentialValues.Error(err)
}
