package dockermachine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/redact"
)

// JoinConfig is what a new machine needs to join the cluster.
type JoinConfig struct {
	// APIServerURL is the address the kubelet talks to.
	APIServerURL string
	// CACertBase64 is the cluster CA, base64-encoded PEM.
	CACertBase64 string
	// Token is a short-lived bootstrap token made for this machine alone.
	Token string
}

// Joiner makes a machine's bootstrap credentials, and forgets them once the
// machine is gone. Both are idempotent.
type Joiner interface {
	Join(ctx context.Context, machine string) (JoinConfig, error)
	Forget(ctx context.Context, machine string) error
}

// othersHost is the record of a machine of another namespace (or a static
// Node's, when record is a NodeSet's, and the other way round) whose host
// showed hostKey when it was first reached, or nil. The class's SSH key may open
// every host of a pool: a machine pointed at another tenant's host (an
// address its NodeSet may set, in a class that lists it in
// tenantOverrides) would have the join script run there as root, and that
// host's kubelet join as the tenant's Node. Machines of one namespace are
// one tenant's, which may share a host.
func (d *Driver) othersHost(ctx context.Context, record Record, hostKey string) (*Record, error) {
	records, err := d.store.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range records {
		if r.Name != record.Name && r.HostKey == hostKey && r.Owner.Namespace != record.Owner.Namespace {
			return &r, nil
		}
	}
	return nil, nil
}

// SSHDialTimeout bounds how long provisioning waits for a new machine's SSH
// server to answer.
var SSHDialTimeout = 3 * time.Minute

type joinSettings struct {
	script       string
	userDataFile string
	token        string
}

// secrets are the credentials in the join script: its bootstrap token.
func (j joinSettings) secrets() map[string][]byte {
	return map[string][]byte{"bootstrap token": []byte(j.token)}
}

// scrubbed is err without the bootstrap token.
func (j joinSettings) scrubbed(err error) error {
	return redact.Error(j.secrets(), err)
}

// prepareJoin makes the machine's join script: the environment it runs with,
// then the class's script or the built-in one. For UserData, the script is
// written to a private file whose name goes to the plugin's user-data option.
func (d *Driver) prepareJoin(ctx context.Context, machine drivers.Machine, dm *nodesetv1alpha1.DockerMachine) (joinSettings, func(), error) {
	noop := func() {}
	p := dm.Provisioning
	if p == nil {
		return joinSettings{}, noop, nil
	}
	if d.joiner == nil {
		return joinSettings{}, noop, errors.New("docker-machine provisioning needs bootstrap tokens, and the node controller has no joiner")
	}
	cfg, err := d.joiner.Join(ctx, machine.Name)
	if err != nil {
		return joinSettings{}, noop, fmt.Errorf("making the bootstrap token of machine %s: %w", machine.Name, err)
	}
	if p.APIServerURL != "" {
		cfg.APIServerURL = p.APIServerURL
	}
	env := map[string]string{
		"NODE_NAME":          machine.Name,
		"API_SERVER_URL":     cfg.APIServerURL,
		"BOOTSTRAP_TOKEN":    cfg.Token,
		"CA_CERT_BASE64":     cfg.CACertBase64,
		"KUBERNETES_VERSION": p.KubernetesVersion,
	}
	script := p.Script
	if script == "" {
		script = DefaultJoinScript
	}
	settings := joinSettings{script: withEnvironment(env, script), token: cfg.Token}
	if p.Method != nodesetv1alpha1.ProvisioningUserData {
		return settings, noop, nil
	}
	f, err := os.CreateTemp("", "nodeset-userdata-*")
	if err != nil {
		return joinSettings{}, noop, err
	}
	cleanup := func() { _ = os.Remove(f.Name()) }
	if _, err := f.WriteString(settings.script); err != nil {
		f.Close()
		cleanup()
		return joinSettings{}, noop, err
	}
	if err := f.Close(); err != nil {
		cleanup()
		return joinSettings{}, noop, err
	}
	settings.userDataFile = f.Name()
	return settings, cleanup, nil
}

