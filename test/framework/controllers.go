package framework

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// Controllers are nodeset-controller and node-controller (simulated and
// docker-machine drivers, with the fake docker-machine plugin on its PATH)
// running as processes under the users nodeset-controller and node-controller,
// bound to the roles in deploy/rbac.
type Controllers struct {
	NodeSet, Node *Process
	// Ports on 127.0.0.1: metrics and health of each controller.
	NodeSetMetricsPort, NodeSetHealthPort int
	NodeMetricsPort, NodeHealthPort       int
	// AutoscalerPort serves cluster-autoscaler's externalgrpc API (plaintext).
	AutoscalerPort int
	// WebhookPort serves the NodeSet validating webhook (HTTPS), registered
	// with the API server from deploy/webhook.
	WebhookPort int
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
	binDir := filepath.Join(cp.Dir, "bin")
	bins, err := BuildCommands(ctx, binDir, "./cmd/nodeset-controller", "./cmd/node-controller", "./test/plugins/docker-machine-driver-fake")
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
	kubeletsKubeconfig, err := cp.WriteKubeconfig(KubeletsName)
	if err != nil {
		return nil, err
	}
	// The node controller's temporary files (a machine's user data, which
	// a SIGKILL leaves behind) stay in the control plane's directory, out
	// of the tests' shared one.
	nodeTmp, err := os.MkdirTemp(cp.Dir, "node-controller-tmp-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	c := &Controllers{NodeSetMetricsPort: ports[0], NodeSetHealthPort: ports[1], NodeMetricsPort: ports[2], NodeHealthPort: ports[3],
		AutoscalerPort: ports[4], WebhookPort: ports[5]}
	webhookArgs, err := InstallWebhook(ctx, cp, c.WebhookPort)
	if err != nil {
		return nil, err
	}
	leaderElection := []string{"--leader-elect=true",
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}
	// Both run as a Deployment's containers do: restarted when they exit
	// by themselves, for instance after losing their lease on a busy host.
	c.NodeSet = &Process{Name: "nodeset-controller", Path: bins["nodeset-controller"], Supervised: true, Args: append(append([]string{
		"--kubeconfig=" + nodesetKubeconfig,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(c.NodeSetMetricsPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(c.NodeSetHealthPort),
		"--autoscaler-bind-address=127.0.0.1:" + strconv.Itoa(c.AutoscalerPort),
		// A class of a driver no node controller here serves is
		// DriverNotServed 15 s after its driver was first seen unclaimed.
		"--driver-claim-grace=15s",
		"--workers=4", "-v=2",
	}, append(leaderElection, webhookArgs...)...), opts.NodeSetArgs...)}
	c.Node = &Process{Name: "node-controller", Path: bins["node-controller"], Supervised: true, Args: append(append([]string{
		"--kubeconfig=" + nodeKubeconfig,
		"--simulated-kubelet-kubeconfig=" + kubeletsKubeconfig,
		"--drivers=simulated,docker-machine",
		"--docker-machine-store-path=" + filepath.Join(cp.Dir, "docker-machine"),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(c.NodeMetricsPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(c.NodeHealthPort),
		"--simulated-lease-renew-interval=2s",
		// Longer than kube-controller-manager takes to taint an unreachable
		// Node NoExecute (its node monitor period, 5s, and one wait of its
		// tainting rate limit, 10s), so that a test watching both sees the
		// taint before the replacement; at 3s the replacement sometimes
		// came first.
		"--orphan-collection-interval=2s", "--orphan-min-age=10s", "--unhealthy-timeout=15s",
		// The tests' lone Nodes are the admin's, made on API servers without
		// the kubelet-node-claims policy; tests of the guard turn it on.
		"--require-node-claims-policy=false",
		"--workers=8", "-v=2",
	}, leaderElection...), opts.NodeArgs...),
		Env: []string{"PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH"), "TMPDIR=" + nodeTmp}}
	return c, nil
}

// InstallWebhook issues the webhook's serving certificate (Dir/webhook.crt,
// Dir/webhook.key) and registers deploy/webhook's
// ValidatingWebhookConfiguration with the API server, aimed at
// 127.0.0.1:port instead of the in-cluster Service, with the CA as caBundle.
// It returns the nodeset-controller flags that serve it.
func InstallWebhook(ctx context.Context, cp *ControlPlane, port int) ([]string, error) {
	ca, err := NewCA("nodeset-webhook-ca")
	if err != nil {
		return nil, err
	}
	cert, key, err := ca.Issue("nodeset-webhook", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	certFile, keyFile := filepath.Join(cp.Dir, "webhook.crt"), filepath.Join(cp.Dir, "webhook.key")
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return nil, err
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	objs, err := ReadObjects(filepath.Join(root, "deploy", "webhook", "nodeset-webhook.yaml"))
	if err != nil {
		return nil, err
	}
	client, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		return nil, err
	}
	gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
	for _, obj := range objs {
		if obj.GetKind() != "ValidatingWebhookConfiguration" {
			continue
		}
		webhooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
		for i := range webhooks {
			hook := webhooks[i].(map[string]any)
			path, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "path")
			hook["clientConfig"] = map[string]any{
				"url":      fmt.Sprintf("https://127.0.0.1:%d%s", port, path),
				"caBundle": base64.StdEncoding.EncodeToString(ca.PEM),
			}
		}
		if err := unstructured.SetNestedSlice(obj.Object, webhooks, "webhooks"); err != nil {
			return nil, err
		}
		_ = client.Resource(gvr).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
		if _, err := client.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("registering the webhook: %w", err)
		}
	}
	return []string{"--webhook-bind-address=127.0.0.1:" + strconv.Itoa(port),
		"--webhook-cert-file=" + certFile, "--webhook-key-file=" + keyFile}, nil
}

