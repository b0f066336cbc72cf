// Package dockermachine is the docker-machine driver: any
// docker-machine-driver-<name> plugin makes nodeset's machines, through the
// plugin RPC of libmachine. The Node exists first; the plugin makes a machine
// under the Node's name, and the machine joins the cluster through user data
// or commands run over SSH.
//
// A plugin process is started for each operation and closed when it ends, so
// none outlives its call. What a plugin needs to find a machine again (its
// saved configuration) is kept in a Store, written before the machine is
// created, so a crash in the middle of Create never forgets a machine.
package dockermachine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rancher/machine/libmachine/mcnflag"
	"github.com/rancher/machine/libmachine/state"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// ProviderIDPrefix starts the providerID of every docker-machine Node:
// docker-machine://<plugin>/<machine name>.
const ProviderIDPrefix = "docker-machine://"

// Record is a machine's saved configuration and ownership.
type Record struct {
	// Name of the machine, which is the Node's name.
	Name string
	// Plugin is the docker-machine driver name (docker-machine-driver-<Plugin>).
	Plugin string
	// Class is the name of the NodeClass the machine was made for; empty
	// in records written before it was kept.
	Class string
	// Owner of the machine.
	Owner drivers.Owner
	// NodeUID is the UID of the Node the machine was made for; empty in
	// records written before it was kept, or when the caller did not know it.
	NodeUID types.UID
	// Config is the plugin's saved configuration (its GetConfigRaw). It may
	// hold credentials the plugin took as options, so a Store keeps it secret.
	Config []byte
	// Created is false while the plugin's Create has not returned.
	Created bool
	// Provisioned is false until the join script ran over SSH (always true
	// for classes that join by user data or not at all), so a crash in
	// between runs it again.
	Provisioned bool
	// HostKey is the SSH host key (authorized_keys format) the machine
	// showed the first time it was reached to run its join script; every
	// later connection requires it. Empty until then.
	HostKey string
	// CreatedAt is when the record was first written, as Unix seconds.
	CreatedAt int64
	// Credentials are the class's credential values the machine was made
	// with. Config may quote them after the class's Secret has changed, so
	// the driver keeps scrubbing them from the machine's plugin text after
	// a restart. A Store keeps them secret.
	Credentials map[string][]byte
	// Version is the store's version of the record as it was read or last
	// written (a Secret's resourceVersion); empty for one not stored yet.
	Version string
}

// Store keeps Records. Get returns an error wrapping drivers.ErrNotFound for
// a name it does not have. List must fail rather than return a partial list.
//
// A Store keeps Config as it is given, which is how it keeps Class and
// HostKey too: the driver adds them to the plugin's configuration it hands
// the Store (under the key "nodeset.dev/machine"), and takes them out again
// before a plugin is given the configuration.
//
// Put and Delete act only on the version of the record they are given: Put
// of a record with no Version creates it and fails if it exists; otherwise
// both fail if the stored record changed or went since that version. So a
// write that a replica decided while it led and delivered late (a process
// frozen between its fence and the send) cannot undo its successor's: a
// machine recorded made cannot be recorded unmade again, nor its record
// deleted while the machine stays. Put sets record.Version to the new one.
type Store interface {
	Get(ctx context.Context, name string) (Record, error)
	Put(ctx context.Context, record *Record) error
	Delete(ctx context.Context, record Record) error
	List(ctx context.Context) ([]Record, error)
}

// Driver serves NodeClasses with driver docker-machine.
type Driver struct {
	store     Store
	plugins   Opener
	joiner    Joiner
	storePath string
	fence     func() error
	timeouts  callTimeouts

	mu    sync.Mutex
	flags map[string]cachedFlags // by plugin binary path
}

type cachedFlags struct {
	modTime time.Time
	flags   []mcnflag.Flag
}

// Options configure a Driver.
type Options struct {
	// Store keeps the machines' saved configurations. Required.
	Store Store
	// Opener starts plugins; the libmachine RPC client when nil.
	Opener Opener
	// Joiner makes the join settings of new machines. Required for classes
	// with provisioning.
	Joiner Joiner
	// StorePath is the directory plugins keep their files in (SSH keys,
	// disks); it should outlive the node controller.
	StorePath string
	// Fence, when set, is asked right before every plugin call that makes
	// or removes a machine, and before a join script runs on one: nil lets
	// it go out. The node controller's check before a driver call does not
	// cover the calls a Create or Delete makes after its first steps.
	Fence func() error
	// FlagsTimeout bounds asking a plugin for its flags, which validating
	// a class waits on; one minute when zero.
	FlagsTimeout time.Duration
	// StateTimeout bounds asking a plugin for a machine's state; two
	// minutes when zero.
	StateTimeout time.Duration
	// RemoveTimeout bounds removing a machine through its plugin, which
	// its Node's deletion waits on; ten minutes when zero.
	RemoveTimeout time.Duration
}

