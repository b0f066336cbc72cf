package dockermachine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/rpc"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rancher/machine/libmachine/drivers"
	"github.com/rancher/machine/libmachine/drivers/plugin/localbinary"
	rpcdriver "github.com/rancher/machine/libmachine/drivers/rpc"
	"github.com/rancher/machine/libmachine/log"
	"github.com/rancher/machine/libmachine/mcnflag"
	"github.com/rancher/machine/libmachine/state"
	"github.com/rancher/machine/libmachine/version"
	"k8s.io/klog/v2"

	"nodeset.dev/nodeset/pkg/redact"
)

// Plugin is the part of a docker-machine driver plugin nodeset uses.
type Plugin interface {
	CreateFlags() ([]mcnflag.Flag, error)
	SetConfigFromFlags(values map[string]any) error
	PreCreateCheck() error
	GetConfigRaw() ([]byte, error)
	Create() error
	GetState() (state.State, error)
	Remove() error
	GetSSHHostname() (string, error)
	GetSSHPort() (int, error)
	GetSSHUsername() string
	GetSSHKeyPath() string
}

// Opener starts a plugin loaded with a saved configuration; close stops it.
type Opener interface {
	Open(ctx context.Context, plugin string, config []byte) (p Plugin, close func(), err error)
}

// RPCOpener starts docker-machine-driver-<plugin> from PATH and speaks
// libmachine's plugin RPC to it.
//
// It runs the plugin process itself rather than through libmachine's
// client factory, which leaves a plugin that exits or fails to load its
// configuration unreaped (or panics closing it), stops reading a plugin's
// output at its first line over 64 KiB (so the plugin blocks on its next
// write), and has no way to stop a call that never returns.
//
// A plugin gets a minimal environment, not the node controller's (see
// pluginEnv).
type RPCOpener struct {
	// Home is the plugin's HOME: the store path, so that it finds no
	// file of the node controller's home (~/.aws, ~/.docker).
	Home string
}

const (
	// pluginStartTimeout is how long a plugin may take to print the
	// address it serves on, as libmachine allows.
	pluginStartTimeout = 10 * time.Second
	// pluginHeartbeat is how often a plugin is told its client is alive;
	// libmachine's plugins exit after 10s without.
	pluginHeartbeat = 5 * time.Second
	// pluginStopTimeout is how long a plugin asked to close may take to
	// exit before it is killed.
	pluginStopTimeout = 5 * time.Second
	// maxOutputLine is the longest line of plugin output that is logged;
	// a longer one is read to its end and logged by its length only.
	maxOutputLine = 64 << 10
	// lastLinesKept are the last lines of a plugin's output an error
	// about its start quotes.
	lastLinesKept = 5
)

var quietLibmachine sync.Once

// Open starts the plugin process. It stops when close is called, when ctx
// is done (a call in flight then fails), and by itself when its heartbeat
// stops.
func (o RPCOpener) Open(ctx context.Context, plugin string, config []byte) (Plugin, func(), error) {
	quietLibmachine.Do(func() {
		// What libmachine's client code logs goes to the node
		// controller's log at high verbosity, never to its stdout.
		w := klogWriter{}
		log.SetOutWriter(w)
		log.SetErrWriter(w)
	})
	// By full path: libmachine would otherwise send the names of its
	// built-in drivers (generic, amazonec2, ...) to a rancher-machine binary
	// instead of docker-machine-driver-<name>.
	path, err := exec.LookPath(BinaryName(plugin))
	if err != nil {
		return nil, nil, fmt.Errorf("plugin binary %s is not installed in the node controller's PATH", BinaryName(plugin))
	}
	proc, err := startPlugin(ctx, path, plugin, append(extraPluginEnv(ctx), pluginEnv(plugin, o.Home)...))
	if err != nil {
		return nil, nil, err
	}
	client := rpcPlugin{proc}
	apiVersion, err := proc.apiVersion()
	if err != nil {
		proc.stop()
		return nil, nil, proc.failed(ctx, fmt.Errorf("asking its plugin API version: %w", err))
	}
	if apiVersion != version.APIVersion {
		proc.stop()
		return nil, nil, fmt.Errorf("plugin %s speaks plugin API version %d, not %d", proc.binary, apiVersion, version.APIVersion)
	}
	if err := client.call(rpcdriver.SetConfigRawMethod, config, nil); err != nil {
		proc.stop()
		return nil, nil, proc.failed(ctx, fmt.Errorf("loading the machine's saved configuration: %w", err))
	}
	return client, proc.stop, nil
}

