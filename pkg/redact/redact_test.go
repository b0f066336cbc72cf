package redact

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
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