// New returns the docker-machine driver.
func New(opts Options) *Driver {
	if opts.Opener == nil {
		opts.Opener = RPCOpener{Home: opts.StorePath}
	}
	if opts.Fence == nil {
		opts.Fence = func() error { return nil }
	}
	timeouts := callTimeouts{flags: orDefault(opts.FlagsTimeout, time.Minute), state: orDefault(opts.StateTimeout, 2*time.Minute),
		remove: orDefault(opts.RemoveTimeout, 10*time.Minute)}
	return &Driver{store: fieldsStore{opts.Store}, plugins: fencedOpener{Opener: opts.Opener, fence: opts.Fence}, joiner: opts.Joiner,
		storePath: opts.StorePath, fence: opts.Fence, timeouts: timeouts, flags: map[string]cachedFlags{}}
}

// callTimeouts bound the plugin calls that a Create's registration timeout
// does not: a plugin that never answers (its cloud's API hangs) is killed
// at the limit, and the call fails and is retried.
type callTimeouts struct {
	flags, state, remove time.Duration
}

func orDefault(t, def time.Duration) time.Duration {
	if t <= 0 {
		return def
	}
	return t
}

// bounded is ctx, ended after limit with a cause that says which call took
// too long (and wraps context.DeadlineExceeded).
func bounded(ctx context.Context, limit time.Duration, call string) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, limit, fmt.Errorf("%w: %s took longer than %s", context.DeadlineExceeded, call, limit))
}

var (
	_ drivers.MachineDriver        = (*Driver)(nil)
	_ drivers.RegistrationObserver = (*Driver)(nil)
	_ drivers.CloudValidator       = (*Driver)(nil)
)

// Registered deletes the machine's bootstrap token: its kubelet has joined
// and has credentials of its own.
func (d *Driver) Registered(ctx context.Context, _ drivers.Class, name string) error {
	return d.forgetJoin(ctx, name)
}

// Name is the value of spec.driver the driver serves.
func (d *Driver) Name() string { return nodesetv1alpha1.DriverDockerMachine }

// BinaryName is the plugin binary serving a docker-machine driver name.
func BinaryName(plugin string) string { return "docker-machine-driver-" + plugin }

func section(class drivers.Class) (*nodesetv1alpha1.DockerMachine, error) {
	return drivers.RequireSection(class.Spec.DockerMachine, "spec.dockerMachine", nodesetv1alpha1.DriverDockerMachine)
}

// Validate checks that the plugin is installed and that every option is one
// of its flags, with a value of the flag's type.
func (d *Driver) Validate(ctx context.Context, class drivers.Class) error {
	remember(class.Credentials)
	dm, err := section(class)
	if err != nil {
		return err
	}
	flags, err := d.createFlags(ctx, dm.DriverName)
	if err != nil {
		return d.scrubbed("", err)
	}
	if err := tenantOverrideErrors(&class.Spec, flags); err != nil {
		return err
	}
	_, err = driverOptions(dm, flags, class.Credentials, d.credentialFiles(dm, "validate"))
	return err
}

// ValidateCloud checks the class with its credentials: the Secret has every
// key the class names, each value fits its option, and no value that an
// option takes as a file path is given as the file's contents (it belongs in
// credentialFileOptions). It starts no machine.
func (d *Driver) ValidateCloud(ctx context.Context, class drivers.Class) error {
	remember(class.Credentials)
	dm, err := section(class)
	if err != nil {
		return err
	}
	flags, err := d.createFlags(ctx, dm.DriverName)
	if err != nil {
		return d.scrubbed("", err)
	}
	if err := tenantOverrideErrors(&class.Spec, flags); err != nil {
		return err
	}
	credentials := class.Credentials
	if credentials == nil {
		credentials = map[string][]byte{}
	}
	_, err = driverOptions(dm, flags, credentials, d.credentialFiles(dm, "validate"))
	return err
}

// createFlags asks the plugin for its flags, cached while its binary is unchanged.
func (d *Driver) createFlags(ctx context.Context, plugin string) ([]mcnflag.Flag, error) {
	path, err := exec.LookPath(BinaryName(plugin))
	if err != nil {
		return nil, drivers.InvalidConfiguration("spec.dockerMachine.driverName",
			"plugin binary %s is not installed in the node controller's PATH", BinaryName(plugin))
	}
	modTime := binaryModTime(path)
	d.mu.Lock()
	cached, ok := d.flags[path]
	d.mu.Unlock()
	if ok && cached.modTime.Equal(modTime) {
		return cached.flags, nil
	}
	var flags []mcnflag.Flag
	ctx, cancel := bounded(ctx, d.timeouts.flags, "asking the plugin for its flags")
	defer cancel()
	err = d.withPlugin(ctx, plugin, d.baseConfig(""), func(p Plugin) (err error) {
		flags, err = p.CreateFlags()
		return err
	})
	if err != nil {
		// The plugin crashed or hung: no word on the class.
		return nil, fmt.Errorf("asking plugin %s for its flags: %w (%w)", BinaryName(plugin), err, drivers.ErrUnavailable)
	}
	d.mu.Lock()
	d.flags[path] = cachedFlags{modTime: modTime, flags: flags}
	d.mu.Unlock()
	return flags, nil
}

