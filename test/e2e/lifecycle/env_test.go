// Package lifecycle tests the two controllers, run as separate processes under
// their own users and RBAC, against a real kube-apiserver: NodeSets become
// Nodes, Nodes become simulated machines, deleted Nodes are drained and
// deprovisioned.
package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/test/framework"
)

func TestMain(m *testing.M) {
	// kube-scheduler places pods on the simulated nodes in the autoscaler tests.
	os.Exit(framework.Run(m, framework.Options{Scheduler: true}))
}

// controllers are the two controller processes shared by the package's tests.
type controllers struct {
	*framework.Controllers
	nodeset, node *framework.Process
}

var (
	setupOnce sync.Once
	shared    *controllers
	setupErr  error
)

// startControllers builds and starts both controllers once for the package,
// and again whenever a test left one stopped.
func startControllers(t *testing.T) *controllers {
	t.Helper()
	cp := framework.Shared(t) // skips under -short, before the Once
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var c *framework.Controllers
		c, setupErr = framework.NewControllers(ctx, cp, framework.ControllerOptions{})
		if setupErr == nil {
			shared = &controllers{Controllers: c, nodeset: c.NodeSet, node: c.Node}
		}
	})
	require.NoError(t, setupErr)
	framework.FailOnCrash(t, shared.nodeset, shared.node)
	require.NoError(t, shared.Start())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, shared.WaitReady(ctx), "controllers ready")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nodeset-controller logs:\n%s", tail(shared.nodeset.Logs(), 60))
			t.Logf("node-controller logs:\n%s", tail(shared.node.Logs(), 60))
			for _, p := range []*framework.Process{shared.nodeset, shared.node} {
				file := filepath.Join(cp.Dir, "logs", p.Name+".log")
				if err := os.WriteFile(file, []byte(p.Logs()), 0o644); err == nil {
					t.Logf("%s's whole log: %s", p.Name, file)
				}
			}
		}
	})
	return shared
}

// restart kills a controller with sig and starts it again.
func (c *controllers) restart(t *testing.T, p *framework.Process, sig syscall.Signal) {
	t.Helper()
	p.Kill(sig)
	require.NoError(t, p.Start())
}

// machines lists the simulated machines the node controller runs.
func (c *controllers) machines(ctx context.Context) ([]framework.Machine, bool) {
	return c.Machines(ctx)
}

func clients(t *testing.T) (kubernetes.Interface, versioned.Interface) {
	t.Helper()
	cfg := framework.Shared(t).AdminConfig()
	return kubernetes.NewForConfigOrDie(cfg), versioned.NewForConfigOrDie(cfg)
}

// eventually polls cond every 200ms until it holds or timeout passes, and
// fails the test with the last reason cond gave.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		if ctx.Err() == nil && !strings.Contains(why, "context deadline") && !strings.Contains(why, "rate limiter") {
			last = why
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not true after %s; last: %s", what, timeout, last)
	}
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
