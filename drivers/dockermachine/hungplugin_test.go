package dockermachine

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

// returnsWithin runs call in the background and waits, bounded, for it to
// return.
func returnsWithin(t *testing.T, limit time.Duration, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("the call did not return within %s: a hung plugin blocks it", limit)
		return nil
	}
}

// TestAHungPluginCallIsBounded: a plugin that never answers (its cloud's
// API hangs) in GetCreateFlags, GetState, Remove or PreCreateCheck holds
// the call for its limit only: the plugin's process group is killed, the
// call fails with a retryable error (not an invalid class), the machine's
// record stays (a machine whose plugin did not answer is not gone), and
// the next call, with the plugin answering again, succeeds.
func TestAHungPluginCallIsBounded(t *testing.T) {
	ctx := context.Background()
	storePath := t.TempDir()
	store, joiner := newMemStore(), &fakeJoiner{}
	bounded := func() *Driver {
		return New(Options{Store: store, Joiner: joiner, StorePath: storePath,
			FlagsTimeout: time.Second, StateTimeout: time.Second, RemoveTimeout: 2 * time.Second})
	}
	d := bounded()
	dir := t.TempDir()
	class := fakeClass(dir, nil)
	_, err := d.Create(ctx, drivers.Machine{Name: "m1", Class: class})
	require.NoError(t, err)
	quick := fakeClass(dir, nil)
	quick.Spec.RegistrationTimeout = &metav1.Duration{Duration: 2 * time.Second}
	goroutines := runtime.NumGoroutine()

	tests := []struct {
		name string
		hang string
		call func() error
	}{
		// A driver of its own: the flags are asked only once per binary.
		{"flags, validating the class", fakeplugin.HangFlags, func() error { return bounded().Validate(ctx, class) }},
		{"state", fakeplugin.HangState, func() error { _, err := d.Get(ctx, class, "m1"); return err }},
		{"remove", fakeplugin.HangRemove, func() error { return d.Delete(ctx, class, "m1") }},
		{"pre-create check, at the registration timeout", fakeplugin.HangPreCreateCheck, func() error {
			_, err := d.Create(ctx, drivers.Machine{Name: "m2", Class: quick})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			trigger := filepath.Join(storePath, tt.hang)
			require.NoError(t, os.WriteFile(trigger, nil, 0o600))
			defer os.Remove(trigger + ".hung") //nolint:errcheck // the next case's evidence starts afresh
			defer os.Remove(trigger)           //nolint:errcheck // the plugin answers again
			err := returnsWithin(t, time.Minute, tt.call)
			require.Error(t, err)
			assert.FileExists(t, trigger+".hung", "the plugin hung in the call")
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.NotErrorIs(t, err, drivers.ErrInvalidConfiguration, "a plugin that did not answer says nothing of the class")
			assert.Contains(t, err.Error(), "docker-machine-driver-fake")
			assertNoPluginLeft(t)
			assert.Contains(t, store.records, "m1", "the machine's record stays")
			assert.NotContains(t, store.records, "m2")
			machines, err := fakeplugin.Machines(dir)
			require.NoError(t, err)
			assert.Contains(t, machines, "m1")
		})
	}

	require.NoError(t, bounded().Validate(ctx, class), "the plugin answers again")
	status, err := d.Get(ctx, class, "m1")
	require.NoError(t, err)
	assert.Equal(t, drivers.MachineRunning, status.State)
	require.NoError(t, d.Delete(ctx, class, "m1"))
	assert.Empty(t, store.records)
	assertNothingLeaks(t, goroutines)
}

