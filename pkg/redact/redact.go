// Package redact removes credential values from text that comes back from
// plugins and clouds (errors, plugin output, saved configurations), before
// anything stores, logs or shows it.
//
// A plugin or a cloud may quote any value it was given, in any of the ways
// Go programs print strings: as is, quoted (%q, JSON; once, or twice when a
// quoted error is quoted again), URL-escaped (in a
// query string, a path or userinfo), base64-encoded (alone or inside a
// longer encoded text), or a line at a time. A Set replaces every credential value in each of these
// forms, and each line of a multi-line value (a PEM key), with
// [redacted:<key>], naming the credentials Secret key it came from.
//
// Shapes replaces what has the form of a credential, whoever's it is; the
// places text from outside is stored, logged or shown apply it last, after
// every Set, so a value a Set knows keeps its name.
package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"html"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

const (
	// MinValue is the length below which a whole value is not looked for:
	// replacing every "1" or "ab" in a message would make it unreadable, and
	// such a value protects nothing.
	MinValue = 4
	// MinLine is the length below which a line of a multi-line value is not
	// looked for on its own (blank lines, braces of a JSON document).
	MinLine = 8
)

// Set is a set of credential values to remove from text. The zero value is
// empty and ready; a Set is safe for concurrent use and only grows.
type Set struct {
	mu       sync.RWMutex
	needles  map[string]string // text to find → its replacement
	replacer *strings.Replacer
}

// New returns a Set of the values of credentials (a Secret's data).
func New(credentials map[string][]byte) *Set {
	s := &Set{}
	s.Add(credentials)
	return s
}

// Add adds the values of credentials, keyed by the name shown in their place.
func (s *Set) Add(credentials map[string][]byte) {
	if len(credentials) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.needles == nil {
		s.needles = map[string]string{}
	}
	added := false
	for key, value := range credentials {
		for _, needle := range forms(string(value)) {
			if _, ok := s.needles[needle]; !ok {
				s.needles[needle] = "[redacted:" + key + "]"
				added = true
			}
		}
	}
	if added {
		s.replacer = newReplacer(s.needles)
	}
}

// forms are the texts a value may appear as.
func forms(value string) []string {
	var out []string
	add := func(v string, min int) {
		if len(strings.TrimSpace(v)) < min {
			return
		}
		out = append(out, v)
		// Quoted once (%q, a JSON string) and twice (an error quoted
		// inside another, a JSON document inside a JSON string).
		for _, q := range quoted(v) {
			if !slices.Contains(out, q) {
				out = append(out, q)
			}
			for _, qq := range quoted(q) {
				if !slices.Contains(out, qq) {
					out = append(out, qq)
				}
			}
		}
		// In a URL: a query string, a path segment, userinfo.
		userinfo := strings.TrimPrefix(url.UserPassword("", v).String(), ":")
		// In markup: an XML body (a SOAP request a plugin dumps), an HTML
		// error page; quotes as numeric or named entities.
		var x bytes.Buffer
		_ = xml.EscapeText(&x, []byte(v))
		named := strings.NewReplacer("&#34;", "&quot;", "&#39;", "&apos;").Replace(html.EscapeString(v))
		for _, escaped := range []string{url.QueryEscape(v), url.PathEscape(v), userinfo, html.EscapeString(v), x.String(), named} {
			if escaped != v && !slices.Contains(out, escaped) {
				out = append(out, escaped)
			}
		}
	}
	add(value, MinValue)
	trimmed := strings.TrimSpace(value)
	if trimmed != value {
		add(trimmed, MinValue)
	}
	if len(trimmed) >= MinValue {
		// The value as it is and without its white space (a file's final
		// newline, which what uses the value often drops before encoding
		// it), in base64 and in hex (a byte dump, in either case).
		for _, v := range []string{value, trimmed} {
			hexed := hex.EncodeToString([]byte(v))
			encoded := []string{base64.StdEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v)), hexed, strings.ToUpper(hexed)}
			for _, encoded := range append(encoded, base64Inside(v)...) {
				if !slices.Contains(out, encoded) {
					out = append(out, encoded)
				}
			}
		}
	}
	if strings.ContainsAny(value, "\r\n") {
		for _, line := range strings.FieldsFunc(value, func(r rune) bool { return r == '\n' || r == '\r' }) {
			add(strings.TrimSpace(line), MinLine)
		}
	}
	return out
}

