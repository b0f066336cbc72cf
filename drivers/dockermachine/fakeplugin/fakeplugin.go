// Package fakeplugin is a docker-machine driver plugin for tests: its
// machines are JSON files in a directory, and a machine's SSH endpoint is
// whatever the test says. It speaks the real plugin RPC: run it with
// plugin.RegisterDriver(fakeplugin.New()) from a binary named
// docker-machine-driver-fake.
//
// Like real drivers, it keeps a machine's files in the machine's store
// directory (<StorePath>/machines/<name>/, which the client makes): Create
// copies the SSH key given by fake-ssh-key there, as generic does, or makes
// one there, as cloud drivers do, and fails when the directory is missing.
// With fake-echo it quotes every value it was given in its output and its
// errors, as drivers do in theirs. fake-insecure is recorded on the
// machine, a switch worded as clouds' switches that turn off the TLS
// checking of their API are (openstack-insecure). fake-copy-files, a list option, names
// files of the plugin's host that Create copies to the machine, as some
// plugins take several files in one option. Each machine made or removed is also a
// line of <fake-dir>/calls.log, which names the node controller (by process
// ID) that made the call. For the failures of real plugins, fake-chatter
// prints one line of that many bytes to its stdout and stderr in Create,
// fake-error-bytes fails Create with an error of about that many bytes that
// quotes the token all along (a cloud's error page, sent back whole),
// fake-hang-create makes Create never return (once it has written
// <fake-dir>/<name>.hanging; with fake-hang-child, once it has also started
// a child process that shares its output, as a driver waiting on a tool it
// runs, whose process ID it writes to <fake-dir>/<name>.child), and
// fake-fail-remove makes Remove fail (with the values it was given, under
// fake-echo). As cloud drivers do,
// fake-cloud-ids has Create give the machine an id of its own, kept in the
// saved configuration, by which alone GetState and Remove find it;
// fake-fail-after-create fails Create once the machine exists (a driver
// whose wait for the new machine fails), fake-nic has Create make the
// machine's network interface (<fake-dir>/<name>.nic) before the machine,
// as azure does, which GetState does not look at and Remove deletes when it
// exists (and then takes a machine that does not exist as removed, as
// azure's does), fake-daemon has Create start a process in a session of
// its own that keeps the plugin's output open and outlives it (a VM
// process or helper daemon; its process ID in <fake-dir>/<name>.daemon),
// and fake-outage names a file
// while which exists every GetState and Remove fails (an API outage), with
// the file's contents as the error when it has any. A file
// <StorePath>/fake-crash-flags makes the plugin crash once, asked for its
// flags (it removes the file first). While a file <StorePath>/<call> named
// by one of the Hang constants exists, that call never returns, once it has
// written <StorePath>/<call>.hung. A file <StorePath>/fake-env gets the
// plugin's environment, one variable a line, when it is asked for its flags.
//
// As rancher/machine's cloud drivers do with their credentials, it takes
// fake-token anew from its flag's environment variable (TokenEnvVar), when
// set, each time it loads a saved configuration; while a line of
// <fake-dir>/revoked (RevokedFile) is the token it holds, GetState and
// Remove fail as a cloud refusing a revoked key does. Each call log line
// names the token the call was made with.
package fakeplugin

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/rpc"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rancher/machine/libmachine/drivers"
	rpcdriver "github.com/rancher/machine/libmachine/drivers/rpc"
	"github.com/rancher/machine/libmachine/log"
	"github.com/rancher/machine/libmachine/mcnflag"
	"github.com/rancher/machine/libmachine/state"
	"golang.org/x/crypto/ssh"
)

// Name is the plugin's driver name.
const Name = "fake"

