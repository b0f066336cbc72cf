package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"html"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const pemKey = `-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACDuZf1Jb4pO2wqXwUqaXzPxyWk3nX1ARbPUn6vWqWh1ZwAAAJgL2Y7dC9mO
-----END OPENSSH PRIVATE KEY-----
`

var errSentinel = errors.New("sentinel")

func TestSet(t *testing.T) {
	creds := map[string][]byte{"ssh-private-key": []byte(pemKey), "token": []byte("tok-3141592653"), "short": []byte("ab")}
	jsonKey, _ := json.Marshal(pemKey)
	lines := strings.Split(strings.TrimSpace(pemKey), "\n")
	for _, tc := range []struct {
		name, text, want string
	}{
		{"as is", "token tok-3141592653 refused", "token [redacted:token] refused"},
		{"quoted", fmt.Sprintf("SSH key does not exist: %q", pemKey), `SSH key does not exist: "[redacted:ssh-private-key]"`},
		{"json", `{"SSHKey":` + string(jsonKey) + `}`, `{"SSHKey":"[redacted:ssh-private-key]"}`},
		{"raw", "key:\n" + pemKey + "end", "key:\n[redacted:ssh-private-key]end"},
		{"one line", "bad line " + lines[1], "bad line [redacted:ssh-private-key]"},
		{"base64", "config " + base64.StdEncoding.EncodeToString([]byte("tok-3141592653")), "config [redacted:token]"},
		{"short values are kept", "ab cd", "ab cd"},
		{"nothing", "all fine", "all fine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := New(creds).String(tc.text)
			assert.Equal(t, tc.want, got)
			for _, line := range lines[1 : len(lines)-1] {
				assert.NotContains(t, got, line)
			}
		})
	}
}

func TestError(t *testing.T) {
	creds := map[string][]byte{"token": []byte("tok-3141592653")}
	err := fmt.Errorf("plugin: %w: token tok-3141592653 is bad", errSentinel)
	got := Error(creds, err)
	assert.Equal(t, "plugin: sentinel: token [redacted:token] is bad", got.Error())
	assert.ErrorIs(t, got, errSentinel)
	assert.Nil(t, errors.Unwrap(got), "the original message is not reachable")
	clean := errors.New("fine")
	assert.Same(t, clean, Error(creds, clean), "an error without a value is kept as it is")
	assert.NoError(t, Error(creds, nil))
}

func TestSetGrows(t *testing.T) {
	var s Set
	assert.Equal(t, "a secret-one", s.String("a secret-one"))
	s.Add(map[string][]byte{"k": []byte("secret-one")})
	s.Add(map[string][]byte{"k": []byte("secret-two")})
	assert.Equal(t, "[redacted:k] [redacted:k]", s.String("secret-one secret-two"))
	var nilSet *Set
	assert.Equal(t, "x", nilSet.String("x"))
}

// TestURLEncoded: a credential that a plugin or cloud SDK put in a URL
// (a query string, a path, userinfo) and quoted in an error (Go's
// url.Error prints the URL) is escaped there.
func TestURLEncoded(t *testing.T) {
	const secret = "wJalrXUtnFEMI/K7MDENG+bPxRfi:CY@EXAMPLE=KEY"
	creds := map[string][]byte{"aws-secret-access-key": []byte(secret)}
	query := url.Values{"secret": {secret}}.Encode()
	userinfo := (&url.URL{Scheme: "https", User: url.UserPassword("admin", secret), Host: "vcenter.example.com", Path: "/sdk"}).String()
	path := (&url.URL{Scheme: "https", Host: "api.example.com", Path: "/v1/tokens/" + secret}).String()
	for name, text := range map[string]string{
		"query":    `Get "https://api.example.com/v1?` + query + `": dial tcp: i/o timeout`,
		"userinfo": `Post "` + userinfo + `": EOF`,
		"path":     `Get "` + path + `": 403 Forbidden`,
	} {
		t.Run(name, func(t *testing.T) {
			got := New(creds).String(text)
			assert.Contains(t, got, "[redacted:aws-secret-access-key]")
			for _, part := range []string{"wJalrXUtnFEMI", "K7MDENG", "bPxRfi", "EXAMPLE"} {
				assert.NotContains(t, got, part, got)
			}
		})
	}
}

// TestBase64Inside: a credential base64-encoded with other text around it
// (an HTTP Basic Authorization header in a plugin's debug dump of a
// request, a base64 config blob) is found at any offset, padded or not.
func TestBase64Inside(t *testing.T) {
	const password = "Pl4nted-vCenter-Passw0rd"
	creds := map[string][]byte{"password": []byte(password)}
	for _, user := range []string{"a", "ab", "abc"} { // each offset of the value in its 3-byte groups
		for name, enc := range map[string]*base64.Encoding{"std": base64.StdEncoding, "raw std": base64.RawStdEncoding, "raw url": base64.RawURLEncoding} {
			blob := enc.EncodeToString([]byte(user + ":" + password + "\n"))
			got := New(creds).String("> Authorization: Basic " + blob)
			assert.Contains(t, got, "[redacted:password]", "%s, user %q: %s", name, user, got)
			rest := strings.TrimPrefix(got, "> Authorization: Basic ")
			other := len(user) + 2 // ":" and "\n"
			assert.LessOrEqual(t, len(rest)-len("[redacted:password]"), other*8/6+2+2,
				"what is left encodes the other bytes, a character at each edge and the padding: %s", got)
		}
	}
}