// apiVersion asks the plugin its plugin API version, and settles the name
// of the RPC service its later calls go to. As libmachine's client does, a
// plugin that does not answer under the current name (RPCServerDriver) is
// asked once more under the name of libmachine before 0.5.1
// (RpcServerDriver), which plugins built with it serve alone; the name
// that answers is kept.
func (p *pluginProcess) apiVersion() (int, error) {
	var v int
	err := p.rpc.Call(rpcdriver.RPCServiceNameV1+rpcdriver.GetVersionMethod, struct{}{}, &v)
	if err == nil {
		return v, nil
	}
	if err2 := p.rpc.Call(rpcdriver.RPCServiceNameV0+rpcdriver.GetVersionMethod, struct{}{}, &v); err2 != nil {
		return 0, err
	}
	p.service.Store(rpcdriver.RPCServiceNameV0)
	return v, nil
}

// serviceName is the name of the plugin's RPC service.
func (p *pluginProcess) serviceName() string {
	if s, ok := p.service.Load().(string); ok {
		return s
	}
	return rpcdriver.RPCServiceNameV1
}

// pluginProcess is a running plugin and the RPC connection to it.
type pluginProcess struct {
	binary string
	cmd    *exec.Cmd
	rpc    *rpc.Client
	// exited is closed once the process is reaped, and its output read
	// (or let go of: releaseOutput).
	exited   chan struct{}
	stopping chan struct{}
	stopOnce sync.Once
	// service is the name of the plugin's RPC service when it is not
	// rpcdriver.RPCServiceNameV1 (see apiVersion).
	service atomic.Value

	// secrets are values its output is scrubbed of besides
	// credentialValues (withOutputSecrets), or nil.
	secrets *redact.Set

	mu        sync.Mutex
	lastLines []string
}

// passedEnv are the node controller's environment variables a plugin
// gets: where to find programs and temporary files, the proxy and trusted
// CAs to reach its cloud through, the locale and time zone. Nothing else,
// so no identity of the node controller (AWS_* variables, a web identity
// token file of IRSA or EKS Pod Identity, its Pod's KUBERNETES_* service)
// is taken up by a plugin's SDK when the class gives it no credentials.
var passedEnv = []string{
	"PATH", "TMPDIR", "TZ", "LANG", "LC_ALL",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
}

// pluginEnv is the environment of a plugin process: passedEnv as the node
// controller has them, HOME set to home (when given), and what libmachine
// tells a plugin binary to serve.
func pluginEnv(plugin, home string) []string {
	var env []string
	for _, k := range passedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if home != "" {
		env = append(env, "HOME="+home)
	}
	return append(env, localbinary.PluginEnvKey+"="+localbinary.PluginEnvVal, localbinary.PluginEnvDriverName+"="+plugin)
}

// pluginEnvKey keys the variables, besides pluginEnv's, that a plugin
// opened with the context gets (withPluginEnv).
type pluginEnvKey struct{}

// withPluginEnv is ctx with variables (KEY=value) that a plugin opened
// with it gets in its environment; pluginEnv's own come after them, so
// none of them is replaced.
func withPluginEnv(ctx context.Context, env []string) context.Context {
	if len(env) == 0 {
		return ctx
	}
	return context.WithValue(ctx, pluginEnvKey{}, env)
}

// extraPluginEnv are the variables withPluginEnv gave ctx.
func extraPluginEnv(ctx context.Context) []string {
	env, _ := ctx.Value(pluginEnvKey{}).([]string)
	return slices.Clone(env)
}

