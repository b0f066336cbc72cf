package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// BuildCommands compiles the named packages of the repository (for example
// ./cmd/nodeset-controller) into dir and returns the binaries' paths by name.
func BuildCommands(ctx context.Context, dir string, pkgs ...string) (map[string]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	// grpcnotrace: as the Makefile and the image build them (see
	// cmd/nodeset-controller/size_test.go).
	args := append([]string{"build", "-tags", "grpcnotrace", "-o", dir + string(os.PathSeparator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("framework: go build %v: %w\n%s", pkgs, err, out)
	}
	bins := map[string]string{}
	for _, pkg := range pkgs {
		bins[filepath.Base(pkg)] = filepath.Join(dir, filepath.Base(pkg))
	}
	return bins, nil
}

// WriteKubeconfig writes a kubeconfig for one user of the control plane and returns its path.
func (cp *ControlPlane) WriteKubeconfig(user string) (string, error) {
	cfg := cp.Config(user)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cp.Host, CertificateAuthorityData: cp.caData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts[user] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	kc.CurrentContext = user
	path := filepath.Join(cp.Dir, "kubeconfig-"+user)
	return path, clientcmd.WriteToFile(*kc, path)
}

// Process is a controller binary run by a test; it can be killed and restarted.
type Process struct {
	Name string
	Path string
	Args []string
	// Env is added to the test's environment.
	Env []string
	// Supervised restarts the process whenever it exits by itself (a lost
	// lease, a crash), as the kubelet restarts a Deployment's container;
	// Kill stops it for good until the next Start.
	Supervised bool

	mu       sync.Mutex
	cmd      *exec.Cmd
	output   *bytes.Buffer
	logs     bytes.Buffer
	done     chan struct{}
	stopping bool
	restarts int
	// crashes are the first lines of the panics and runtime failures
	// that ended supervised runs.
	crashes []string
	// restarted is closed and replaced at each restart.
	restarted chan struct{}
}

// Start runs the process; its output is kept for Logs.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked()
}

func (p *Process) startLocked() error {
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	p.output = &bytes.Buffer{}
	cmd.Stdout = &lockedWriter{mu: &p.mu, buf: p.output}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	p.cmd = cmd
	done := make(chan struct{})
	p.done = done
	if p.restarted == nil {
		p.restarted = make(chan struct{})
	}
	go func() {
		_ = cmd.Wait()
		close(done)
		p.restartIfExited(cmd)
	}()
	return nil
}

// restartIfExited starts a supervised process again when cmd, its current
// run, ended without Kill.
func (p *Process) restartIfExited(cmd *exec.Cmd) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.Supervised || p.stopping || p.cmd != cmd {
		return
	}
	p.logs.WriteString(fmt.Sprintf("---- %s exited by itself: %v; restarted ----\n", p.Name, cmd.ProcessState))
	p.logs.Write(p.output.Bytes())
	if crash := crashLine(p.output.String()); crash != "" {
		p.crashes = append(p.crashes, crash)
	}
	p.cmd = nil
	for {
		err := p.startLocked()
		if err == nil {
			break
		}
		// The binary is there (it just ran): a failed start is the machine's
		// moment; try again, as the kubelet does with a back-off.
		p.logs.WriteString(fmt.Sprintf("---- %s: %v; retrying ----\n", p.Name, err))
		p.mu.Unlock()
		time.Sleep(time.Second)
		p.mu.Lock()
		if p.stopping || p.cmd != nil {
			return
		}
	}
	p.restarts++
	close(p.restarted)
	p.restarted = make(chan struct{})
}

// Restarts is how many times a supervised process was restarted after
// exiting by itself.
func (p *Process) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// Crashes are the panics and Go runtime failures (their first line) that
// ended a supervised process's runs: unlike a lost lease, a bug, which a
// restart must not hide.
func (p *Process) Crashes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.crashes...)
}

// crashLine is the line of output that says a Go program crashed, if any.
func crashLine(output string) string {
	for _, line := range strings.Split(output, "\n") {
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || strings.HasPrefix(line, "WARNING: DATA RACE") {
			return line
		}
	}
	return ""
}

// RestartedSince waits up to timeout until a supervised process has
// restarted more than n times (n from Restarts before the expected exit).
func (p *Process) RestartedSince(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		count, restarted := p.restarts, p.restarted
		p.mu.Unlock()
		if count > n {
			return true
		}
		if restarted == nil {
			restarted = make(chan struct{}) // never started: wait out the timeout
		}
		select {
		case <-restarted:
		case <-deadline:
			return false
		}
	}
}

// Kill sends sig (SIGKILL for a crash, SIGTERM for a shutdown), waits for
// the process to exit (killing it after 30s) and returns how it exited, or
// nil when it was not running. Forced says the 30s ran out. A supervised
// process is not restarted after Kill.
func (p *Process) Kill(sig syscall.Signal) (state *os.ProcessState, forced bool) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.stopping = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.stopping = false
		p.mu.Unlock()
	}()
	if cmd == nil {
		return nil, false
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		forced = true
		_ = cmd.Process.Kill()
		<-done
	}
	p.mu.Lock()
	p.logs.WriteString(fmt.Sprintf("---- %s stopped with %v ----\n", p.Name, sig))
	p.logs.Write(p.output.Bytes())
	p.cmd = nil
	p.mu.Unlock()
	return cmd.ProcessState, forced
}

// Signal sends sig (SIGSTOP, SIGCONT, ...) without waiting for anything.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// Exited waits up to timeout for an unsupervised process to exit by itself
// and reports whether it did; an exited process is collected so that Start
// runs it again. For a supervised one, use RestartedSince.
func (p *Process) Exited(timeout time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return true
	}
	select {
	case <-done:
	case <-time.After(timeout):
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != cmd {
		return true // restarted meanwhile (supervised)
	}
	p.logs.WriteString(fmt.Sprintf("---- %s exited: %v ----\n", p.Name, cmd.ProcessState))
	p.logs.Write(p.output.Bytes())
	p.cmd = nil
	return true
}

// sigterm asks a process to shut down gracefully.
const sigterm = syscall.SIGTERM

// Pid is the running process's id, 0 when it is not running.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process is running.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Logs returns everything the process (and its earlier runs) printed.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.logs.String()
	if p.output != nil && p.cmd != nil {
		out += p.output.String()
	}
	return out
}

type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}
