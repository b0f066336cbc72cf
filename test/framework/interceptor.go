package framework

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
)

// Intercept answers an AWS query-protocol request itself and returns true,
// or returns false to let it go on upstream. body is the request's body
// (already read; the request's Body reads it again) and form its parsed
// query parameters (Action, and the operation's own).
type Intercept func(w http.ResponseWriter, r *http.Request, body []byte, form url.Values) bool

// StartInterceptor starts a proxy to upstream (moto) on a loopback port,
// stopped with the test, that hands each request to intercept first. It
// returns the proxy's URL.
func StartInterceptor(t testing.TB, upstream string, intercept Intercept) string {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		if !intercept(w, r, body, form) {
			forward.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(server.Close)
	return server.URL
}