// startPlugin starts the plugin binary at path, with environment env, and
// connects to it.
func startPlugin(ctx context.Context, path, plugin string, env []string) (*pluginProcess, error) {
	p := &pluginProcess{binary: BinaryName(plugin), exited: make(chan struct{}), stopping: make(chan struct{}), secrets: outputSecrets(ctx)}
	p.cmd = exec.Command(path)
	p.cmd.Env = env
	ownProcessGroup(p.cmd)
	// Pipes of its own rather than exec's (StdoutPipe), which must be
	// read to their end before the plugin is waited for: a process the
	// plugin started that left its process group (a VM process or a
	// helper daemon in a session of its own) may keep them open for as
	// long as it runs, and the plugin would stay unreaped.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		_ = stdout.Close()
		_ = stdoutW.Close()
		return nil, err
	}
	p.cmd.Stdout, p.cmd.Stderr = stdoutW, stderrW
	err = p.cmd.Start()
	// The plugin has its own copies of the write ends.
	_ = stdoutW.Close()
	_ = stderrW.Close()
	if err != nil {
		_ = stdout.Close()
		_ = stderr.Close()
		return nil, fmt.Errorf("starting plugin %s: %w", p.binary, err)
	}
	addr := make(chan string, 1)
	var output sync.WaitGroup
	output.Add(2)
	go func() { defer output.Done(); p.readOutput(stdout, addr) }()
	go func() { defer output.Done(); p.readOutput(stderr, nil) }()
	outputDone := make(chan struct{})
	go func() { output.Wait(); close(outputDone) }()
	var waitErr error
	go func() {
		waitErr = p.cmd.Wait()
		p.releaseOutput(outputDone, stdout, stderr)
		close(p.exited)
	}()

	fail := func(err error) (*pluginProcess, error) {
		killGroup(p.cmd)
		p.awaitExit()
		return nil, err
	}
	var address string
	select {
	case address = <-addr:
	case <-time.After(pluginStartTimeout):
		return fail(fmt.Errorf("plugin %s did not start serving within %s", p.binary, pluginStartTimeout))
	case <-ctx.Done():
		return fail(fmt.Errorf("starting plugin %s: %w", p.binary, context.Cause(ctx)))
	}
	if address == "" {
		// Its stdout closed without an address: it exited, or is about to.
		select {
		case <-p.exited:
			status := "exit status 0" // a clean exit: Wait's error is nil
			if waitErr != nil {
				status = waitErr.Error()
			}
			return nil, fmt.Errorf("plugin %s exited before serving (%s)%s", p.binary, status, p.tail())
		case <-time.After(pluginStopTimeout):
			return fail(fmt.Errorf("plugin %s closed its output before serving%s", p.binary, p.tail()))
		}
	}
	if p.rpc, err = dialPlugin(ctx, address); err != nil {
		return fail(fmt.Errorf("plugin %s: connecting to %q: %w%s", p.binary, address, err, p.tail()))
	}
	go p.watch(ctx)
	return p, nil
}

// rpcConnected is the answer of a Go RPC server over HTTP to CONNECT
// (net/rpc's own, which it does not export).
const rpcConnected = "200 Connected to Go RPC"

// dialPlugin connects to the plugin RPC at address as rpc.DialHTTP does,
// bounded by ctx and by pluginStartTimeout: a plugin that prints an
// address and never answers there (its connection accepted by the kernel,
// the handshake unanswered) would otherwise hold the call forever, before
// anything watches it.
func dialPlugin(ctx context.Context, address string) (*rpc.Client, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, pluginStartTimeout,
		fmt.Errorf("%w: the plugin did not answer at its address within %s", context.DeadlineExceeded, pluginStartTimeout))
	defer cancel()
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", address)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	_, err = io.WriteString(conn, "CONNECT "+rpc.DefaultRPCPath+" HTTP/1.0\n\n")
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	}
	if !stop() {
		// ctx ended: the connection is closed, whatever was read.
		_ = conn.Close()
		return nil, context.Cause(ctx)
	}
	if err == nil && resp.Status != rpcConnected {
		err = fmt.Errorf("unexpected HTTP response: %s", resp.Status)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return rpc.NewClient(conn), nil
}

