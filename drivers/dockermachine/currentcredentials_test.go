package dockermachine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

// TestOnlyTheMachineClassAndPluginHandItsCurrentCredentials: a machine
// made with a token that is then rotated and revoked (the fake plugin's
// cloud refuses it) is asked about and removed with the current token of
// the class it was made with, through the environment variable fake-token
// declares; a class of another name, or one whose plugin is another, hands
// it nothing even though it names fake-token among its credentials: the
// plugin goes on with the token it saved, and the cloud refuses it.
func TestOnlyTheMachineClassAndPluginHandItsCurrentCredentials(t *testing.T) {
	const rotated = "r0tated-token"
	tests := []struct {
		name string
		// class is the class made with, changed as it is when asked.
		class func(drivers.Class) drivers.Class
		// current: the plugin is handed the rotated token.
		current bool
	}{
		{"the class the machine was made with", func(c drivers.Class) drivers.Class { return c }, true},
		{"a class of another name", func(c drivers.Class) drivers.Class { c.Name = "dm-other"; return c }, false},
		{"a class of another plugin", func(c drivers.Class) drivers.Class {
			dm := *c.Spec.DockerMachine
			dm.DriverName = "generic"
			c.Spec.DockerMachine = &dm
			return c
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			d, store, _ := newDriver(t)
			dir := t.TempDir()
			class := fakeClass(dir, nil)
			_, err := d.Create(ctx, drivers.Machine{Name: "web-rotated", Class: class})
			require.NoError(t, err)
			list, err := d.List(ctx)
			require.NoError(t, err)
			require.Len(t, list, 1)
			assert.Equal(t, class.Name, list[0].Class, "orphan collection learns the class the machine was made with")

			class.Credentials = map[string][]byte{"token": []byte(rotated)}
			require.NoError(t, os.WriteFile(filepath.Join(dir, fakeplugin.RevokedFile), []byte("s3cret-token\n"), 0o600))
			asked := tt.class(class)

			status, getErr := d.Get(ctx, asked, "web-rotated")
			deleteErr := d.Delete(ctx, asked, "web-rotated")
			machines, err := fakeplugin.MachineNames(dir)
			require.NoError(t, err)
			calls, err := fakeplugin.Calls(dir)
			require.NoError(t, err)
			if tt.current {
				require.NoError(t, getErr, "the state is asked with the class's current token")
				assert.Equal(t, drivers.MachineRunning, status.State)
				require.NoError(t, deleteErr, "the machine is removed with the class's current token")
				assert.Empty(t, machines)
				assert.Empty(t, store.records)
				require.Len(t, calls, 2)
				assert.Equal(t, "remove", calls[1].Op)
				assert.Equal(t, rotated, calls[1].Token, "the plugin removed it with the token the class has now")
			} else {
				require.Error(t, getErr, "the plugin asked with the token it saved, which is refused")
				assert.Contains(t, getErr.Error(), "AuthFailure")
				require.Error(t, deleteErr, "the plugin removes with the token it saved, which is refused")
				assert.Contains(t, deleteErr.Error(), "AuthFailure")
				assert.NotContains(t, deleteErr.Error(), rotated)
				assert.Equal(t, []string{"web-rotated"}, machines, "the machine is still there")
				assert.Contains(t, store.records, "web-rotated", "and so is its record")
				require.Len(t, calls, 1, "no remove went through")
			}
			assertNoPluginLeft(t)
		})
	}
}
