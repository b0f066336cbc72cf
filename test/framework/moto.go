package framework

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// StartMoto starts moto_server (the AWS emulator) on a free loopback port
// for the test and returns its endpoint; it stops with the test. Its log is
// in the test's temporary directory.
func StartMoto(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("moto_server")
	if err != nil {
		t.Fatalf("moto_server is not on PATH (pip install 'moto[server]'): %v", err)
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "moto.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "-H", "127.0.0.1", "-p", strconv.Itoa(ports[0]))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting moto_server: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		logFile.Close()
	})
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := client.Get(endpoint + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			return endpoint
		}
	}
	t.Fatalf("moto_server did not answer on %s; see %s", endpoint, logFile.Name())
	return ""
}