// readOutput logs each line of a plugin's stdout or stderr, scrubbed, as
// libmachine does (the first line of stdout is the address, sent on addr,
// closed if there is none). It reads to the end whatever the lines are,
// so the plugin never blocks on a write.
func (p *pluginProcess) readOutput(r io.Reader, addr chan<- string) {
	defer func() {
		if addr != nil {
			close(addr)
		}
	}()
	br := bufio.NewReaderSize(r, maxOutputLine)
	for {
		line, isPrefix, err := br.ReadLine()
		if err != nil {
			return
		}
		if isPrefix {
			n := len(line)
			for isPrefix && err == nil {
				line, isPrefix, err = br.ReadLine()
				n += len(line)
			}
			klog.V(5).InfoS("docker-machine plugin", "plugin", p.binary, "output", fmt.Sprintf("(a line of %d bytes, not shown)", n))
			if err != nil {
				return
			}
			continue
		}
		if addr != nil {
			// Dialled, not shown: errors that quote it are scrubbed.
			addr <- strings.TrimSpace(string(line))
			close(addr)
			addr = nil
			continue
		}
		text := credentialValues.String(strings.TrimRight(string(line), "\r"))
		if p.secrets != nil {
			text = p.secrets.String(text)
		}
		text = redact.Shapes(text)
		klog.V(5).InfoS("docker-machine plugin", "plugin", p.binary, "output", text)
		p.mu.Lock()
		p.lastLines = append(p.lastLines, text)
		if len(p.lastLines) > lastLinesKept {
			p.lastLines = p.lastLines[1:]
		}
		p.mu.Unlock()
	}
}

// outputGrace is how long the output of a plugin that has exited is read
// on while something else still holds it open, first before the rest of
// its process group is killed, then before the output is let go of.
const outputGrace = time.Second

// releaseOutput ends the reading of the output of a plugin that has
// exited: once it is read to its end, or, while a process the plugin
// started still holds it open, once the rest of the plugin's process group
// is killed (as when the plugin is stopped) and the output read for
// outputGrace more, after which it is closed unread. A process that left
// the group (a VM process or a daemon in a session of its own) is not the
// plugin's to stop; it may hold its copy of the output for as long as it
// runs, and is then only ever written to a closed pipe.
func (p *pluginProcess) releaseOutput(done <-chan struct{}, pipes ...*os.File) {
	select {
	case <-done:
		return
	case <-time.After(outputGrace):
	}
	killGroup(p.cmd)
	select {
	case <-done:
		return
	case <-time.After(outputGrace):
	}
	for _, f := range pipes {
		_ = f.Close()
	}
	<-done
}

// tail is the last lines of the plugin's output after its address, to
// quote in an error.
func (p *pluginProcess) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lastLines) == 0 {
		return ""
	}
	return "; it printed: " + strings.Join(p.lastLines, " | ")
}

// failed is err of a call to the plugin, with why the plugin stopped.
func (p *pluginProcess) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("plugin %s: %w: %w", p.binary, err, context.Cause(ctx))
	}
	return fmt.Errorf("plugin %s: %w%s", p.binary, err, p.tail())
}

// watch sends heartbeats until the plugin is stopped or exits, and kills
// it when ctx is done: a call in flight then fails.
func (p *pluginProcess) watch(ctx context.Context) {
	ticker := time.NewTicker(pluginHeartbeat)
	defer ticker.Stop()
	for {
		select {
		case <-p.stopping:
			return
		case <-p.exited:
			return
		case <-ctx.Done():
			killGroup(p.cmd)
			return
		case <-ticker.C:
			// Asynchronous: a plugin that does not answer must not keep
			// this loop from seeing ctx.
			p.rpc.Go(p.serviceName()+rpcdriver.HeartbeatMethod, struct{}{}, nil, make(chan *rpc.Call, 1))
		}
	}
}

// stop asks the plugin to exit, kills it if it does not, and reaps it.
func (p *pluginProcess) stop() {
	p.stopOnce.Do(func() {
		close(p.stopping)
		p.rpc.Go(p.serviceName()+rpcdriver.CloseMethod, struct{}{}, nil, make(chan *rpc.Call, 1))
		select {
		case <-p.exited:
		case <-time.After(pluginStopTimeout):
			killGroup(p.cmd)
			p.awaitExit()
		}
		_ = p.rpc.Close()
	})
}

// awaitExit waits, bounded, for a killed plugin to be reaped: a child it
// left holding its output would otherwise keep this waiting.
func (p *pluginProcess) awaitExit() {
	select {
	case <-p.exited:
	case <-time.After(pluginStopTimeout):
	}
}

