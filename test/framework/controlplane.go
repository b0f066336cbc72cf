// Package framework starts a real control plane (etcd, kube-apiserver and
// kube-controller-manager, and optionally kube-scheduler) from the binaries
// hack/kube-binaries.sh builds, for tests and for hack/local-up.sh.
package framework

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// User is an identity the API server authenticates by bearer token.
type User struct {
	Name   string   `json:"name"`
	Token  string   `json:"token"`
	Groups []string `json:"groups,omitempty"`
}

// Options says how to start a control plane.
type Options struct {
	// Dir holds the state: data, certificates, logs, kubeconfig. Required.
	Dir string
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and kubectl.
	BinDir string
	// Scheduler also starts kube-scheduler.
	Scheduler bool
	// Detach lets the processes outlive the caller (hack/local-up.sh); otherwise
	// they are killed when the calling process dies.
	Detach bool
	// Users are authenticated by token in addition to the admin.
	Users []string
	// AuditLog writes an audit log of every write request to Dir/audit.log.
	AuditLog bool
	// ControllerManagerArgs are added to kube-controller-manager's flags
	// (later flags win), for example a shorter --node-monitor-grace-period.
	ControllerManagerArgs []string
	// AdmissionPlugins are enabled in kube-apiserver besides its defaults,
	// for example NodeRestriction.
	AdmissionPlugins []string
}

// ControlPlane is a running etcd, kube-apiserver and kube-controller-manager
// (and kube-scheduler when asked) on loopback.
type ControlPlane struct {
	Dir            string `json:"dir"`
	BinDir         string `json:"binDir"`
	Host           string `json:"host"`
	CAFile         string `json:"caFile"`
	KubeconfigPath string `json:"kubeconfig"`
	Users          []User `json:"users"`
	PIDs           []int  `json:"pids"`
	// Components are the processes started, by name.
	Components []string `json:"components"`
	caData     []byte
	procs      []*exec.Cmd
	// flags of each process by name, to start it again
	flags map[string]startFlags
}

type startFlags struct {
	opts Options
	args []string
	pid  int
}

const stateFile = "state.json"

// AdminName is the user in system:masters that the kubeconfig uses.
const AdminName = "admin"

// ControllerManagerName is the user kube-controller-manager runs as, as in a
// cluster: the built-in RBAC binds it to system:kube-controller-manager, and
// each controller acts as its own ServiceAccount in kube-system
// (--use-service-account-credentials).
const ControllerManagerName = "system:kube-controller-manager"

// components every control plane runs; kube-scheduler only when asked.
var components = []string{"etcd", "kube-apiserver", "kube-controller-manager"}