// withEnvironment prefixes a shell script with exports of env.
func withEnvironment(env map[string]string, script string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\nset -e\n")
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(env[k]))
	}
	b.WriteString(strings.TrimPrefix(script, "#!/bin/sh\n"))
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// errHostKeyChanged is a host that does not have the host key a machine
// showed the first time.
var errHostKeyChanged = errors.New("host key differs from the machine's")

// provisionSSH runs the join script on the machine over SSH with the host,
// port, user and key its plugin reports, waiting for the SSH server to come
// up. The first time, like docker-machine, it takes the host key of the
// machine it has just created as it comes, and records it before the
// script is sent; from then on a host without that key (the address given
// to another machine) is sent nothing. The script's output is not logged:
// it may print the token.
func (d *Driver) provisionSSH(ctx context.Context, p Plugin, record *Record, join joinSettings) error {
	name := record.Name
	host, err := p.GetSSHHostname()
	if err != nil {
		return fmt.Errorf("SSH host of machine %s: %w", name, err)
	}
	port, err := p.GetSSHPort()
	if err != nil {
		return fmt.Errorf("SSH port of machine %s: %w", name, err)
	}
	key, err := os.ReadFile(p.GetSSHKeyPath())
	if err != nil {
		return fmt.Errorf("SSH key of machine %s: %w", name, err)
	}
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		return fmt.Errorf("SSH key of machine %s: %w", name, err)
	}
	address := net.JoinHostPort(host, strconv.Itoa(port))
	var known ssh.PublicKey
	if record.HostKey != "" {
		if known, _, _, _, err = ssh.ParseAuthorizedKey([]byte(record.HostKey)); err != nil {
			return fmt.Errorf("machine %s: the recorded SSH host key does not parse: %w", name, err)
		}
	}
	var client *ssh.Client
	var seen ssh.PublicKey
	deadline := time.Now().Add(SSHDialTimeout)
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 10*time.Second) {
		client, seen, err = dialSSH(address, p.GetSSHUsername(), signer, known)
		if err == nil {
			break
		}
		if errors.Is(err, errHostKeyChanged) {
			return fmt.Errorf("machine %s: not sending the join script to %s: its %v: the address may be another machine's now; "+
				"delete the Node to have its machine replaced", name, address, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("machine %s: SSH to %s: %w", name, address, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	defer client.Close()
	if known == nil {
		hostKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(seen)))
		other, err := d.othersHost(ctx, *record, hostKey)
		if err != nil {
			return fmt.Errorf("machine %s: looking for another tenant's machine on its host: %w", name, err)
		}
		if other != nil {
			// The tenant is told no more than that: which machine of
			// which namespace has the host is the admin's to read.
			// The address is the plugin's text: it may quote a credential.
			klog.FromContext(ctx).Info("Refused a machine the host of another namespace's machine", "machine", name,
				"namespace", record.Owner.Namespace, "address", credentialValues.String(address), "hostOf", other.Name, "hostOfNamespace", other.Owner.Namespace)
			return fmt.Errorf("machine %s: not sending the join script to %s: the host there shows the SSH host key of a machine "+
				"that is not of this NodeSet's namespace; a NodeSet may not take another tenant's host "+
				"(point the machine at another host; the node controller's log names the machine that has it)", name, address)
		}
		// Recorded before the script goes: a retry after a crash sends
		// it to this host only.
		recorded := *record
		recorded.HostKey = hostKey
		if err := d.store.Put(ctx, &recorded); err != nil {
			return fmt.Errorf("machine %s: recording its SSH host key: %w", name, err)
		}
		*record = recorded
	}
	session, err := client.NewSession()
	if err != nil {
		return fmt.Errorf("machine %s: SSH session: %w", name, err)
	}
	defer session.Close()
	session.Stdin = strings.NewReader(join.script)
	// Stdout and Stderr stay nil: the output is discarded, not logged.
	if err := d.fence(); err != nil {
		return fmt.Errorf("machine %s: not running the join script: %w", name, err)
	}
	// The address is the plugin's text: it may quote a credential.
	klog.FromContext(ctx).V(2).Info("Running the join script over SSH", "machine", name, "address", credentialValues.String(address))
	ran := make(chan error, 1)
	go func() { ran <- session.Run("sh -s") }()
	select {
	case err := <-ran:
		if err != nil {
			return fmt.Errorf("machine %s: the join script failed over SSH: %w", name, err)
		}
		return nil
	case <-ctx.Done():
		// Closing the connection ends the session; the next attempt runs
		// the script again (join scripts are idempotent).
		_ = client.Close()
		<-ran
		return fmt.Errorf("machine %s: the join script did not finish over SSH: %w", name, context.Cause(ctx))
	}
}

// dialSSH connects to address and returns the host key the server showed.
// With known set, a server showing another key is refused (an error
// wrapping errHostKeyChanged), and only known's algorithms are offered, so
// a server with several host keys shows the one recorded.
func dialSSH(address, user string, signer ssh.Signer, known ssh.PublicKey) (*ssh.Client, ssh.PublicKey, error) {
	var mu sync.Mutex
	var seen ssh.PublicKey
	var changed error
	config := &ssh.ClientConfig{
		User: user,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			mu.Lock()
			defer mu.Unlock()
			seen = key
			if known != nil && !bytes.Equal(key.Marshal(), known.Marshal()) {
				changed = fmt.Errorf("%w: it shows %s, the machine showed %s", errHostKeyChanged, ssh.FingerprintSHA256(key), ssh.FingerprintSHA256(known))
				return changed
			}
			// The first connection to a machine just made: its key is
			// taken as it comes, and recorded.
			return nil
		},
		Timeout: 10 * time.Second,
	}
	if known != nil {
		config.HostKeyAlgorithms = hostKeyAlgorithms(known.Type())
	}
	client, err := ssh.Dial("tcp", address, config)
	mu.Lock()
	defer mu.Unlock()
	if changed != nil {
		return nil, seen, changed
	}
	return client, seen, err
}

