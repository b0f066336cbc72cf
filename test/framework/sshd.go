package framework

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSHD is an OpenSSH server on a loopback port, for tests that provision
// machines over SSH. It accepts one key, for the user running the tests.
type SSHD struct {
	Port int
	// User to log in as, and KeyFile, the private key it accepts.
	User    string
	KeyFile string
	cmd     *exec.Cmd
}

// SSHDPath is where Debian's openssh-server puts sshd
// (hack/install-test-deps.sh installs it).
const SSHDPath = "/usr/sbin/sshd"

// StartSSHD starts sshd in dir. Stop it with Stop.
func StartSSHD(dir string) (*SSHD, error) {
	if _, err := os.Stat(SSHDPath); err != nil {
		return nil, fmt.Errorf("%s is missing; run hack/install-test-deps.sh (Debian's openssh-server): %w", SSHDPath, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Privilege separation needs its directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, err
	}
	if _, err := writeKey(filepath.Join(dir, "host_key")); err != nil {
		return nil, err
	}
	userKey, err := writeKey(filepath.Join(dir, "id_ed25519"))
	if err != nil {
		return nil, err
	}
	authorized := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authorized, ssh.MarshalAuthorizedKey(userKey), 0o600); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	user := os.Getenv("USER")
	if user == "" {
		user = "root"
	}
	config := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
AuthorizedKeysFile %s
PidFile %s
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
PermitUserEnvironment no
`, port, filepath.Join(dir, "host_key"), authorized, filepath.Join(dir, "sshd.pid"))
	configFile := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "sshd.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(SSHDPath, "-D", "-e", "-f", configFile)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &SSHD{Port: port, User: user, KeyFile: filepath.Join(dir, "id_ed25519"), cmd: cmd}
	for deadline := time.Now().Add(10 * time.Second); ; {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			conn.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			log, _ := os.ReadFile(filepath.Join(dir, "sshd.log"))
			return nil, fmt.Errorf("sshd did not listen on port %d: %s", port, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills sshd.
func (s *SSHD) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

// writeKey writes a new ed25519 private key in OpenSSH format and returns
// its public half.
func writeKey(path string) (ssh.PublicKey, error) {
	public, private, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(private, "")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return ssh.NewPublicKey(public)
}

// JoinScript stands in for the kubelet in a join script run over SSH on a
// "machine": it reports the Node Ready under the name it was given, as a
// kubelet started with --hostname-override would (with kubectl and
// kubeconfig), and appends that name to <joinDir>/joined.
func JoinScript(joinDir, kubectl, kubeconfig string) string {
	return fmt.Sprintf(`test -n "$BOOTSTRAP_TOKEN"
echo "$NODE_NAME" >> %[1]s/joined
now=$(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ)
%[2]s --kubeconfig=%[3]s patch node "$NODE_NAME" --subresource=status --type=merge \
  -p "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",\"message\":\"joined over SSH\",\"lastHeartbeatTime\":\"$now\",\"lastTransitionTime\":\"$now\"}]}}"
`, joinDir, kubectl, kubeconfig)
}