// Start starts etcd, kube-apiserver and kube-controller-manager (and
// kube-scheduler when asked) on free loopback ports and waits until the API
// server is ready and kube-controller-manager has begun its work.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.Dir == "" || opts.BinDir == "" {
		return nil, errors.New("framework: Options.Dir and Options.BinDir are required")
	}
	for _, dir := range []string{opts.Dir, filepath.Join(opts.Dir, "etcd"), filepath.Join(opts.Dir, "logs")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	caData, err := writeCerts(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("framework: writing certificates: %w", err)
	}
	cp := &ControlPlane{
		Dir:            opts.Dir,
		BinDir:         opts.BinDir,
		CAFile:         filepath.Join(opts.Dir, "ca.crt"),
		KubeconfigPath: filepath.Join(opts.Dir, "kubeconfig"),
		caData:         caData,
	}
	if err := cp.writeTokens(append(append([]string{AdminName}, opts.Users...), ControllerManagerName)); err != nil {
		return nil, err
	}
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	cp.Host = "https://127.0.0.1:" + strconv.Itoa(ports[2])

	if err := cp.start(opts, "etcd",
		"--name=default",
		"--data-dir="+filepath.Join(opts.Dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync",
		"--log-level=warn",
	); err != nil {
		return nil, err
	}
	apiserverArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--tls-cert-file=" + filepath.Join(opts.Dir, "serving.crt"),
		"--tls-private-key-file=" + filepath.Join(opts.Dir, "serving.key"),
		"--token-auth-file=" + filepath.Join(opts.Dir, "tokens.csv"),
		// Client certificates kube-controller-manager signs (a kubelet's,
		// after its CSR is approved) authenticate; so do bootstrap tokens.
		"--client-ca-file=" + filepath.Join(opts.Dir, "ca.crt"),
		"--enable-bootstrap-token-auth",
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(opts.Dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(opts.Dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		// The default admission plugins, as in a cluster: ServiceAccount
		// needs each namespace's default ServiceAccount (made by
		// kube-controller-manager), TaintNodesByCondition puts
		// node.kubernetes.io/not-ready on every new Node (lifted by its node
		// lifecycle controller once the kubelet reports Ready).
		"--allow-privileged=true",
		// The loopback advertise address cannot back the kubernetes Service endpoints.
		"--endpoint-reconciler-type=none",
		"--v=1",
	}
	if len(opts.AdmissionPlugins) > 0 {
		apiserverArgs = append(apiserverArgs, "--enable-admission-plugins="+strings.Join(opts.AdmissionPlugins, ","))
	}
	if opts.AuditLog {
		policy := filepath.Join(opts.Dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return nil, err
		}
		apiserverArgs = append(apiserverArgs,
			"--audit-policy-file="+policy,
			"--audit-log-path="+filepath.Join(opts.Dir, "audit.log"),
			"--audit-log-format=json",
			// Rotated files are read too (AuditEvents); a large size keeps
			// their number small on long benchmark runs.
			"--audit-log-maxsize=2000",
			// Blocking: every request waits for its event, so none is
			// dropped under load (batch mode drops when its buffer fills,
			// which thousands of simulated kubelets do).
			"--audit-log-mode=blocking")
	}
	if err := cp.start(opts, "kube-apiserver", apiserverArgs...); err != nil {
		cp.Stop()
		return nil, err
	}
	if err := cp.writeKubeconfig(); err != nil {
		cp.Stop()
		return nil, err
	}
	if err := cp.waitReady(ctx, "kube-apiserver", 2*time.Minute); err != nil {
		cp.Stop()
		return nil, err
	}
	if opts.Scheduler {
		if err := cp.start(opts, "kube-scheduler",
			"--kubeconfig="+cp.KubeconfigPath,
			"--authentication-kubeconfig="+cp.KubeconfigPath,
			"--authorization-kubeconfig="+cp.KubeconfigPath,
			"--bind-address=127.0.0.1",
			"--secure-port="+strconv.Itoa(ports[3]),
			"--leader-elect=false",
		); err != nil {
			cp.Stop()
			return nil, err
		}
	}
	if err := cp.startControllerManager(ctx, opts, ports[4]); err != nil {
		cp.Stop()
		return nil, err
	}
	if err := cp.saveState(); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// startControllerManager starts kube-controller-manager with the controllers
// a cluster runs (kubeadm's choice: the defaults, and the bootstrap-token
// signer and cleaner), signing certificates with the control plane's CA and
// service-account tokens with its key, and waits until its ServiceAccount
// controller made the default namespace's default ServiceAccount.
func (cp *ControlPlane) startControllerManager(ctx context.Context, opts Options, port int) error {
	kubeconfig, err := cp.WriteKubeconfig(ControllerManagerName)
	if err != nil {
		return err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--leader-elect=false",
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + filepath.Join(cp.Dir, "sa.key"),
		"--root-ca-file=" + cp.CAFile,
		"--cluster-signing-cert-file=" + cp.CAFile,
		"--cluster-signing-key-file=" + filepath.Join(cp.Dir, "ca.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--v=1",
	}, opts.ControllerManagerArgs...)
	if err := cp.start(opts, "kube-controller-manager", args...); err != nil {
		return err
	}
	return cp.waitServiceAccount(ctx, "default", 2*time.Minute)
}

// auditPolicy records the metadata of every request but reads of leases and
// events, which the benchmark counts separately from the audit log anyway.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

func (cp *ControlPlane) start(opts Options, name string, args ...string) error {
	logPath := filepath.Join(cp.Dir, "logs", name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(cp.BinDir, name), args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if opts.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("framework: starting %s: %w", name, err)
	}
	cp.procs = append(cp.procs, cmd)
	cp.PIDs = append(cp.PIDs, cmd.Process.Pid)
	if !slices.Contains(cp.Components, name) {
		cp.Components = append(cp.Components, name)
	}
	if cp.flags == nil {
		cp.flags = map[string]startFlags{}
	}
	cp.flags[name] = startFlags{opts: opts, args: args, pid: cmd.Process.Pid}
	if !opts.Detach {
		go func() { _ = cmd.Wait() }()
	}
	return nil
}

// StopComponent stops one process of the control plane ("etcd",
// "kube-apiserver", "kube-controller-manager") with SIGKILL, as an outage would, and waits until it is
// gone. StartComponent brings it back.
func (cp *ControlPlane) StopComponent(name string) error {
	f, ok := cp.flags[name]
	if !ok {
		return fmt.Errorf("framework: no %s in this control plane", name)
	}
	if p, err := os.FindProcess(f.pid); err == nil {
		_ = p.Kill()
	}
	for deadline := time.Now().Add(30 * time.Second); processAlive(f.pid); {
		if time.Now().After(deadline) {
			return fmt.Errorf("framework: %s (pid %d) did not stop", name, f.pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// StartComponent starts a process stopped by StopComponent again, with the
// same flags (and so the same ports and data), and waits until the API
// server is ready; kube-controller-manager, until it runs its controllers
// again.
func (cp *ControlPlane) StartComponent(ctx context.Context, name string) error {
	f, ok := cp.flags[name]
	if !ok {
		return fmt.Errorf("framework: no %s in this control plane", name)
	}
	if processAlive(f.pid) {
		return fmt.Errorf("framework: %s is running", name)
	}
	for i, pid := range cp.PIDs {
		if pid == f.pid {
			cp.PIDs = append(cp.PIDs[:i], cp.PIDs[i+1:]...)
			break
		}
	}
	if err := cp.start(f.opts, name, f.args...); err != nil {
		return err
	}
	if err := cp.waitReady(ctx, "kube-apiserver", 2*time.Minute); err != nil {
		return err
	}
	if name == "kube-controller-manager" {
		return cp.waitControllersRunning(ctx)
	}
	return nil
}

// waitControllersRunning waits until a restarted kube-controller-manager
// runs its controllers, as its first start is waited for: until it makes
// the default ServiceAccount of a namespace, here a new one. It builds
// every controller before it runs any, and exits when the API server goes
// away meanwhile; a caller that took the API server away right after a
// restart that waited less would lose it.
func (cp *ControlPlane) waitControllersRunning(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kcm-restart-"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer func() {
		_ = kube.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns.Name, metav1.DeleteOptions{})
	}()
	return cp.waitServiceAccount(ctx, ns.Name, 2*time.Minute)
}

// Stop kills the control plane's processes. It leaves Dir in place.
func (cp *ControlPlane) Stop() {
	for i := len(cp.PIDs) - 1; i >= 0; i-- {
		if p, err := os.FindProcess(cp.PIDs[i]); err == nil {
			_ = p.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range cp.PIDs {
		for processAlive(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if p, err := os.FindProcess(pid); err == nil && processAlive(pid) {
			_ = p.Kill()
		}
	}
}

// Load reads the state of a control plane started with Detach from dir, and
// reports whether all its processes are still running and it answers.
func Load(ctx context.Context, dir string) (*ControlPlane, error) {
	raw, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{}
	if err := json.Unmarshal(raw, cp); err != nil {
		return nil, err
	}
	for _, name := range components {
		if !slices.Contains(cp.Components, name) {
			return cp, fmt.Errorf("framework: the control plane in %s runs no %s", dir, name)
		}
	}
	for _, pid := range cp.PIDs {
		if !processAlive(pid) {
			return cp, fmt.Errorf("framework: process %d of the control plane in %s is gone", pid, dir)
		}
	}
	if cp.caData, err = os.ReadFile(cp.CAFile); err != nil {
		return cp, err
	}
	return cp, cp.waitReady(ctx, "kube-apiserver", 5*time.Second)
}

// Config returns a client configuration for the named user (AdminName for the admin).
func (cp *ControlPlane) Config(user string) *rest.Config {
	for _, u := range cp.Users {
		if u.Name == user {
			return &rest.Config{
				Host:            cp.Host,
				BearerToken:     u.Token,
				TLSClientConfig: rest.TLSClientConfig{CAData: cp.caData},
				QPS:             200,
				Burst:           400,
			}
		}
	}
	panic(fmt.Sprintf("framework: no user %q; pass it in Options.Users", user))
}

// AdminConfig returns a client configuration for the admin (system:masters).
func (cp *ControlPlane) AdminConfig() *rest.Config { return cp.Config(AdminName) }

// Kubectl returns the path of the kubectl binary built with the control plane.
func (cp *ControlPlane) Kubectl() string { return filepath.Join(cp.BinDir, "kubectl") }

func (cp *ControlPlane) writeTokens(names []string) error {
	var lines []string
	for i, name := range names {
		token := make([]byte, 16)
		if _, err := rand.Read(token); err != nil {
			return err
		}
		u := User{Name: name, Token: hex.EncodeToString(token)}
		switch name {
		case AdminName:
			u.Groups = []string{"system:masters"}
		case KubeletsName:
			u.Groups = []string{"system:nodes"}
		}
		cp.Users = append(cp.Users, u)
		lines = append(lines, fmt.Sprintf("%s,%s,uid-%d,%q", u.Token, u.Name, i, strings.Join(u.Groups, ",")))
	}
	return os.WriteFile(filepath.Join(cp.Dir, "tokens.csv"), []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

func (cp *ControlPlane) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["nodeset-local"] = &clientcmdapi.Cluster{Server: cp.Host, CertificateAuthorityData: cp.caData}
	for _, u := range cp.Users {
		cfg.AuthInfos[u.Name] = &clientcmdapi.AuthInfo{Token: u.Token}
		cfg.Contexts[u.Name] = &clientcmdapi.Context{Cluster: "nodeset-local", AuthInfo: u.Name}
	}
	cfg.CurrentContext = AdminName
	return clientcmd.WriteToFile(*cfg, cp.KubeconfigPath)
}

func (cp *ControlPlane) saveState() error {
	raw, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cp.Dir, stateFile), raw, 0o600)
}

func (cp *ControlPlane) waitReady(ctx context.Context, name string, timeout time.Duration) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.caData)
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	token := cp.Config(AdminName).BearerToken
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		for _, pid := range cp.PIDs {
			if !processAlive(pid) {
				return fmt.Errorf("framework: a control-plane process exited; see %s", filepath.Join(cp.Dir, "logs"))
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cp.Host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/readyz answered %s", resp.Status)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("framework: %s not ready after %s: %v (logs in %s)", name, timeout, lastErr, filepath.Join(cp.Dir, "logs"))
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	// A zombie still answers signal 0; read its state to tell.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func freePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	// Below the kernel's ephemeral range: a port from it, free now, can be
	// taken by any process's next outgoing connection (there are hundreds
	// to the API server) before the server that was given it binds it, or
	// binds it again after a restart.
	lowest, highest := 10000, ephemeralLow()-1
	ports := make([]int, 0, n)
	for attempt := 0; len(ports) < n; attempt++ {
		if attempt > 1000 {
			return nil, fmt.Errorf("no free loopback port in %d-%d", lowest, highest)
		}
		port := lowest + mathrand.IntN(highest-lowest+1)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken
		}
		listeners = append(listeners, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// ephemeralLow is the lowest port of the kernel's ephemeral range
// (32768 when it cannot be read).
func ephemeralLow() int {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil || low <= 10001 {
		return 32768
	}
	return low
}

// FreePort returns a free loopback TCP port.
func FreePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}