// hostKeyAlgorithms are the algorithms a host key of keyType signs with.
func hostKeyAlgorithms(keyType string) []string {
	if keyType == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{keyType}
}

func (d *Driver) forgetJoin(ctx context.Context, name string) error {
	if d.joiner == nil {
		return nil
	}
	return d.joiner.Forget(ctx, name)
}

func binaryModTime(path string) time.Time {
	info, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return info.ModTime()
}

// DefaultJoinScript installs the kubelet of KUBERNETES_VERSION and starts it
// under systemd with the bootstrap token, registering as NODE_NAME. It
// expects a systemd Linux machine with a container runtime listening on
// containerd's socket.
const DefaultJoinScript = `#!/bin/sh
arch=$(uname -m); case "$arch" in x86_64) arch=amd64;; aarch64) arch=arm64;; esac
mkdir -p /etc/kubernetes/pki /var/lib/kubelet /usr/local/bin
curl -fsSLo /usr/local/bin/kubelet "https://dl.k8s.io/release/${KUBERNETES_VERSION}/bin/linux/${arch}/kubelet"
chmod 0755 /usr/local/bin/kubelet
echo "$CA_CERT_BASE64" | base64 -d > /etc/kubernetes/pki/ca.crt
cat > /etc/kubernetes/bootstrap-kubelet.conf <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster: {server: "${API_SERVER_URL}", certificate-authority: /etc/kubernetes/pki/ca.crt}
users:
- name: bootstrap
  user: {token: "${BOOTSTRAP_TOKEN}"}
contexts:
- name: bootstrap
  context: {cluster: cluster, user: bootstrap}
current-context: bootstrap
EOF
chmod 0600 /etc/kubernetes/bootstrap-kubelet.conf
cat > /etc/kubernetes/kubelet-config.yaml <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}, webhook: {enabled: true}, anonymous: {enabled: false}}
authorization: {mode: Webhook}
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
rotateCertificates: true
EOF
cat > /etc/systemd/system/kubelet.service <<EOF
[Unit]
Description=kubelet
After=containerd.service
[Service]
ExecStart=/usr/local/bin/kubelet --hostname-override=${NODE_NAME} --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf --config=/etc/kubernetes/kubelet-config.yaml
Restart=always
[Install]
WantedBy=multi-user.target
EOF
systemctl daemon-reload
systemctl enable --now kubelet
`