// TestCut: text over the limit is cut on a character boundary, says so,
// and fits the limit; text within it is whole.
func TestCut(t *testing.T) {
	assert.Equal(t, "short", Cut("short", 10))
	for _, text := range []string{strings.Repeat("x", 100), strings.Repeat("é", 100), "x" + strings.Repeat("𝄞", 50)} {
		got := Cut(text, 40)
		assert.LessOrEqual(t, len(got), 40)
		assert.True(t, utf8.ValidString(got), got)
		assert.True(t, strings.HasSuffix(got, " ... (cut)"), got)
		assert.True(t, strings.HasPrefix(text, strings.TrimSuffix(got, " ... (cut)")), got)
	}
}

// TestBase64OfTrimmedValue: a Secret made from a file holds the value with
// the file's final newline, and what uses it often takes it without (the
// AWS drivers trim every key, a plugin trims its flag). The value without
// its white space, base64-encoded alone or with other text around it (an
// HTTP Basic Authorization header in a plugin's debug dump), is found too.
func TestBase64OfTrimmedValue(t *testing.T) {
	const password = "Pl4nted-vCenter-Passw0rd"
	creds := map[string][]byte{"password": []byte(password + "\n")}
	for _, user := range []string{"", "a:", "ab:", "abc:"} { // each offset of the value in its 3-byte groups
		for name, enc := range map[string]*base64.Encoding{"std": base64.StdEncoding, "raw std": base64.RawStdEncoding, "raw url": base64.RawURLEncoding} {
			blob := enc.EncodeToString([]byte(user + password))
			got := New(creds).String("> Authorization: Basic " + blob)
			assert.Contains(t, got, "[redacted:password]", "%s, user %q: %s", name, user, got)
			for _, needle := range base64Inside(password) {
				assert.False(t, strings.Contains(got, needle), "%s, user %q: %s", name, user, got)
			}
		}
	}
}

// TestMarkupEscaped: a credential quoted in XML (the body of a SOAP login a
// plugin dumps at its debug level) or in an HTML error page is escaped
// there: & < > ' " as entities.
func TestMarkupEscaped(t *testing.T) {
	const password = `Tr0ub4dor&3<x>"q'`
	creds := map[string][]byte{"password": []byte(password)}
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(password))
	for name, text := range map[string]string{
		"xml":  "<Login><userName>admin</userName><password>" + b.String() + "</password></Login>",
		"html": "<p>Bad password " + html.EscapeString(password) + "</p>",
	} {
		got := New(creds).String(text)
		assert.Contains(t, got, "[redacted:password]", "%s: %s", name, got)
		assert.NotContains(t, got, "Tr0ub4dor", "%s: %s", name, got)
	}
}

// TestHexDumped: a credential in a byte dump (a request body a plugin
// prints with %x or %X at its debug level), as stored and without the
// Secret file's final newline.
func TestHexDumped(t *testing.T) {
	const secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	creds := map[string][]byte{"secret": []byte(secret + "\n")}
	for name, text := range map[string]string{
		"lower":         fmt.Sprintf("body=%x", secret),
		"upper":         fmt.Sprintf("body=%X;", secret),
		"with newline":  fmt.Sprintf("body=%x", secret+"\n"),
		"inside a line": fmt.Sprintf("POST / 7b22%x227d", secret),
	} {
		got := New(creds).String(text)
		assert.Contains(t, got, "[redacted:secret]", "%s: %s", name, got)
		assert.NotContains(t, got, fmt.Sprintf("%x", secret[:8]), "%s: %s", name, got)
		assert.NotContains(t, got, fmt.Sprintf("%X", secret[:8]), "%s: %s", name, got)
	}
}

// A value with quotes or backslashes in it, in an error quoted inside
// another error or a JSON document inside a JSON string.
func TestDoublyQuoted(t *testing.T) {
	const secret = `pa"ss\word-0123`
	creds := map[string][]byte{"password": []byte(secret)}
	inner := fmt.Errorf("login %q refused", secret)
	doc, err := json.Marshal(map[string]string{"password": secret})
	require.NoError(t, err)
	wrapped, err := json.Marshal(map[string]string{"body": string(doc)})
	require.NoError(t, err)
	for name, text := range map[string]string{
		"%q of %q":          fmt.Sprintf("plugin said %q", inner.Error()),
		"JSON in JSON":      string(wrapped),
		"%q of a JSON body": fmt.Sprintf("request %q failed", string(doc)),
		"JSON of %q":        fmt.Sprintf(`{"error":%s}`, mustJSON(t, inner.Error())),
	} {
		got := New(creds).String(text)
		assert.Contains(t, got, "[redacted:password]", "%s: %s", name, got)
		assert.NotContains(t, got, "word-0123", "%s: %s", name, got)
	}
}

func mustJSON(t *testing.T, v string) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
