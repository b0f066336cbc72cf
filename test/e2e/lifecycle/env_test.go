// Package lifecycle tests the two controllers, run as separate processes under
// their own users and RBAC, against a real kube-apiserver: NodeSets become
// Nodes, Nodes become simulated machines, deleted Nodes are drained and
// deprovisioned.
package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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
	os.Exit(framework.Run(m, framework.Options{}))
}

// controllers are the two controller processes shared by the package's tests.
type controllers struct {
	nodeset    *framework.Process
	node       *framework.Process
	healthPort int
}

var (
	setupOnce sync.Once
	shared    *controllers
	setupErr  error
)

// startControllers builds and starts both controllers once for the package.
func startControllers(t *testing.T) *controllers {
	t.Helper()
	setupOnce.Do(func() { shared, setupErr = setup() })
	require.NoError(t, setupErr)
	for _, p := range []*framework.Process{shared.nodeset, shared.node} {
		if !p.Running() {
			require.NoError(t, p.Start())
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nodeset-controller logs:\n%s", tail(shared.nodeset.Logs(), 60))
			t.Logf("node-controller logs:\n%s", tail(shared.node.Logs(), 60))
		}
	})
	return shared
}

func setup() (*controllers, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cp := framework.Shared
	if err := framework.InstallRBAC(ctx, cp); err != nil {
		return nil, err
	}
	bins, err := framework.BuildCommands(ctx, filepath.Join(cp.Dir, "bin"), "./cmd/nodeset-controller", "./cmd/node-controller")
	if err != nil {
		return nil, err
	}
	nodesetKubeconfig, err := cp.WriteKubeconfig("nodeset-controller")
	if err != nil {
		return nil, err
	}
	nodeKubeconfig, err := cp.WriteKubeconfig("node-controller")
	if err != nil {
		return nil, err
	}
	ports := make([]int, 4)
	for i := range ports {
		if ports[i], err = framework.FreePort(); err != nil {
			return nil, err
		}
	}
	c := &controllers{healthPort: ports[3]}
	c.nodeset = &framework.Process{Name: "nodeset-controller", Path: bins["nodeset-controller"], Args: []string{
		"--kubeconfig=" + nodesetKubeconfig,
		"--leader-elect=true",
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
		"--workers=4", "-v=2",
	}}
	c.node = &framework.Process{Name: "node-controller", Path: bins["node-controller"], Args: []string{
		"--kubeconfig=" + nodeKubeconfig,
		"--drivers=simulated",
		"--leader-elect=true",
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[2]),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[3]),
		"--simulated-lease-renew-interval=2s",
		"--workers=8", "-v=2",
	}}
	return c, nil
}

// restart kills a controller with sig and starts it again.
func (c *controllers) restart(t *testing.T, p *framework.Process, sig syscall.Signal) {
	t.Helper()
	p.Kill(sig)
	require.NoError(t, p.Start())
}

// machine is one entry of the node controller's /debug/machines.
type machine struct {
	Driver     string `json:"driver"`
	Name       string `json:"name"`
	ProviderID string `json:"providerID"`
	State      string `json:"state"`
}

// machines lists the simulated machines the node controller runs; ok is
// false while the controller is not answering (restarting).
func (c *controllers) machines(ctx context.Context) ([]machine, bool) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/debug/machines", c.healthPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, false
	}
	var out []machine
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, false
	}
	return out, true
}

func clients(t *testing.T) (kubernetes.Interface, versioned.Interface) {
	t.Helper()
	cfg := framework.Shared.AdminConfig()
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
