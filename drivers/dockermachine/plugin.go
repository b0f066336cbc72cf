package dockermachine

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"

	rpcdriver "github.com/rancher/machine/libmachine/drivers/rpc"
	"github.com/rancher/machine/libmachine/log"
	"github.com/rancher/machine/libmachine/mcnflag"
	"github.com/rancher/machine/libmachine/state"
	"k8s.io/klog/v2"
)

// Plugin is the part of a docker-machine driver plugin nodeset uses.
type Plugin interface {
	GetCreateFlags() []mcnflag.Flag
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
type RPCOpener struct{}

var quietLibmachine sync.Once

// Open starts the plugin process. It stops when close is called (and by
// itself when its heartbeat stops).
func (RPCOpener) Open(ctx context.Context, plugin string, config []byte) (Plugin, func(), error) {
	quietLibmachine.Do(func() {
		// Plugins' output goes to the node controller's log at high
		// verbosity, never to its stdout.
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
	factory := rpcdriver.NewRPCClientDriverFactory()
	client, err := factory.NewRPCClientDriver(path, config)
	if err != nil {
		_ = factory.Close()
		return nil, nil, err
	}
	return rpcPlugin{client}, func() { _ = factory.Close() }, nil
}

type rpcPlugin struct{ *rpcdriver.RPCClientDriver }

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

func (p rpcPlugin) SetConfigFromFlags(values map[string]any) error {
	return p.RPCClientDriver.SetConfigFromFlags(rpcdriver.RPCFlags{Values: values})
}

type klogWriter struct{}

func (klogWriter) Write(b []byte) (int, error) {
	klog.V(5).InfoS("docker-machine plugin", "output", credentialValues.String(strings.TrimRight(string(b), "\n")))
	return len(b), nil
}

var _ io.Writer = klogWriter{}