// Replica is another replica of p (c.NodeSet or c.Node) with ports of its
// own, for high-availability tests. It returns the replica and its health
// port; it is not started.
func (c *Controllers) Replica(p *Process) (*Process, int, error) {
	ports, err := freePorts(4)
	if err != nil {
		return nil, 0, err
	}
	args := append(append([]string{}, p.Args...),
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(ports[0]),
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(ports[1]))
	if p == c.NodeSet {
		args = append(args,
			"--autoscaler-bind-address=127.0.0.1:"+strconv.Itoa(ports[2]),
			"--webhook-bind-address=127.0.0.1:"+strconv.Itoa(ports[3]))
	}
	return &Process{Name: p.Name + "-2", Path: p.Path, Args: args, Env: append([]string{}, p.Env...), Supervised: p.Supervised}, ports[1], nil
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

// WaitReady waits until both controllers answer /readyz and the webhook
// accepts connections.
func (c *Controllers) WaitReady(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, port := range []int{c.NodeSetHealthPort, c.NodeHealthPort} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, nil
			}
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.WebhookPort), time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
}

// Stop stops both.
func (c *Controllers) Stop() {
	c.NodeSet.Kill(sigterm)
	c.Node.Kill(sigterm)
}

// FailOnCrash makes t fail, when it ends, if a run of any of procs ended in
// a panic or a Go runtime failure while t ran: supervision restarts them,
// and must not hide a bug.
func FailOnCrash(t testing.TB, procs ...*Process) {
	t.Helper()
	before := make([]int, len(procs))
	for i, p := range procs {
		before[i] = len(p.Crashes())
	}
	t.Cleanup(func() {
		for i, p := range procs {
			for _, crash := range p.Crashes()[before[i]:] {
				t.Errorf("%s crashed and was restarted: %s", p.Name, crash)
			}
		}
	})
}

// Machine is one entry of the node controller's /debug/machines.
type Machine struct {
	Driver     string `json:"driver"`
	Name       string `json:"name"`
	ProviderID string `json:"providerID"`
	State      string `json:"state"`
	Namespace  string `json:"namespace"`
	NodeSet    string `json:"nodeSet"`
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

// InstallAdmissionPolicy applies deploy/admission: the ValidatingAdmissionPolicies
// that keep other namespaces' pods off Dedicated nodes, kubelets from
// claiming nodeset's keys and a cloud controller manager from deleting Nodes
// whose machines are being made, and their bindings.
func InstallAdmissionPolicy(ctx context.Context, cp *ControlPlane) error {
	files, err := admissionPolicies()
	if err != nil {
		return err
	}
	return Apply(ctx, cp.AdminConfig(), files...)
}

// UninstallAdmissionPolicy deletes what InstallAdmissionPolicy applied.
func UninstallAdmissionPolicy(ctx context.Context, cp *ControlPlane) error {
	files, err := admissionPolicies()
	if err != nil {
		return err
	}
	return Delete(ctx, cp.AdminConfig(), files...)
}

func admissionPolicies() ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	// The files its kustomization lists, as an install applies them.
	dir := filepath.Join(root, "deploy", "admission")
	content, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var kustomization struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(content, &kustomization); err != nil {
		return nil, fmt.Errorf("deploy/admission/kustomization.yaml: %w", err)
	}
	var files []string
	for _, name := range kustomization.Resources {
		files = append(files, filepath.Join(dir, name))
	}
	return files, nil
}