// baseConfig is the configuration every plugin starts from: libmachine's
// BaseDriver fields.
func (d *Driver) baseConfig(name string) []byte {
	data, _ := json.Marshal(map[string]string{"MachineName": name, "StorePath": d.storePath})
	return data
}

// withCurrentCredentials is ctx with the environment that hands a plugin
// loading the record's saved configuration the class's current credential
// values: each credentialOptions value in the environment variable its
// flag names (mcnflag's EnvVar). rancher/machine's drivers take their
// credentials from there (or from the command line) when they load a saved
// configuration (their UnmarshalJSON reads them through
// rpcdriver.GetDriverOpts), which is how rancher-machine gives a machine
// made before the credentials were rotated the ones in use now: the saved
// ones may be revoked, and the machine could then never be removed.
// Only for the class and plugin the machine was made with; a plugin that
// reads no such variable keeps what it saved.
func (d *Driver) withCurrentCredentials(ctx context.Context, class drivers.Class, record Record) context.Context {
	dm := class.Spec.DockerMachine
	if dm == nil || len(dm.CredentialOptions) == 0 || class.Credentials == nil || dm.DriverName != record.Plugin ||
		(record.Class != "" && record.Class != class.Name) {
		return ctx
	}
	flags, err := d.createFlags(ctx, record.Plugin)
	if err != nil {
		return ctx
	}
	var env []string
	for _, f := range flags {
		name := flagEnvVar(f)
		key, ok := dm.CredentialOptions[f.String()]
		if name == "" || strings.ContainsAny(name, "=\x00") || !ok {
			continue
		}
		value, ok := class.Credentials[key]
		if !ok || bytes.IndexByte(value, 0) >= 0 {
			continue
		}
		env = append(env, name+"="+string(value))
	}
	return withPluginEnv(ctx, env)
}

// flagEnvVar is the environment variable a flag declares it is read from.
func flagEnvVar(flag mcnflag.Flag) string {
	switch f := flag.(type) {
	case mcnflag.StringFlag:
		return f.EnvVar
	case *mcnflag.StringFlag:
		return f.EnvVar
	case mcnflag.IntFlag:
		return f.EnvVar
	case *mcnflag.IntFlag:
		return f.EnvVar
	case mcnflag.BoolFlag:
		return f.EnvVar
	case *mcnflag.BoolFlag:
		return f.EnvVar
	case mcnflag.StringSliceFlag:
		return f.EnvVar
	case *mcnflag.StringSliceFlag:
		return f.EnvVar
	}
	return ""
}

// withPlugin runs fn against a plugin loaded with config, and closes it.
func (d *Driver) withPlugin(ctx context.Context, plugin string, config []byte, fn func(Plugin) error) error {
	p, closer, err := d.plugins.Open(ctx, plugin, config)
	if err != nil {
		return err
	}
	defer closer()
	if err := fn(p); err != nil {
		if ctx.Err() != nil {
			// The plugin was killed with the call in flight.
			return fmt.Errorf("%w (plugin %s stopped: %w)", err, BinaryName(plugin), context.Cause(ctx))
		}
		return err
	}
	return nil
}

