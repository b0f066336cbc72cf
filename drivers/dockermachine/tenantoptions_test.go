package dockermachine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

// TestTenantCannotPointThePluginAtTheControllersFiles: the plugin runs on
// the node controller's host, as the node controller, and reads the files
// its text options name (a user-data file, an SSH key) to send them to the
// machine. A tenant allowed to set such an option, or to say which option
// gets which key of the class's credentials, would make it read the node
// controller's service-account token or another class's key and ship it
// to the tenant's own machine. Such a class is invalid, and a Create with
// it makes nothing.
func TestTenantCannotPointThePluginAtTheControllersFiles(t *testing.T) {
	ctx := context.Background()
	d, _, _ := newDriver(t)
	secret := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(secret, []byte("node-controller-service-account-token"), 0o600))

	tests := []struct {
		name string
		// mutate makes the class, then the effective spec a tenant's
		// NodeSet resolves to.
		class, tenant func(*nodesetv1alpha1.NodeClassSpec)
		want          []string
	}{
		{"a user-data file named by the tenant",
			func(s *nodesetv1alpha1.NodeClassSpec) { s.TenantOverrides = []string{"options.fake-userdata"} },
			func(s *nodesetv1alpha1.NodeClassSpec) { s.DockerMachine.Options["fake-userdata"] = secret },
			[]string{`spec.tenantOverrides[0]: "options.fake-userdata"`, "file path or URL"}},
		{"an SSH key file named by the tenant",
			func(s *nodesetv1alpha1.NodeClassSpec) { s.TenantOverrides = []string{"options.fake-ssh-key"} },
			func(s *nodesetv1alpha1.NodeClassSpec) { s.DockerMachine.Options["fake-ssh-key"] = secret },
			[]string{`spec.tenantOverrides[0]: "options.fake-ssh-key"`, "file path or URL"}},
		{"a list of files named by the tenant",
			func(s *nodesetv1alpha1.NodeClassSpec) { s.TenantOverrides = []string{"options.fake-copy-files"} },
			func(s *nodesetv1alpha1.NodeClassSpec) { s.DockerMachine.Options["fake-copy-files"] = secret },
			[]string{`spec.tenantOverrides[0]: "options.fake-copy-files"`, "file path or URL"}},
		{"every option, and the class leaves a file option to the tenant",
			func(s *nodesetv1alpha1.NodeClassSpec) { s.TenantOverrides = []string{"options"} },
			func(s *nodesetv1alpha1.NodeClassSpec) { s.DockerMachine.Options["fake-userdata"] = secret },
			[]string{`spec.tenantOverrides[0]: "options"`, "fake-userdata", "fake-ssh-key"}},
		{"a switch that turns off TLS checking, named by the tenant",
			func(s *nodesetv1alpha1.NodeClassSpec) { s.TenantOverrides = []string{"options.fake-insecure"} },
			func(s *nodesetv1alpha1.NodeClassSpec) { s.DockerMachine.Options["fake-insecure"] = "true" },
			[]string{`spec.tenantOverrides[0]: "options.fake-insecure"`, "TLS"}},
		{"which option gets which credential",
			func(s *nodesetv1alpha1.NodeClassSpec) { s.TenantOverrides = []string{"credentialOptions"} },
			func(s *nodesetv1alpha1.NodeClassSpec) { s.DockerMachine.CredentialOptions["fake-tags"] = "token" },
			[]string{`spec.tenantOverrides[0]: "credentialOptions"`, "credentials"}},
		{"which file option gets which credential",
			func(s *nodesetv1alpha1.NodeClassSpec) {
				s.TenantOverrides = []string{"credentialFileOptions.fake-userdata"}
			},
			func(s *nodesetv1alpha1.NodeClassSpec) {
				s.DockerMachine.CredentialFileOptions = map[string]string{"fake-userdata": "token"}
			},
			[]string{`spec.tenantOverrides[0]: "credentialFileOptions.fake-userdata"`, "credentials"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			class := fakeClass(dir, nil)
			tt.class(&class.Spec)
			classSpec := *class.Spec.DeepCopy()
			tt.tenant(&class.Spec)
			name := "tenant-" + string(rune('a'+i))
			_, err := d.Create(ctx, drivers.Machine{Name: name, Class: class})
			machines, _ := fakeplugin.Machines(dir)
			for _, m := range machines {
				assert.NotContains(t, m.UserData, "service-account-token", "the machine got the node controller's file")
				assert.False(t, m.Insecure, "the machine was made with the cloud's TLS checking off")
				for _, data := range m.Files {
					assert.NotContains(t, data, "service-account-token", "the machine got the node controller's file")
				}
				assert.NotContains(t, m.Tags, "s3cret-token", "the machine got the class's credential")
			}
			kept, _ := os.ReadFile(filepath.Join(d.machineDir(name), "id_ed25519"))
			assert.NotContains(t, string(kept), "service-account-token", "the plugin copied the file to the machine's keys")
			assert.Empty(t, machines, "nothing is made")
			require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)

			class.Spec = classSpec
			for _, err := range []error{d.Validate(ctx, drivers.Class{Name: class.Name, Spec: class.Spec}), d.ValidateCloud(ctx, class)} {
				require.ErrorIs(t, err, drivers.ErrInvalidConfiguration, "the class is invalid")
				for _, want := range tt.want {
					assert.Contains(t, err.Error(), want)
				}
			}
		})
	}

	// The whole options map, while the class leaves unset a switch that
	// turns off the TLS checking of the plugin's connections (which carry
	// the class's credentials), is refused too, whatever text options the
	// class sets.
	class := fakeClass(t.TempDir(), map[string]string{"fake-userdata": "", "fake-ssh-key": "", "fake-outage": "", "fake-copy-files": "",
		"fake-ssh-host": "127.0.0.1"})
	class.Spec.TenantOverrides = []string{"options", "options.fake-tags", "options.fake-ssh-user"}
	for _, err := range []error{d.Validate(ctx, drivers.Class{Name: class.Name, Spec: class.Spec}), d.ValidateCloud(ctx, class)} {
		require.ErrorIs(t, err, drivers.ErrInvalidConfiguration, "the class is invalid")
		assert.Contains(t, err.Error(), `spec.tenantOverrides[0]: "options" cannot be listed while the class leaves unset options that may turn off the checking of the TLS connections`)
		assert.Contains(t, err.Error(), "(fake-insecure)")
	}
	class.Spec.DockerMachine.Options["fake-insecure"] = "false"
	require.NoError(t, d.Validate(ctx, drivers.Class{Name: class.Name, Spec: class.Spec}), "set by the class, the switch is not the tenant's")

	// Options that take no file stay the tenant's, and so do file options
	// the class sets itself, which a NodeSet cannot change without listing
	// them one by one. The whole options map needs every text option set
	// by the class or listed by name.
	dir := t.TempDir()
	class = fakeClass(dir, map[string]string{"fake-userdata": secret, "fake-ssh-key": secret, "fake-outage": filepath.Join(dir, "no-outage"), "fake-ssh-host": "127.0.0.1", "fake-copy-files": "",
		"fake-insecure": "false"})
	class.Spec.TenantOverrides = []string{"options", "options.fake-cpus", "options.fake-tags", "options.fake-ssh-user"}
	require.NoError(t, d.Validate(ctx, drivers.Class{Name: class.Name, Spec: class.Spec}))
	class = fakeClass(dir, map[string]string{"fake-cpus": "8"})
	class.Spec.TenantOverrides = []string{"options.fake-cpus", "options.fake-tags"}
	require.NoError(t, d.Validate(ctx, drivers.Class{Name: class.Name, Spec: class.Spec}))
	_, err := d.Create(ctx, drivers.Machine{Name: "shaped", Class: class})
	require.NoError(t, err)
	machines, err := fakeplugin.Machines(dir)
	require.NoError(t, err)
	assert.Equal(t, 8, machines["shaped"].CPUs)
	require.NoError(t, d.Delete(ctx, drivers.Class{}, "shaped"))
	assertNoPluginLeft(t)
}
