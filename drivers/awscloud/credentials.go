package awscloud

import (
	"maps"
	"slices"
	"strings"

	"nodeset.dev/nodeset/drivers"
)

// RequiredCredentials are the keys a class's credentials Secret must have.
var RequiredCredentials = []string{CredentialAccessKeyID, CredentialSecretAccessKey}

// CheckCredentials refuses a class that names a credentials Secret without
// every required key: such a class must never fall back to the node
// controller's own identity (the SDK's default chain), which is only for
// classes that name no Secret. A key that holds only white space is
// empty. The error names the missing key and the keys the Secret has,
// never a value.
func CheckCredentials(class drivers.Class) error {
	ref := class.Spec.CredentialsSecretRef
	if ref == nil {
		return nil
	}
	for _, key := range RequiredCredentials {
		if _, ok := class.Credentials[key]; ok && credential(class.Credentials, key) == "" {
			return drivers.InvalidConfiguration("spec.credentialsSecretRef", "Secret %s/%s has an empty %s (white space at most); required: %s",
				ref.Namespace, ref.Name, key, strings.Join(RequiredCredentials, ", "))
		}
		if len(class.Credentials[key]) == 0 {
			have := slices.Sorted(maps.Keys(class.Credentials))
			if len(have) == 0 {
				return drivers.InvalidConfiguration("spec.credentialsSecretRef", "Secret %s/%s has no key %s (it has no keys); required: %s",
					ref.Namespace, ref.Name, key, strings.Join(RequiredCredentials, ", "))
			}
			return drivers.InvalidConfiguration("spec.credentialsSecretRef", "Secret %s/%s has no key %s (it has keys %s); required: %s",
				ref.Namespace, ref.Name, key, strings.Join(have, ", "), strings.Join(RequiredCredentials, ", "))
		}
	}
	return nil
}