// driverOptions turns the class's options and credential options into typed
// plugin flags, naming any unknown option or wrongly typed value; files are
// the paths of the credential files, by option. Without credentials (nil),
// only the names of credential options are checked.
func driverOptions(dm *nodesetv1alpha1.DockerMachine, flags []mcnflag.Flag, credentials map[string][]byte, files map[string]string) (map[string]any, error) {
	byName := map[string]mcnflag.Flag{}
	var names []string
	for _, f := range flags {
		byName[f.String()] = f
		names = append(names, f.String())
	}
	sort.Strings(names)
	values := map[string]any{}
	setBy := map[string]string{} // option → the field that set it
	set := func(field, option, value string) error {
		flag, ok := byName[option]
		if !ok {
			return drivers.InvalidConfiguration(field, "%q is not an option of plugin %s; its options are: %s",
				option, BinaryName(dm.DriverName), strings.Join(names, ", "))
		}
		if other, ok := setBy[option]; ok {
			return drivers.InvalidConfiguration(field, "option %q is also set by %s", option, other)
		}
		setBy[option] = field
		v, err := typed(flag, value)
		if err != nil {
			return drivers.InvalidConfiguration(field, "option %q: %v", option, err)
		}
		values[option] = v
		return nil
	}
	for _, option := range sortedKeys(dm.Options) {
		if err := set(fmt.Sprintf("spec.dockerMachine.options[%s]", option), option, dm.Options[option]); err != nil {
			return nil, err
		}
	}
	for _, option := range sortedKeys(dm.CredentialFileOptions) {
		field := fmt.Sprintf("spec.dockerMachine.credentialFileOptions[%s]", option)
		if flag, ok := byName[option]; ok && !isStringFlag(flag) {
			return nil, drivers.InvalidConfiguration(field, "option %q does not take a file path (it is not a text option)", option)
		}
		if err := set(field, option, files[option]); err != nil {
			return nil, err
		}
		if credentials == nil {
			continue
		}
		if key := dm.CredentialFileOptions[option]; credentials[key] == nil {
			return nil, drivers.InvalidConfiguration(field, "the credentials Secret has no key %q", key)
		}
	}
	for _, option := range sortedKeys(dm.CredentialOptions) {
		field := fmt.Sprintf("spec.dockerMachine.credentialOptions[%s]", option)
		if _, ok := byName[option]; !ok {
			return nil, set(field, option, "")
		}
		if credentials == nil {
			if other, ok := setBy[option]; ok {
				return nil, drivers.InvalidConfiguration(field, "option %q is also set by %s", option, other)
			}
			setBy[option] = field
			continue // validating without the Secret: the option name is all there is to check
		}
		key := dm.CredentialOptions[option]
		value, ok := credentials[key]
		if !ok {
			return nil, drivers.InvalidConfiguration(field, "the credentials Secret has no key %q", key)
		}
		if takesPath(byName[option]) && strings.ContainsAny(strings.TrimSpace(string(value)), "\r\n") {
			return nil, drivers.InvalidConfiguration(field,
				"option %q takes a file path (%q), and the value of credentials key %q is not one (it has several lines): "+
					"map the option in spec.dockerMachine.credentialFileOptions instead, which writes the value to a private file and passes its path",
				option, usage(byName[option]), key)
		}
		if other, ok := setBy[option]; ok {
			return nil, drivers.InvalidConfiguration(field, "option %q is also set by %s", option, other)
		}
		// The value is never part of an error message.
		if err := set(field, option, string(value)); err != nil {
			return nil, drivers.InvalidConfiguration(field, "the value of credentials key %q does not fit option %q", key, option)
		}
	}
	if p := dm.Provisioning; p != nil && p.Method == nodesetv1alpha1.ProvisioningUserData {
		flag, ok := byName[p.UserDataOption]
		if !ok {
			return nil, drivers.InvalidConfiguration("spec.dockerMachine.provisioning.userDataOption",
				"%q is not an option of plugin %s; its options are: %s", p.UserDataOption, BinaryName(dm.DriverName), strings.Join(names, ", "))
		}
		if !isStringFlag(flag) {
			return nil, drivers.InvalidConfiguration("spec.dockerMachine.provisioning.userDataOption", "option %q does not take a file name", p.UserDataOption)
		}
		if other, ok := setBy[p.UserDataOption]; ok {
			return nil, drivers.InvalidConfiguration("spec.dockerMachine.provisioning.userDataOption", "option %q is also set by %s", p.UserDataOption, other)
		}
	}
	// Defaults for what is not set. docker-machine's command line would
	// read a flag's environment variable (its EnvVar) first; plugins do
	// not get the node controller's environment, and neither is it read
	// for them here.
	for _, f := range flags {
		if _, ok := values[f.String()]; !ok && f.Default() != nil {
			values[f.String()] = f.Default()
		}
	}
	return values, nil
}

func isStringFlag(flag mcnflag.Flag) bool {
	switch flag.(type) {
	case mcnflag.StringFlag, *mcnflag.StringFlag:
		return true
	}
	return false
}

// usage is what a flag says it is for.
func usage(flag mcnflag.Flag) string {
	switch f := flag.(type) {
	case mcnflag.StringFlag:
		return f.Usage
	case *mcnflag.StringFlag:
		return f.Usage
	case mcnflag.StringSliceFlag:
		return f.Usage
	case *mcnflag.StringSliceFlag:
		return f.Usage
	case mcnflag.BoolFlag:
		return f.Usage
	case *mcnflag.BoolFlag:
		return f.Usage
	case mcnflag.IntFlag:
		return f.Usage
	case *mcnflag.IntFlag:
		return f.Usage
	}
	return ""
}

// takesPath reports whether a string option says it takes a file path
// (the generic driver's generic-ssh-key: "SSH private key path").
func takesPath(flag mcnflag.Flag) bool {
	if !isStringFlag(flag) {
		return false
	}
	u := strings.ToLower(usage(flag))
	return strings.Contains(u, "path") || strings.Contains(u, "file")
}