// rpcPlugin is libmachine's plugin RPC client: each call goes to the
// service name the plugin answered to, with the arguments and replies
// libmachine's RPCClientDriver sends and takes.
type rpcPlugin struct{ p *pluginProcess }

func (c rpcPlugin) call(method string, args, reply any) error {
	return c.p.rpc.Call(c.p.serviceName()+method, args, reply)
}

func (c rpcPlugin) str(method string) (string, error) {
	var s string
	err := c.call(method, struct{}{}, &s)
	return s, err
}

// fencedOpener opens plugins whose Create and Remove ask the fence first.
type fencedOpener struct {
	Opener
	fence func() error
}

func (o fencedOpener) Open(ctx context.Context, plugin string, config []byte) (Plugin, func(), error) {
	p, closer, err := o.Opener.Open(ctx, plugin, config)
	if err != nil {
		return nil, nil, err
	}
	return fencedPlugin{Plugin: p, fence: o.fence}, closer, nil
}

type fencedPlugin struct {
	Plugin
	fence func() error
}

func (p fencedPlugin) Create() error {
	if err := p.fence(); err != nil {
		return fmt.Errorf("not creating the machine: %w", err)
	}
	return p.Plugin.Create()
}

func (p fencedPlugin) Remove() error {
	if err := p.fence(); err != nil {
		return fmt.Errorf("not removing the machine: %w", err)
	}
	return p.Plugin.Remove()
}

// CreateFlags is the plugin's GetCreateFlags with its error, which
// libmachine's client logs and drops (its answer is then no flags at all).
func (c rpcPlugin) CreateFlags() ([]mcnflag.Flag, error) {
	var flags []mcnflag.Flag
	if err := c.call(rpcdriver.GetCreateFlagsMethod, struct{}{}, &flags); err != nil {
		return nil, err
	}
	return flags, nil
}

func (c rpcPlugin) SetConfigFromFlags(values map[string]any) error {
	// A pointer to the interface, as libmachine sends it: the plugin's
	// gob decoder takes the registered RPCFlags out of it.
	var opts drivers.DriverOptions = rpcdriver.RPCFlags{Values: values}
	return c.call(rpcdriver.SetConfigFromFlagsMethod, &opts, nil)
}

func (c rpcPlugin) PreCreateCheck() error {
	return c.call(rpcdriver.PreCreateCheckMethod, struct{}{}, nil)
}

func (c rpcPlugin) GetConfigRaw() ([]byte, error) {
	var data []byte
	if err := c.call(rpcdriver.GetConfigRawMethod, struct{}{}, &data); err != nil {
		return nil, err
	}
	return data, nil
}

func (c rpcPlugin) Create() error { return c.call(rpcdriver.CreateMethod, struct{}{}, nil) }

func (c rpcPlugin) Remove() error { return c.call(rpcdriver.RemoveMethod, struct{}{}, nil) }

func (c rpcPlugin) GetState() (state.State, error) {
	var s state.State
	if err := c.call(rpcdriver.GetStateMethod, struct{}{}, &s); err != nil {
		return state.Error, err
	}
	return s, nil
}

func (c rpcPlugin) GetSSHHostname() (string, error) { return c.str(rpcdriver.GetSSHHostnameMethod) }

func (c rpcPlugin) GetSSHPort() (int, error) {
	var port int
	if err := c.call(rpcdriver.GetSSHPortMethod, struct{}{}, &port); err != nil {
		return 0, err
	}
	return port, nil
}

// GetSSHUsername and GetSSHKeyPath are empty when the call fails, as
// libmachine's are (it logs the error).
func (c rpcPlugin) GetSSHUsername() string {
	s, _ := c.str(rpcdriver.GetSSHUsernameMethod)
	return s
}

func (c rpcPlugin) GetSSHKeyPath() string {
	s, _ := c.str(rpcdriver.GetSSHKeyPathMethod)
	return s
}

type klogWriter struct{}

func (klogWriter) Write(b []byte) (int, error) {
	klog.V(5).InfoS("docker-machine plugin", "output", redact.Shapes(credentialValues.String(strings.TrimRight(string(b), "\n"))))
	return len(b), nil
}

var _ io.Writer = klogWriter{}
