package component

import (
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestOwnConnection: clients of the same settings share one HTTP/2
// connection (client-go's transport cache), and a client made from
// OwnConnection's config reads on one of its own, as the informers' must.
func TestOwnConnection(t *testing.T) {
	var connections atomic.Int32
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	server.EnableHTTP2 = true
	server.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			connections.Add(1)
		}
	}
	server.StartTLS()
	defer server.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})
	cfg := &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
	get := func(c clientSet) {
		_, err := c.Kube.CoreV1().Nodes().Get(context.Background(), "x", metav1.GetOptions{})
		require.Error(t, err, "the test server answers 404")
	}

	first, err := newClients(cfg)
	require.NoError(t, err)
	second, err := newClients(cfg)
	require.NoError(t, err)
	get(first)
	get(second)
	assert.Equal(t, int32(1), connections.Load(), "clients of the same settings share a connection")

	own, err := newClients(OwnConnection(cfg))
	require.NoError(t, err)
	get(own)
	get(own)
	assert.Equal(t, int32(2), connections.Load(), "a client of OwnConnection's config opens one of its own, once")
	get(first)
	assert.Equal(t, int32(2), connections.Load())
}