func typed(flag mcnflag.Flag, value string) (any, error) {
	switch flag.(type) {
	case mcnflag.IntFlag, *mcnflag.IntFlag:
		n, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", value)
		}
		return n, nil
	case mcnflag.BoolFlag, *mcnflag.BoolFlag:
		b, err := strconv.ParseBool(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", value)
		}
		return b, nil
	case mcnflag.StringSliceFlag, *mcnflag.StringSliceFlag:
		var out []string
		for _, s := range strings.Split(value, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out, nil
	default:
		return value, nil
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Capacity is not known before a machine exists: plugins do not say.
func (d *Driver) Capacity(context.Context, drivers.Class) (drivers.Capacity, error) {
	return drivers.Capacity{}, drivers.ErrNotImplemented
}

// ProviderID is the providerID of a machine.
func ProviderID(plugin, name string) string { return ProviderIDPrefix + plugin + "/" + name }

// Create makes the machine named after the Node, or finds it. The record is
// written before the plugin's Create, so a crash leaves a record that the
// next call (or orphan collection) resolves. Every error is scrubbed of the
// credential values: plugins quote the options they were given.
func (d *Driver) Create(ctx context.Context, machine drivers.Machine) (string, error) {
	remember(machine.Class.Credentials)
	providerID, err := d.create(ctx, machine)
	return providerID, d.scrubbed(machine.Name, err)
}

func (d *Driver) create(ctx context.Context, machine drivers.Machine) (_ string, err error) {
	dm, err := section(machine.Class)
	if err != nil {
		return "", err
	}
	// A machine that has not joined within the class's registration
	// timeout is replaced, which its Node's controller can do only once
	// this call has returned: no attempt runs longer, whatever the plugin
	// or the join script does. The next attempt resumes from the record.
	ctx, cancel := context.WithTimeout(ctx, registrationTimeout(machine.Class))
	defer cancel()
	providerID := ProviderID(dm.DriverName, machine.Name)
	record, err := d.record(ctx, machine.Name)
	if err == nil && leftBehind(record, machine, dm.DriverName) {
		// The machine of the Node's predecessor under its name, deleted
		// without it: its deletion was to remove it, which is done now.
		if err := d.delete(ctx, machine.Class, machine.Name); err != nil {
			return "", fmt.Errorf("removing machine %s, left behind by an earlier Node of the name (UID %s): %w", machine.Name, record.NodeUID, err)
		}
		klog.FromContext(ctx).Info("Removed the machine an earlier Node of the name left behind", "machine", machine.Name,
			"plugin", BinaryName(record.Plugin), "earlierNodeUID", record.NodeUID, "nodeUID", machine.NodeUID)
		record, err = Record{}, fmt.Errorf("machine %s: %w", machine.Name, drivers.ErrNotFound)
	}
	if err == nil {
		// A record of the name is this Node's machine, or the machine of
		// a Node deleted without it, which is not handed over.
		if err := notTheNodes(record, machine, dm.DriverName); err != nil {
			return "", err
		}
	}
	switch {
	case err == nil && record.Created && record.Provisioned:
		return providerID, nil
	case err == nil && record.Created:
		// Made, but the join script did not finish: run it again.
		return providerID, d.resumeProvisioning(ctx, machine, dm, record)
	case err == nil:
		// A Create was in flight when the node controller stopped, or
		// failed and could not be undone. What the plugin saved before
		// its Create is not enough to use a machine (generic records the
		// key it copies only in Create), so the machine is removed and
		// made again.
		if err := d.prepareMachineDir(dm, machine.Name, machine.Class.Credentials); err != nil {
			return "", err
		}
		undoCtx := d.withCurrentCredentials(ctx, machine.Class, record)
		if err := d.withPlugin(undoCtx, record.Plugin, record.Config, func(p Plugin) error { return d.undoCreate(undoCtx, p, record) }); err != nil {
			return "", fmt.Errorf("plugin %s: undoing the unfinished creation of machine %s: %w", BinaryName(record.Plugin), machine.Name, err)
		}
	case !errors.Is(err, drivers.ErrNotFound):
		return "", err
	}

	flags, err := d.createFlags(ctx, dm.DriverName)
	if err != nil {
		return "", err
	}
	if err := tenantOverrideErrors(&machine.Class.Spec, flags); err != nil {
		return "", err
	}
	values, err := driverOptions(dm, flags, machine.Class.Credentials, d.credentialFiles(dm, machine.Name))
	if err != nil {
		return "", err
	}
	join, cleanup, err := d.prepareJoin(ctx, machine, dm)
	if err != nil {
		return "", err
	}
	defer cleanup()
	// The user data holds the machine's bootstrap token, which the plugin
	// or its cloud may quote, in an error or in the plugin's output.
	defer func() { err = join.scrubbed(err) }()
	if join.userDataFile != "" {
		values[dm.Provisioning.UserDataOption] = join.userDataFile
		ctx = withOutputSecrets(ctx, join.secrets())
	}
	// The machine's store directory, as the docker-machine client makes it
	// before a driver's Create, with the file credentials in it.
	if err := d.prepareMachineDir(dm, machine.Name, machine.Class.Credentials); err != nil {
		return "", err
	}
	record = Record{Name: machine.Name, Plugin: dm.DriverName, Class: machine.Class.Name, Owner: machine.Owner, NodeUID: machine.NodeUID,
		CreatedAt: time.Now().Unix(), Credentials: machine.Class.Credentials}
	err = d.withPlugin(ctx, dm.DriverName, d.baseConfig(machine.Name), func(p Plugin) error {
		// A plugin killed in the middle (the attempt's time is up) did
		// not refuse the options: its error says nothing of the class.
		if err := p.SetConfigFromFlags(values); err != nil {
			if ctx.Err() != nil {
				return err
			}
			return drivers.InvalidConfiguration("spec.dockerMachine.options", "plugin %s refused the options: %v", BinaryName(dm.DriverName), err)
		}
		if err := p.PreCreateCheck(); err != nil {
			if ctx.Err() != nil {
				return err
			}
			return fmt.Errorf("%w: plugin %s: %v", drivers.ErrInvalidConfiguration, BinaryName(dm.DriverName), err)
		}
		if record.Config, err = p.GetConfigRaw(); err != nil {
			return err
		}
		if err := d.store.Put(ctx, &record); err != nil {
			return fmt.Errorf("saving machine %s before creating it: %w", machine.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("Creating machine through plugin", "machine", machine.Name, "plugin", BinaryName(dm.DriverName))
		if err := d.createSavingConfig(ctx, p, &record); err != nil {
			if outOfCapacity(err.Error()) {
				err = fmt.Errorf("%w: %w", drivers.ErrOutOfCapacity, err)
			}
			createErr := fmt.Errorf("plugin %s creating machine %s: %w", BinaryName(dm.DriverName), machine.Name, err)
			// A plugin that failed after making the machine knows it now
			// by what its configuration holds since (a cloud's instance
			// id), which the one saved before Create lacks: saved, an undo
			// that fails here is retried on the machine that exists.
			d.saveConfig(ctx, p, &record)
			if undoErr := d.undoCreate(ctx, p, record); undoErr != nil {
				return fmt.Errorf("%w; undoing it: %v (retried with the next attempt)", createErr, undoErr)
			}
			return createErr
		}
		made := record
		if made.Config, err = p.GetConfigRaw(); err == nil {
			made.Created = true
			made.Provisioned = !joinsOverSSH(dm)
			err = d.store.Put(ctx, &made)
		}
		if err != nil {
			// The machine is known only to this plugin process: the
			// configuration saved before Create may not find it again.
			saveErr := fmt.Errorf("saving machine %s: %w", machine.Name, err)
			if undoErr := d.undoCreate(ctx, p, record); undoErr != nil {
				return fmt.Errorf("%w; undoing its creation: %v (retried with the next attempt)", saveErr, undoErr)
			}
			return saveErr
		}
		record = made
		if !joinsOverSSH(dm) {
			return nil
		}
		if err := d.provisionSSH(ctx, p, &record, join); err != nil {
			return err
		}
		record.Provisioned = true
		return d.store.Put(ctx, &record)
	})
	if err != nil {
		return "", err
	}
	return providerID, nil
}

// defaultRegistrationTimeout is the schema's default of a class's
// registrationTimeout.
const defaultRegistrationTimeout = 15 * time.Minute

// registrationTimeout is how long a machine of the class may take to join.
func registrationTimeout(class drivers.Class) time.Duration {
	if t := class.Spec.RegistrationTimeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return defaultRegistrationTimeout
}

// configSaveInterval is how often the configuration of a plugin whose
// Create is in flight is read, and saved when it changed.
var configSaveInterval = time.Second

// createSavingConfig runs the plugin's Create and, while it is in flight,
// saves the plugin's configuration in record each time it changed. A cloud
// plugin learns the id of its machine part-way through Create (amazonec2
// keeps the instance id as soon as RunInstances answers, then waits for the
// instance to run, and imports a key pair before): a node controller
// stopped after that (killed, or the attempt's time up) would otherwise
// leave a record whose configuration does not find the machine, and the
// next attempt would make a second one while the first ran on, unrecorded.
func (d *Driver) createSavingConfig(ctx context.Context, p Plugin, record *Record) error {
	done := make(chan error, 1)
	go func() { done <- p.Create() }()
	ticker := time.NewTicker(configSaveInterval)
	defer ticker.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-ticker.C:
			d.saveConfig(ctx, p, record)
		}
	}
}

// saveConfig saves the plugin's configuration as it is now in the record
// of a machine whose Create did not finish, when it can and when it
// changed: what is saved already stays otherwise.
func (d *Driver) saveConfig(ctx context.Context, p Plugin, record *Record) {
	config, err := p.GetConfigRaw()
	if err != nil || bytes.Equal(config, record.Config) {
		return
	}
	saved := *record
	saved.Config = config
	if err := d.store.Put(ctx, &saved); err != nil {
		klog.FromContext(ctx).V(2).Info("Could not save the configuration of a machine whose creation has not finished", "machine", record.Name, "err", d.scrubbed(record.Name, err).Error())
		return
	}
	*record = saved
}

// undoCreate removes what a Create that did not finish may have made,
// through a plugin loaded with the configuration last saved, then the
// machine's files and its record, so that the next Create starts afresh. A
// plugin that says the machine does not exist has nothing to remove; any
// other failure keeps the record, and the next attempt tries again.
func (d *Driver) undoCreate(ctx context.Context, p Plugin, record Record) error {
	if removeErr := p.Remove(); removeErr != nil {
		if _, stateErr := p.GetState(); stateErr == nil || !machineGone(stateErr, record.Name) {
			return removeErr
		}
	}
	if err := d.removeMachineDir(record.Name); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Undid an unfinished machine creation", "machine", record.Name, "plugin", BinaryName(record.Plugin))
	return d.store.Delete(ctx, record)
}

func joinsOverSSH(dm *nodesetv1alpha1.DockerMachine) bool {
	return dm.Provisioning != nil && dm.Provisioning.Method == nodesetv1alpha1.ProvisioningSSH
}

// resumeProvisioning finishes a machine made before a crash: it runs the
// join script over SSH again (join scripts must be idempotent), with a new
// bootstrap token, on the host that has the host key the machine showed
// the first time, and records the machine provisioned.
func (d *Driver) resumeProvisioning(ctx context.Context, machine drivers.Machine, dm *nodesetv1alpha1.DockerMachine, record Record) error {
	if !joinsOverSSH(dm) {
		record.Provisioned = true
		return d.store.Put(ctx, &record)
	}
	if err := d.prepareMachineDir(dm, machine.Name, machine.Class.Credentials); err != nil {
		return err
	}
	join, cleanup, err := d.prepareJoin(ctx, machine, dm)
	if err != nil {
		return err
	}
	defer cleanup()
	err = d.withPlugin(d.withCurrentCredentials(ctx, machine.Class, record), record.Plugin, record.Config, func(p Plugin) error {
		return d.provisionSSH(ctx, p, &record, join)
	})
	if err != nil {
		return err
	}
	record.Provisioned = true
	return d.store.Put(ctx, &record)
}

func (d *Driver) state(ctx context.Context, record Record) (state.State, error) {
	ctx, cancel := bounded(ctx, d.timeouts.state, "asking the plugin for the machine's state")
	defer cancel()
	var st state.State
	err := d.withPlugin(ctx, record.Plugin, record.Config, func(p Plugin) error {
		var err error
		st, err = p.GetState()
		return err
	})
	return st, err
}

// Delete removes the machine through its plugin, then its store directory
// (the plugin's files and the credential files) and its record. A machine
// without a record was never created, or is already gone.
func (d *Driver) Delete(ctx context.Context, class drivers.Class, name string) error {
	remember(class.Credentials)
	return d.scrubbed(name, d.delete(ctx, class, name))
}

func (d *Driver) delete(ctx context.Context, class drivers.Class, name string) error {
	record, err := d.record(ctx, name)
	if errors.Is(err, drivers.ErrNotFound) {
		if err := d.removeMachineDir(name); err != nil {
			return err
		}
		return d.forgetJoin(ctx, name)
	}
	if err != nil {
		return err
	}
	// A plugin that does not answer is killed at the limit; its error
	// says nothing of the machine, whose record stays.
	removeCtx, cancel := bounded(ctx, d.timeouts.remove, "removing the machine")
	defer cancel()
	removeCtx = d.withCurrentCredentials(removeCtx, class, record)
	err = d.withPlugin(removeCtx, record.Plugin, record.Config, func(p Plugin) error {
		// Remove, even when Create never finished and the plugin says the
		// machine does not exist: a driver makes other things before the
		// machine (azure its network interface, public IP and security
		// group, amazonec2 its key pair), which only its Remove deletes.
		// The record stays until Remove succeeds.
		removeErr := p.Remove()
		if removeErr == nil || removeCtx.Err() != nil {
			return removeErr
		}
		// An earlier Remove may have succeeded just before the node
		// controller stopped, leaving the record: a plugin that says the
		// machine does not exist has nothing left to remove.
		if _, stateErr := p.GetState(); stateErr != nil && machineGone(stateErr, name) {
			klog.FromContext(ctx).Info("Plugin no longer knows the machine; forgetting its record", "machine", name,
				"removeError", d.scrubbed(name, removeErr).Error(), "stateError", d.scrubbed(name, stateErr).Error())
			return nil
		}
		return removeErr
	})
	if err != nil {
		return fmt.Errorf("plugin %s removing machine %s: %w", BinaryName(record.Plugin), name, err)
	}
	if err := d.forgetJoin(ctx, name); err != nil {
		return err
	}
	// The files go before the record: a record outliving them is deleted
	// again by the next call, files outliving their record would not be.
	if err := d.removeMachineDir(name); err != nil {
		return err
	}
	return d.store.Delete(ctx, record)
}

// goneMarkers are what plugins say when asked about a machine that does not
// exist. Over the plugin RPC every error is only text, so this is all there
// is to tell "gone" from "could not ask" (which keeps the record).
var goneMarkers = []string{"not found", "does not exist", "doesn't exist", "no such", "notfound", "not exist"}

// unaskedMarkers are what an error says when the plugin could not ask its
// cloud at all, in words that would otherwise read as "gone": a name that
// does not resolve, a tool or a file of its own that is missing, or
// credentials the cloud did not take (rancher/machine's azure, whose
// service principal was deleted: "azure.BearerAuthorizer#WithAuthorization:
// ... unauthorized_client ... AADSTS700016: Application with identifier
// '...' was not found in the directory"; its tenant lookup: "Failed to
// authenticate using client credentials: Header WWW-Authenticate not found";
// an AWS key deleted: "InvalidAccessKeyId: The AWS Access Key Id you
// provided does not exist in our records"). Such an error says nothing of
// the machine.
var unaskedMarkers = []string{"no such host", "executable file not found", "no such file or directory", "file does not exist",
	"authenticat", "authoriz", "credential", "access key", "aadsts", "forbidden", "permission", "access denied", "accessdenied",
	"security token", "api key", "apikey"}

// machineGone reports whether err, a plugin's answer about machine name,
// says the machine does not exist. The name itself is no word of the
// answer: a machine named after a credential or a login is judged by what
// is said of it.
func machineGone(err error, name string) bool {
	msg := strings.ToLower(err.Error())
	unasked := msg
	if name := strings.ToLower(name); name != "" && !slices.ContainsFunc(unaskedMarkers, func(m string) bool { return strings.Contains(m, name) }) {
		unasked = strings.ReplaceAll(msg, name, "")
	}
	for _, m := range unaskedMarkers {
		if strings.Contains(unasked, m) {
			return false
		}
	}
	for _, m := range goneMarkers {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// record is the machine's record from the store. The credentials it was
// made with are scrubbed from plugin text from then on.
func (d *Driver) record(ctx context.Context, name string) (Record, error) {
	record, err := d.store.Get(ctx, name)
	if err == nil {
		remember(record.Credentials)
	}
	return record, err
}

// Get reports the machine's state as its plugin sees it.
func (d *Driver) Get(ctx context.Context, class drivers.Class, name string) (drivers.MachineStatus, error) {
	remember(class.Credentials)
	status, err := d.get(ctx, class, name)
	return status, d.scrubbed(name, err)
}

func (d *Driver) get(ctx context.Context, class drivers.Class, name string) (drivers.MachineStatus, error) {
	record, err := d.record(ctx, name)
	if err != nil {
		return drivers.MachineStatus{}, err
	}
	status := drivers.MachineStatus{Name: name, ProviderID: ProviderID(record.Plugin, name), Owner: record.Owner, NodeUID: record.NodeUID,
		Class: record.Class, CreatedAt: record.CreatedAt}
	if !record.Created {
		status.State = drivers.MachinePending
		return status, nil
	}
	st, err := d.state(d.withCurrentCredentials(ctx, class, record), record)
	if err != nil {
		return drivers.MachineStatus{}, fmt.Errorf("plugin %s: state of machine %s: %w", BinaryName(record.Plugin), name, err)
	}
	switch st {
	case state.Running:
		status.State = drivers.MachineRunning
	case state.Starting, state.None:
		status.State = drivers.MachinePending
	case state.Stopping:
		status.State = drivers.MachineStopping
	default: // Stopped, Paused, Saved, Error, Timeout
		status.State, status.Message = drivers.MachineFailed, "the plugin reports the machine "+st.String()
	}
	return status, nil
}

// List returns every machine with a record, for orphan collection. It reads
// only the store: no plugin is started.
func (d *Driver) List(ctx context.Context) ([]drivers.MachineStatus, error) {
	records, err := d.store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]drivers.MachineStatus, 0, len(records))
	for _, r := range records {
		remember(r.Credentials)
		st := drivers.MachineRunning
		if !r.Created {
			st = drivers.MachinePending
		}
		out = append(out, drivers.MachineStatus{Name: r.Name, ProviderID: ProviderID(r.Plugin, r.Name), State: st, Owner: r.Owner, NodeUID: r.NodeUID,
			Class: r.Class, CreatedAt: r.CreatedAt})
	}
	return out, nil
}
