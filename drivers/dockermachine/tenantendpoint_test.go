package dockermachine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// softlayerClass is a class of rancher/machine's softlayer driver whose
// API key comes from the class's Secret, and which lets tenants set the
// options it leaves unset (tenantOverrides: options).
func softlayerClass() drivers.Class {
	return drivers.Class{Name: "softlayer", Spec: nodesetv1alpha1.NodeClassSpec{
		Driver: nodesetv1alpha1.DriverDockerMachine,
		DriverSections: nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{
			DriverName:        "softlayer",
			Options:           map[string]string{"softlayer-user": "platform", "softlayer-domain": "nodes.example.com"},
			CredentialOptions: map[string]string{"softlayer-api-key": "api-key"},
		}},
		TenantOverrides: []string{"options"},
	}, Credentials: map[string][]byte{"api-key": []byte("class-softlayer-api-key-4711")}}
}

// TestATenantCannotSendTheClassCredentialsElsewhere: rancher/machine's
// softlayer driver sends the class's API key, as HTTP basic auth, to
// whatever softlayer-api-endpoint says. Its name and usage ("softlayer api
// endpoint to use") speak of no file, path or URL, so judged by words a
// class that lets tenants set every option it leaves unset let a NodeSet
// point the endpoint at its own server and receive the key. Such a class is
// invalid, and so is one that lists the endpoint by name, and a Create with
// it sends nothing.
func TestATenantCannotSendTheClassCredentialsElsewhere(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var received []string
	tenantServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, key, _ := r.BasicAuth()
		mu.Lock()
		received = append(received, key)
		mu.Unlock()
		http.Error(w, `{"error":"no"}`, http.StatusInternalServerError)
	}))
	defer tenantServer.Close()

	tests := []struct {
		name      string
		overrides []string
		want      string
	}{
		{"every option the class leaves unset", []string{"options"},
			`spec.tenantOverrides[0]: "options" cannot be listed while the class leaves text options unset (`},
		{"the endpoint by name", []string{"options.softlayer-api-endpoint"},
			`spec.tenantOverrides[0]: "options.softlayer-api-endpoint" cannot be listed`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, store, _ := newDriver(t)
			class := softlayerClass()
			class.Spec.TenantOverrides = tt.overrides
			for _, err := range []error{d.Validate(ctx, drivers.Class{Name: class.Name, Spec: class.Spec}), d.ValidateCloud(ctx, class)} {
				if assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration, "the class is invalid") {
					assert.Contains(t, err.Error(), tt.want)
				}
			}

			// The effective spec of a NodeSet that sets the endpoint.
			class.Spec.DockerMachine.Options["softlayer-api-endpoint"] = tenantServer.URL
			name := "stolen-" + string(rune('a'+i))
			_, err := d.Create(ctx, drivers.Machine{Name: name, Class: class})
			assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
			mu.Lock()
			assert.Empty(t, received, "the tenant's server received the class's API key")
			mu.Unlock()
			assert.NotContains(t, store.records, name, "nothing is made")
		})
	}

	// The options that cannot name a place (softlayer-cpu,
	// softlayer-memory) stay the tenant's once the class sets, or lists
	// one by one, the text ones.
	d, _, _ := newDriver(t)
	class := softlayerClass()
	for option, value := range map[string]string{"softlayer-region": "fra02", "softlayer-image": "UBUNTU_24_64", "softlayer-api-endpoint": "https://api.softlayer.com/rest/v3"} {
		class.Spec.DockerMachine.Options[option] = value
	}
	class.Spec.TenantOverrides = []string{"options", "options.softlayer-hostname"}
	require.NoError(t, d.Validate(ctx, drivers.Class{Name: class.Name, Spec: class.Spec}))
	require.NoError(t, d.ValidateCloud(ctx, class))
}