// Machine is what the plugin records for each machine it made.
type Machine struct {
	Name  string   `json:"name"`
	CPUs  int      `json:"cpus"`
	Tags  []string `json:"tags,omitempty"`
	Debug bool     `json:"debug,omitempty"`
	// Insecure: fake-insecure was set, as a switch that turns off the TLS
	// checking of a cloud's API (openstack-insecure).
	Insecure bool   `json:"insecure,omitempty"`
	UserData string `json:"userData,omitempty"`
	// Files are the contents of the files fake-copy-files named, by path.
	Files     map[string]string `json:"files,omitempty"`
	Token     string            `json:"token,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
}

// Driver is the plugin. Its exported fields are its saved configuration:
// the JSON a client keeps to find the machine again.
type Driver struct {
	*drivers.BaseDriver
	Dir          string
	CPUs         int
	Tags         []string
	Debug        bool
	Insecure     bool
	UserDataFile string
	// CopyFiles are files of the plugin's host that Create copies to the
	// machine (fake-copy-files), a list option as some plugins take.
	CopyFiles  []string
	Token      string
	FailCreate bool
	// FailCreateNoRoom fails every Create as rancher/machine's amazonec2
	// does when EC2 has no capacity (fake-fail-create-no-room).
	FailCreateNoRoom bool
	// SSHKey is the key file given by fake-ssh-key; Create copies it to
	// SSHKeyPath, in the machine's store directory.
	SSHKey     string
	Echo       bool
	Chatter    int
	ErrorBytes int
	HangCreate bool
	HangChild  bool
	FailRemove bool
	// CloudIDs, MachineID: the machine is found by the id its Create gave
	// it, not by its name.
	CloudIDs        bool
	MachineID       string
	FailAfterCreate bool
	OutageFile      string
	// NIC: Create makes the machine's network interface first.
	NIC bool
	// Daemon: Create starts a process that leaves the plugin's process
	// group and keeps its output open (fake-daemon).
	Daemon bool
}

// New returns an unconfigured plugin driver.
func New() *Driver {
	return &Driver{BaseDriver: &drivers.BaseDriver{}}
}

// DriverName is the plugin's name.
func (d *Driver) DriverName() string { return Name }

// CrashFlagsFile is the file in the store path whose presence makes the
// plugin crash once, asked for its flags.
const CrashFlagsFile = "fake-crash-flags"

// Files in the store path whose presence makes a call of the plugin never
// return: a plugin waiting on a cloud that does not answer.
const (
	HangFlags          = "fake-hang-flags"
	HangState          = "fake-hang-state"
	HangRemove         = "fake-hang-remove"
	HangPreCreateCheck = "fake-hang-precreatecheck"
)

// TokenEnvVar is the environment variable fake-token declares.
const TokenEnvVar = "FAKE_TOKEN"

// RevokedFile, in fake-dir, lists the tokens the cloud no longer takes,
// one a line.
const RevokedFile = "revoked"

// EnvFile is the file in the store path which, when it exists, gets the
// plugin's environment when it is asked for its flags.
const EnvFile = "fake-env"

// hangWhile makes the call never return while the store path holds the
// file call, once it has written call.hung there.
func (d *Driver) hangWhile(call string) {
	if d.StorePath == "" {
		return
	}
	if _, err := os.Stat(filepath.Join(d.StorePath, call)); err != nil {
		return
	}
	if err := os.WriteFile(filepath.Join(d.StorePath, call+".hung"), nil, 0o600); err != nil {
		return
	}
	select {}
}

// GetCreateFlags declares one flag of each type.
func (d *Driver) GetCreateFlags() []mcnflag.Flag {
	if env := filepath.Join(d.StorePath, EnvFile); d.StorePath != "" {
		if _, err := os.Stat(env); err == nil {
			_ = os.WriteFile(env, []byte(strings.Join(os.Environ(), "\n")+"\n"), 0o600)
		}
	}
	d.hangWhile(HangFlags)
	if crash := filepath.Join(d.StorePath, CrashFlagsFile); d.StorePath != "" && os.Remove(crash) == nil {
		fmt.Fprintln(os.Stderr, "fatal error: runtime: out of memory")
		os.Exit(2)
	}
	return createFlags()
}

// createFlags are the plugin's flags.
func createFlags() []mcnflag.Flag {
	return []mcnflag.Flag{
		mcnflag.StringFlag{Name: "fake-dir", Usage: "directory the machines are recorded in"},
		mcnflag.IntFlag{Name: "fake-cpus", Usage: "CPUs of a machine", Value: 2},
		mcnflag.StringSliceFlag{Name: "fake-tags", Usage: "tags of a machine"},
		mcnflag.StringSliceFlag{Name: "fake-copy-files", Usage: "files copied to the machine"},
		mcnflag.BoolFlag{Name: "fake-debug", Usage: "debug output"},
		mcnflag.BoolFlag{Name: "fake-insecure", Usage: "Disable TLS certificate checking of the cloud's API."},
		mcnflag.StringFlag{Name: "fake-userdata", Usage: "file with the machine's user data"},
		mcnflag.StringFlag{Name: "fake-token", Usage: "an API token, as clouds take", EnvVar: TokenEnvVar},
		mcnflag.StringFlag{Name: "fake-ssh-host", Usage: "SSH host of every machine", Value: "127.0.0.1"},
		mcnflag.IntFlag{Name: "fake-ssh-port", Usage: "SSH port of every machine", Value: 22},
		mcnflag.StringFlag{Name: "fake-ssh-user", Usage: "SSH user of every machine", Value: "root"},
		mcnflag.StringFlag{Name: "fake-ssh-key", Usage: "SSH private key file of every machine"},
		mcnflag.BoolFlag{Name: "fake-fail-create", Usage: "fail every Create"},
		mcnflag.BoolFlag{Name: "fake-fail-create-no-room", Usage: "fail every Create as amazonec2 does when EC2 has no capacity"},
		mcnflag.BoolFlag{Name: "fake-echo", Usage: "quote every value given in output and errors"},
		mcnflag.IntFlag{Name: "fake-chatter", Usage: "bytes of the one line Create prints to stdout and stderr"},
		mcnflag.IntFlag{Name: "fake-error-bytes", Usage: "fail Create with an error of this many bytes, quoting the token"},
		mcnflag.BoolFlag{Name: "fake-hang-create", Usage: "make Create never return"},
		mcnflag.BoolFlag{Name: "fake-hang-child", Usage: "make the hung Create wait on a child process"},
		mcnflag.BoolFlag{Name: "fake-fail-remove", Usage: "fail every Remove of a machine that exists"},
		mcnflag.BoolFlag{Name: "fake-cloud-ids", Usage: "find machines by the id Create gives them, not by name"},
		mcnflag.BoolFlag{Name: "fake-fail-after-create", Usage: "fail every Create once the machine exists"},
		mcnflag.StringFlag{Name: "fake-outage", Usage: "a file while which exists every GetState and Remove fails"},
		mcnflag.BoolFlag{Name: "fake-nic", Usage: "make a network interface before the machine"},
		mcnflag.BoolFlag{Name: "fake-daemon", Usage: "start a process in a session of its own that keeps the plugin's output"},
	}
}

// NoRoomError is Create's error with fake-fail-create-no-room: amazonec2's
// words for EC2's InsufficientInstanceCapacity, as the AWS SDK quotes it.
const NoRoomError = "Error launching instance: InsufficientInstanceCapacity: We currently do not have sufficient m5.large capacity " +
	"in the Availability Zone you requested (us-east-1a).\n\tstatus code: 500, request id: 6f1c0b5e-fake"

// UnmarshalJSON loads a saved configuration, and then takes fake-token from
// the command line or its environment variable when it is set there, as
// rancher/machine's amazonec2 does with its access keys.
func (d *Driver) UnmarshalJSON(data []byte) error {
	type saved Driver
	target := saved(*d)
	if err := json.Unmarshal(data, &target); err != nil {
		return fmt.Errorf("error unmarshalling driver config from JSON: %w", err)
	}
	*d = Driver(target)
	opts := rpcdriver.GetDriverOpts(createFlags(), os.Args)
	if _, ok := opts.Values["fake-token"]; ok {
		d.Token = opts.String("fake-token")
	}
	return nil
}

// refused is the cloud's error for a call made with a revoked token.
func (d *Driver) refused() error {
	data, err := os.ReadFile(filepath.Join(d.Dir, RevokedFile))
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" && line == d.Token {
			return errors.New("fake: AuthFailure: the token was revoked, the cloud could not authenticate the request")
		}
	}
	return nil
}

// SetConfigFromFlags reads the flags.
func (d *Driver) SetConfigFromFlags(opts drivers.DriverOptions) error {
	d.Dir = opts.String("fake-dir")
	if d.Dir == "" {
		return errors.New("fake-dir is required")
	}
	d.CPUs = opts.Int("fake-cpus")
	d.Tags = opts.StringSlice("fake-tags")
	d.Debug = opts.Bool("fake-debug")
	d.Insecure = opts.Bool("fake-insecure")
	d.UserDataFile = opts.String("fake-userdata")
	d.CopyFiles = opts.StringSlice("fake-copy-files")
	d.Token = opts.String("fake-token")
	d.IPAddress = opts.String("fake-ssh-host")
	d.SSHPort = opts.Int("fake-ssh-port")
	d.SSHUser = opts.String("fake-ssh-user")
	d.SSHKey = opts.String("fake-ssh-key")
	d.FailCreate = opts.Bool("fake-fail-create")
	d.FailCreateNoRoom = opts.Bool("fake-fail-create-no-room")
	d.Echo = opts.Bool("fake-echo")
	d.Chatter = opts.Int("fake-chatter")
	d.ErrorBytes = opts.Int("fake-error-bytes")
	d.HangCreate = opts.Bool("fake-hang-create")
	d.HangChild = opts.Bool("fake-hang-child")
	d.FailRemove = opts.Bool("fake-fail-remove")
	d.CloudIDs = opts.Bool("fake-cloud-ids")
	d.FailAfterCreate = opts.Bool("fake-fail-after-create")
	d.OutageFile = opts.String("fake-outage")
	d.NIC = opts.Bool("fake-nic")
	d.Daemon = opts.Bool("fake-daemon")
	return nil
}

// PreCreateCheck refuses a key file that does not exist, quoting it, as
// generic does.
func (d *Driver) PreCreateCheck() error {
	d.hangWhile(HangPreCreateCheck)
	if d.SSHKey != "" {
		if _, err := os.Stat(d.SSHKey); err != nil {
			return fmt.Errorf("SSH key does not exist: %q", d.SSHKey)
		}
	}
	return nil
}

// echoed is every value the plugin was given, and the key file's contents.
func (d *Driver) echoed() string {
	key, _ := os.ReadFile(d.SSHKey)
	return fmt.Sprintf("token=%q token-raw=%s key=%q key-raw:\n%s", d.Token, d.Token, key, key)
}

// path is the machine's file: by its name, or by its id under
// fake-cloud-ids ("" before Create gave it one).
func (d *Driver) path() string {
	if d.CloudIDs {
		return filepath.Join(d.Dir, "id-"+d.MachineID+".json")
	}
	return filepath.Join(d.Dir, d.MachineName+".json")
}

// Create records the machine; creating one that exists is an error, as it
// is for a cloud that refuses a duplicate name.
func (d *Driver) Create() error {
	if d.Echo {
		log.Infof("fake: creating with %s", d.echoed())
	}
	if d.Chatter > 0 {
		line := strings.Repeat("x", d.Chatter)
		fmt.Fprintln(os.Stdout, line)
		fmt.Fprintln(os.Stderr, line)
	}
	if d.ErrorBytes > 0 {
		var page strings.Builder
		page.WriteString("fake: the cloud answered: ")
		for page.Len() < d.ErrorBytes {
			fmt.Fprintf(&page, "<p>request refused for token=%s</p>\n", d.Token)
		}
		return errors.New(page.String())
	}
	if d.NIC {
		if err := os.WriteFile(d.nicPath(), []byte(d.MachineName), 0o600); err != nil {
			return err
		}
	}
	if d.HangCreate {
		if d.HangChild {
			child := exec.Command("sleep", "3600")
			child.Stdout, child.Stderr = os.Stdout, os.Stderr
			if err := child.Start(); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(d.Dir, d.MachineName+".child"), []byte(strconv.Itoa(child.Process.Pid)), 0o600); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(d.Dir, d.MachineName+".hanging"), nil, 0o600); err != nil {
			return err
		}
		select {}
	}
	if err := d.keepSSHKey(); err != nil {
		return err
	}
	if d.FailCreateNoRoom {
		//lint:ignore ST1005 amazonec2's own words, capital and all
		return errors.New(NoRoomError)
	}
	if d.FailCreate {
		if d.Echo {
			return fmt.Errorf("fake: out of machines (%s)", d.echoed())
		}
		return errors.New("fake: out of machines")
	}
	if d.CloudIDs {
		id := make([]byte, 8)
		if _, err := rand.Read(id); err != nil {
			return err
		}
		d.MachineID = fmt.Sprintf("%x", id)
	}
	if _, err := os.Stat(d.path()); err == nil {
		return fmt.Errorf("fake: machine %s already exists", d.MachineName)
	}
	m := Machine{Name: d.MachineName, CPUs: d.CPUs, Tags: d.Tags, Debug: d.Debug, Insecure: d.Insecure, Token: d.Token, CreatedAt: time.Now()}
	if d.UserDataFile != "" {
		data, err := os.ReadFile(d.UserDataFile)
		if err != nil {
			return err
		}
		m.UserData = string(data)
	}
	for _, f := range d.CopyFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if m.Files == nil {
			m.Files = map[string]string{}
		}
		m.Files[f] = string(data)
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := os.WriteFile(d.path(), data, 0o600); err != nil {
		return err
	}
	if err := d.logCall("create"); err != nil {
		return err
	}
	if d.FailAfterCreate {
		return fmt.Errorf("fake: machine %s did not come up", d.MachineName)
	}
	if d.Daemon {
		return d.startDaemon()
	}
	return nil
}

// startDaemon starts, for a machine just made, a process in a session of
// its own that keeps the plugin's stdout and stderr open (a hypervisor's
// VM process, a helper daemon), and writes its process ID to
// <fake-dir>/<name>.daemon.
func (d *Driver) startDaemon() error {
	daemon := exec.Command("sleep", "3600")
	daemon.Stdout, daemon.Stderr = os.Stdout, os.Stderr
	newSession(daemon)
	if err := daemon.Start(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d.Dir, d.MachineName+".daemon"), []byte(strconv.Itoa(daemon.Process.Pid)), 0o600)
}

// keepSSHKey puts the machine's SSH key in its store directory: a copy of
// fake-ssh-key, or a new key.
func (d *Driver) keepSSHKey() error {
	d.SSHKeyPath = d.ResolveStorePath("id_ed25519")
	var key []byte
	if d.SSHKey != "" {
		var err error
		if key, err = os.ReadFile(d.SSHKey); err != nil {
			return fmt.Errorf("unable to copy ssh key: %w", err)
		}
	} else {
		_, private, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return err
		}
		block, err := ssh.MarshalPrivateKey(private, "")
		if err != nil {
			return err
		}
		key = pem.EncodeToMemory(block)
	}
	if err := os.WriteFile(d.SSHKeyPath, key, 0o600); err != nil {
		return fmt.Errorf("unable to copy ssh key: %w", err)
	}
	return nil
}

// outage is the error of a call while the API is down (fake-outage): the
// outage file's contents, or what is said otherwise; nil when it is up.
func (d *Driver) outage(otherwise string) error {
	if d.OutageFile == "" {
		return nil
	}
	text, err := os.ReadFile(d.OutageFile)
	if err != nil {
		return nil
	}
	if len(text) > 0 {
		return errors.New(strings.TrimSpace(string(text)))
	}
	return errors.New(otherwise)
}

// GetState is Running for a recorded machine, an error otherwise.
func (d *Driver) GetState() (state.State, error) {
	d.hangWhile(HangState)
	if err := d.outage("fake: the API is down, cannot look up machine " + d.MachineName); err != nil {
		return state.Error, err
	}
	if err := d.refused(); err != nil {
		return state.Error, err
	}
	if _, err := os.Stat(d.path()); err != nil {
		return state.None, fmt.Errorf("fake: machine %s not found", d.MachineName)
	}
	return state.Running, nil
}

// Remove deletes the machine's record; removing one that is gone is an error.
func (d *Driver) Remove() error {
	d.hangWhile(HangRemove)
	if err := d.outage("fake: the API is down, cannot remove machine " + d.MachineName); err != nil {
		return err
	}
	if err := d.refused(); err != nil {
		return err
	}
	if _, err := os.Stat(d.path()); err == nil && d.FailRemove {
		if d.Echo {
			return fmt.Errorf("fake: cannot remove machine %s with %s", d.MachineName, d.echoed())
		}
		return fmt.Errorf("fake: cannot remove machine %s", d.MachineName)
	}
	if d.NIC {
		if err := os.Remove(d.nicPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("fake: removing the network interface of machine %s: %w", d.MachineName, err)
		}
		if _, err := os.Stat(d.path()); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	if err := os.Remove(d.path()); err != nil {
		return fmt.Errorf("fake: removing machine %s: %w", d.MachineName, err)
	}
	return d.logCall("remove")
}

// nicPath is the file of the machine's network interface (fake-nic).
func (d *Driver) nicPath() string {
	return filepath.Join(d.Dir, d.MachineName+".nic")
}

// Call is one machine the plugin made or removed: when, for which process
// (the plugin's parent, the node controller that started it), and what.
type Call struct {
	At     time.Time `json:"at"`
	Parent int       `json:"parent"`
	Op     string    `json:"op"`
	Name   string    `json:"name"`
	// Token is the fake-token the call was made with.
	Token string `json:"token,omitempty"`
}

const callLog = "calls.log"

// logCall appends the change just made to the directory's call log.
func (d *Driver) logCall(op string) error {
	line, err := json.Marshal(Call{At: time.Now(), Parent: os.Getppid(), Op: op, Name: d.MachineName, Token: d.Token})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(d.Dir, callLog), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	return err
}

// Calls reads the machines made and removed in dir, in the order made.
func Calls(dir string) ([]Call, error) {
	data, err := os.ReadFile(filepath.Join(dir, callLog))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var calls []Call
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" {
			continue
		}
		var c Call
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return nil, fmt.Errorf("%s: %w", callLog, err)
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// GetSSHHostname is the configured SSH host.
func (d *Driver) GetSSHHostname() (string, error) { return d.IPAddress, nil }

// GetURL is the machine's Docker URL, which nodeset does not use.
func (d *Driver) GetURL() (string, error) { return "tcp://" + d.IPAddress + ":2376", nil }

// Start, Stop, Restart and Kill act on nothing.
func (d *Driver) Start() error   { return nil }
func (d *Driver) Stop() error    { return nil }
func (d *Driver) Restart() error { return nil }
func (d *Driver) Kill() error    { return nil }

// MachineNames are the names of the machines recorded in dir, sorted.
func MachineNames(dir string) ([]string, error) {
	machines, err := Machines(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(machines))
	for name := range machines {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// Machines reads the machines recorded in dir.
func Machines(dir string) (map[string]Machine, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	out := map[string]Machine{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var m Machine
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, err
		}
		out[m.Name] = m
	}
	return out, nil
}

// Files in $HOME of a plugin served by ServeOldServiceName.
const (
	HeartbeatsFile = "fake-heartbeats"
	ClosedFile     = "fake-closed"
)

// ServeOldServiceName serves d as plugin.RegisterDriver does, but under the
// RPC service name of libmachine before 0.5.1 (RpcServerDriver) alone, as
// a plugin built with it does: its client must fall back to that name.
// Like a plugin, it exits when told to close, or when no heartbeat came for
// 10 seconds. Each heartbeat is a line of $HOME/fake-heartbeats, and a close
// writes $HOME/fake-closed before the plugin exits.
func ServeOldServiceName(d drivers.Driver) {
	server := rpc.NewServer()
	rpcd := rpcdriver.NewRPCServerDriver(d)
	if err := server.RegisterName(rpcdriver.RPCServiceNameV0, rpcd); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(listener.Addr())
	go http.Serve(listener, server) //nolint:errcheck // the process exits below
	home := os.Getenv("HOME")
	for {
		select {
		case <-rpcd.CloseCh:
			_ = os.WriteFile(filepath.Join(home, ClosedFile), nil, 0o600)
			os.Exit(0)
		case <-rpcd.HeartbeatCh:
			if f, err := os.OpenFile(filepath.Join(home, HeartbeatsFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				_, _ = f.WriteString("heartbeat\n")
				_ = f.Close()
			}
		case <-time.After(10 * time.Second):
			os.Exit(1)
		}
	}
}