// TestPluginsGetAMinimalEnvironment: a plugin does not inherit the node
// controller's identity. A cloud plugin given no credential option (an
// amazonec2 class without amazonec2-access-key) would otherwise use the
// credentials its SDK finds in the environment: the node controller's
// AWS variables, its web identity token (IRSA, EKS Pod Identity), which
// carry the permissions of the EKS drivers, or the Kubernetes service
// variables of its Pod. HOME is the store path, so no credential file of
// the node controller's home is found either; PATH and the proxy
// variables pass.
func TestPluginsGetAMinimalEnvironment(t *testing.T) {
	ctx := context.Background()
	controllers := map[string]string{
		"AWS_ACCESS_KEY_ID":                      "AKIAPLANTED0000000000",
		"AWS_SECRET_ACCESS_KEY":                  "planted-secret",
		"AWS_SESSION_TOKEN":                      "planted-session",
		"AWS_PROFILE":                            "node-controller",
		"AWS_ROLE_ARN":                           "arn:aws:iam::111122223333:role/nodeset-node-controller",
		"AWS_WEB_IDENTITY_TOKEN_FILE":            "/var/run/secrets/eks.amazonaws.com/serviceaccount/token",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI":     "http://169.254.170.23/v1/credentials",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token",
		"KUBERNETES_SERVICE_HOST":                "10.96.0.1",
		"KUBERNETES_SERVICE_PORT":                "443",
		"GOOGLE_APPLICATION_CREDENTIALS":         "/etc/node-controller/gcp.json",
	}
	for k, v := range controllers {
		t.Setenv(k, v)
	}
	t.Setenv("HOME", "/home/node-controller")
	t.Setenv("HTTPS_PROXY", "http://proxy.example:3128")
	t.Setenv("NO_PROXY", "10.0.0.0/8")
	d, _, _ := newDriver(t)
	envFile := filepath.Join(d.storePath, fakeplugin.EnvFile)
	require.NoError(t, os.WriteFile(envFile, nil, 0o600))
	require.NoError(t, d.Validate(ctx, fakeClass(t.TempDir(), nil)))
	data, err := os.ReadFile(envFile)
	require.NoError(t, err)
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	require.NotEmpty(t, env["MACHINE_PLUGIN_TOKEN"], "the plugin's environment was reported")
	for k, v := range env {
		_, planted := controllers[k]
		assert.False(t, planted || strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "KUBERNETES_"),
			"the node controller's %s=%s reaches the plugin", k, v)
	}
	assert.Equal(t, d.storePath, env["HOME"], "HOME is the plugins' store path")
	assert.Equal(t, os.Getenv("PATH"), env["PATH"])
	assert.Equal(t, "http://proxy.example:3128", env["HTTPS_PROXY"])
	assert.Equal(t, "10.0.0.0/8", env["NO_PROXY"])
	assert.Equal(t, fakeplugin.Name, env["MACHINE_PLUGIN_DRIVER_NAME"])
	assertNoPluginLeft(t)
}

// TestAPluginThatNeverAnswersAtItsAddressIsBounded: a plugin that prints
// the address it listens on and then never answers there (stuck before it
// serves: the connection is accepted by the kernel, the RPC handshake gets
// no answer) holds the call for its limit only, and its process goes.
func TestAPluginThatNeverAnswersAtItsAddressIsBounded(t *testing.T) {
	ctx := context.Background()
	listener, err := net.Listen("tcp", "127.0.0.1:0") // never accepts: connections wait in its backlog
	require.NoError(t, err)
	defer listener.Close() //nolint:errcheck // a test listener
	pidFile := filepath.Join(t.TempDir(), "pid")
	installPlugin(t, "mute", fmt.Sprintf("#!/bin/sh\necho $$ > %s\necho %s\nexec sleep 600\n", pidFile, listener.Addr()))
	d := New(Options{Store: newMemStore(), Joiner: &fakeJoiner{}, StorePath: t.TempDir(), FlagsTimeout: 2 * time.Second})
	class := fakeClass(t.TempDir(), nil)
	class.Spec.DockerMachine.DriverName = "mute"
	goroutines := runtime.NumGoroutine()

	err = returnsWithin(t, time.Minute, func() error { return d.Validate(ctx, class) })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "docker-machine-driver-mute")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, drivers.ErrInvalidConfiguration, "a plugin that did not answer says nothing of the class")
	data, err := os.ReadFile(pidFile)
	require.NoError(t, err, "the plugin ran")
	pid := strings.TrimSpace(string(data))
	assert.Eventually(t, func() bool {
		_, err := os.Stat("/proc/" + pid)
		return os.IsNotExist(err)
	}, 10*time.Second, 50*time.Millisecond, "the plugin process is killed and waited for")
	assertNothingLeaks(t, goroutines)
}