// quoted are the texts v is, inside the quotes, as a Go quoted string and
// as a JSON string, where either differs from v.
func quoted(v string) []string {
	var out []string
	if q := strconv.Quote(v); q[1:len(q)-1] != v {
		out = append(out, q[1:len(q)-1])
	}
	if j, err := json.Marshal(v); err == nil && string(j[1:len(j)-1]) != v && !slices.Contains(out, string(j[1:len(j)-1])) {
		out = append(out, string(j[1:len(j)-1]))
	}
	return out
}

// base64Inside are the texts a value is base64-encoded as when other bytes
// come before and after it (user:password in an HTTP Basic Authorization
// header, a field of an encoded document): for each of its 3 possible
// offsets in the 3-byte groups, the characters that only its own bytes
// determine, in the standard and the URL alphabet.
func base64Inside(value string) []string {
	urlAlphabet := strings.NewReplacer("+", "-", "/", "_")
	var out []string
	for offset := range 3 {
		encoded := base64.StdEncoding.EncodeToString(append(make([]byte, offset), value...))
		inner := encoded[(offset*8+5)/6 : (offset+len(value))*8/6]
		if len(inner) < MinLine {
			continue
		}
		out = append(out, inner)
		if u := urlAlphabet.Replace(inner); u != inner {
			out = append(out, u)
		}
	}
	return out
}

// newReplacer replaces the longest needle first where several start at the
// same place, so a whole value wins over its first line.
func newReplacer(needles map[string]string) *strings.Replacer {
	keys := make([]string, 0, len(needles))
	for k := range needles {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) > len(keys[j])
		}
		return keys[i] < keys[j]
	})
	pairs := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		pairs = append(pairs, k, needles[k])
	}
	return strings.NewReplacer(pairs...)
}

// String is text without any value of the set.
func (s *Set) String(text string) string {
	if s == nil {
		return text
	}
	s.mu.RLock()
	r := s.replacer
	s.mu.RUnlock()
	if r == nil {
		return text
	}
	// A replacement can join the halves of a value around another one;
	// a few more passes remove what that makes.
	for range 4 {
		next := r.Replace(text)
		if next == text {
			break
		}
		text = next
	}
	return text
}

// Error is err with its message redacted; nil for nil. It is still the
// sentinel errors err wraps (errors.Is), but it does not unwrap to err, so
// the original message cannot be reached through it.
func (s *Set) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := s.String(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, cause: err}
}

// Error is err without any value of credentials.
func Error(credentials map[string][]byte, err error) error {
	if err == nil || len(credentials) == 0 {
		return err
	}
	return New(credentials).Error(err)
}

// String is text without any value of credentials.
func String(credentials map[string][]byte, text string) string {
	if len(credentials) == 0 {
		return text
	}
	return New(credentials).String(text)
}

type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }

// Is keeps the sentinels of the original error.
func (e *redactedError) Is(target error) bool { return errors.Is(e.cause, target) }

// Cut is text, or, when it is longer than limit bytes, its beginning cut at
// a character boundary and marked " ... (cut)", limit bytes in all. Text
// from outside (a tenant's value, a plugin's or a cloud's error page) may
// be of any length; what stores or shows it has a bound. Scrub before
// cutting, so that the cut leaves no part of a value behind.
func Cut(text string, limit int) string {
	if len(text) <= limit {
		return text
	}
	const mark = " ... (cut)"
	end := max(limit-len(mark), 0)
	for end > 0 && !utf8.RuneStart(text[end]) {
		end--
	}
	return text[:end] + mark
}
