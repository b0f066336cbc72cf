package redact

import (
	"regexp"
	"strings"
)

// A shape is a credential recognised by its form alone: one nodeset never
// read, so in no Set (the controller's own AWS credentials from the SDK's
// default chain, a token a plugin got elsewhere, an admission webhook's
// echo of a request). replace gives the text of a match to put in its
// place, from the pattern's submatches.
type shape struct {
	pattern *regexp.Regexp
	replace func(sub []string) string
}

func fixed(replacement string) func([]string) string {
	return func([]string) string { return replacement }
}

// keyedValue keeps the key and its separator (sub[1]) and names the key in
// place of the value (sub[2]).
func keyedValue(sub []string) string {
	name := strings.ToLower(strings.Trim(sub[1], "-\\\"' \t:="))
	return sub[1] + "[redacted:" + name + "]"
}

// secretKey is a key that names a secret value: a password, a secret
// (access) key, a token, an API key, a private key.
const secretKey = `[A-Za-z0-9_.-]*(?:password|passwd|passphrase|secret|secret[-_]?(?:access[-_]?)?key|token|api[-_]?key|private[-_]?key)`

var shapes = []shape{
	// PEM private keys, whole or cut (to the end of the text), with real
	// or escaped ("\n") line breaks.
	{regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)`), fixed("[redacted:private-key]")},
	// AWS session tokens (STS, IRSA, instance profiles) begin with the
	// base64 of their own header.
	{regexp.MustCompile(`(?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdzE)[A-Za-z0-9+/]{16,}=*`), fixed("[redacted:aws-session-token]")},
	// JSON Web Tokens (service account tokens, OIDC): three base64url
	// parts, the first two JSON objects.
	{regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{8,}`), fixed("[redacted:jwt]")},
	// AWS access key ids, long-term (AKIA) and temporary (ASIA).
	{regexp.MustCompile(`\b(?:AKIA|ASIA)[A-Z0-9]{16}\b`), fixed("[redacted:aws-access-key-id]")},
	// An HTTP Authorization header's credentials.
	{regexp.MustCompile(`(?i)(\b(?:bearer|basic)\s+)([A-Za-z0-9._~+/-]{16,}=*)`), func(sub []string) string { return sub[1] + "[redacted:authorization]" }},
	// A password in a URL's userinfo.
	{regexp.MustCompile(`(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)([^\s/@]+)@`), func(sub []string) string { return sub[1] + "[redacted:url-password]@" }},
	// The value of a key that names a secret: key=value, key: value, JSON
	// ("key":"value", also inside a quoted string: \"key\":\"value\"),
	// a flag (--amazonec2-secret-key=value).
	{regexp.MustCompile(`(?i)((?:--)?\b` + secretKey + `(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?)([^\s"'\\&,;<>]{6,})`), keyedValue},
	// A flag that names a secret and its value as the next argument
	// (--openstack-password value).
	{regexp.MustCompile(`(?i)(--` + secretKey + `[ \t]+)([^\s"'\\&,;<>-][^\s"'\\&,;<>]{5,})`), keyedValue},
}

// Shapes is text without what has the form of a credential (an AWS access
// key id or session token, a JSON Web Token, an Authorization header's
// token, a PEM private key, a URL's password, the value of a key or flag
// that names a password, secret or token). A value already redacted stays
// as it is.
func Shapes(text string) string {
	for _, s := range shapes {
		text = s.pattern.ReplaceAllStringFunc(text, func(m string) string {
			sub := s.pattern.FindStringSubmatch(m)
			if len(sub) > 2 && strings.HasPrefix(sub[2], "[redacted") || len(sub) <= 2 && strings.Contains(m, "[redacted:") {
				return m
			}
			return s.replace(sub)
		})
	}
	return text
}

// ShapesOf is err with Shapes applied to its message; nil for nil. It is
// still the sentinel errors err wraps (errors.Is), and does not unwrap to
// err.
func ShapesOf(err error) error {
	if err == nil {
		return nil
	}
	msg := Shapes(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, cause: err}
}
