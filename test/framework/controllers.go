package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
)

// Controllers are nodeset-controller and node-controller (simulated driver)
// running as processes under the users nodeset-controller and node-controller,
// bound to the roles in deploy/rbac.
type Controllers struct {
	NodeSet, Node *Process
	// Ports on 127.0.0.1: metrics and health of each controller.
	NodeSetMetricsPort, NodeSetHealthPort int
	NodeMetricsPort, NodeHealthPort       int
	// AutoscalerPort serves cluster-autoscaler's externalgrpc API (plaintext).
	AutoscalerPort int
}

// ControllerOptions add flags to the defaults (later flags win).
type ControllerOptions struct {
	NodeSetArgs, NodeArgs []string
}

// NewControllers installs the RBAC, builds both binaries and prepares (but
// does not start) both processes against cp.
func NewControllers(ctx context.Context, cp *ControlPlane, opts ControllerOptions) (*Controllers, error) {
	if err := InstallRBAC(ctx, cp); err != nil {
		return nil, err
	}
	bins, err := BuildCommands(ctx, filepath.Join(cp.Dir, "bin"), "./cmd/nodeset-controller", "./cmd/node-controller")
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
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	c := &Controllers{NodeSetMetricsPort: ports[0], NodeSetHealthPort: ports[1], NodeMetricsPort: ports[2], NodeHealthPort: ports[3],
		AutoscalerPort: ports[4]}
	leaderElection := []string{"--leader-elect=true",
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}
	c.NodeSet = &Process{Name: "nodeset-controller", Path: bins["nodeset-controller"], Args: append(append([]string{
		"--kubeconfig=" + nodesetKubeconfig,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(c.NodeSetMetricsPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(c.NodeSetHealthPort),
		"--autoscaler-bind-address=127.0.0.1:" + strconv.Itoa(c.AutoscalerPort),
		"--workers=4", "-v=2",
	}, leaderElection...), opts.NodeSetArgs...)}
	c.Node = &Process{Name: "node-controller", Path: bins["node-controller"], Args: append(append([]string{
		"--kubeconfig=" + nodeKubeconfig,
		"--drivers=simulated",
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(c.NodeMetricsPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(c.NodeHealthPort),
		"--simulated-lease-renew-interval=2s",
		"--workers=8", "-v=2",
	}, leaderElection...), opts.NodeArgs...)}
	return c, nil
}

// Start starts whichever of the two is not running.
func (c *Controllers) Start() error {
	for _, p := range []*Process{c.NodeSet, c.Node} {
		if !p.Running() {
			if err := p.Start(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Stop stops both.
func (c *Controllers) Stop() {
	c.NodeSet.Kill(sigterm)
	c.Node.Kill(sigterm)
}

// Machine is one entry of the node controller's /debug/machines.
type Machine struct {
	Driver     string `json:"driver"`
	Name       string `json:"name"`
	ProviderID string `json:"providerID"`
	State      string `json:"state"`
}

// Machines lists the simulated machines the node controller runs; ok is
// false while the controller is not answering (restarting).
func (c *Controllers) Machines(ctx context.Context) ([]Machine, bool) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/debug/machines", c.NodeHealthPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, false
	}
	var out []Machine
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, false
	}
	return out, true
}
