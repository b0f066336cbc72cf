package framework

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// StartMoto starts moto_server (the AWS emulator) on a loopback port for
// the test and returns its endpoint; it stops with the test. Its log is in
// the test's temporary directory.
//
// moto picks its own port (port 0) and the endpoint is read from its log:
// a port chosen here and handed to it would be free only until moto binds
// it, a second or two later, and a test process running beside this one
// could pick it too, leaving both tests talking to one moto.
func StartMoto(t testing.TB) string {
	t.Helper()
	return startMoto(t, nil)
}

// startMoto is StartMoto with prelude run before the launcher's code.
func startMoto(t testing.TB, prelude []byte) string {
	t.Helper()
	SkipIfShort(t, "moto_server")
	path, err := exec.LookPath("moto_server")
	if err != nil {
		t.Fatalf("moto_server is not on PATH (pip install 'moto[server]'): %v", err)
	}
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "moto.log"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-H", "127.0.0.1", "-p", "0"}
	cmd := exec.Command(path, args...)
	// moto_server with its known faults fixed, when the python3 on PATH is
	// the one moto is installed in (as with pip and pyenv installs).
	if python, err := exec.LookPath("python3"); err == nil && exec.Command(python, "-c", "import moto.server").Run() == nil {
		code, err := motoLauncher()
		if err != nil {
			t.Fatal(err)
		}
		launcher := filepath.Join(dir, "moto_launcher.py")
		if err := os.WriteFile(launcher, append(prelude, code...), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(python, append([]string{launcher}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting moto_server: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		logFile.Close()
		// moto answers an exception of its own with a bare 500; the
		// traceback, in its log, is the only account of what failed.
		if logged, err := os.ReadFile(logFile.Name()); err == nil && t.Failed() {
			if tracebacks := motoTracebacks(logged, 3); tracebacks != "" {
				t.Logf("moto_server's last tracebacks:\n%s", tracebacks)
			}
		}
	})
	running := regexp.MustCompile(`Running on (http://127\.0\.0\.1:[0-9]+)`)
	client := &http.Client{Timeout: time.Second}
	endpoint := ""
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if endpoint == "" {
			logged, _ := os.ReadFile(logFile.Name())
			m := running.FindSubmatch(logged)
			if m == nil {
				continue
			}
			endpoint = string(m[1])
		}
		resp, err := client.Get(endpoint + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			return endpoint
		}
	}
	t.Fatalf("moto_server did not start (endpoint %q); see %s", endpoint, logFile.Name())
	return ""
}

// motoTracebacks returns the last n Python tracebacks in moto's log, each
// from its "Traceback" line to the exception's line (the first after it
// that is not indented).
func motoTracebacks(log []byte, n int) string {
	var blocks []string
	lines := strings.Split(string(log), "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "Traceback (most recent call last)") {
			continue
		}
		j := i + 1
		for j < len(lines) && (strings.HasPrefix(lines[j], " ") || strings.HasPrefix(lines[j], "\t")) {
			j++
		}
		end := min(j+1, len(lines))
		blocks = append(blocks, strings.Join(lines[i:end], "\n"))
		i = end - 1
	}
	return strings.Join(blocks[max(0, len(blocks)-n):], "\n")
}

// motoLauncher is hack/moto-launcher.py: moto_server with what it gets
// wrong and AWS does not fixed (see the file), shared with hack/moto.sh so
// that a user can run on moto what the tests run.
func motoLauncher() ([]byte, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(root, "hack", "moto-launcher.py"))
}

// MotoNetwork is what the AWS tests launch into: a VPC, a subnet in the
// region's zone a, and an AMI moto offers.
type MotoNetwork struct {
	VPC, Subnet, Image string
}

// NewMotoNetwork makes a MotoNetwork in moto through ec2c.
func NewMotoNetwork(t testing.TB, ec2c *ec2.Client, region string) MotoNetwork {
	t.Helper()
	ctx := context.Background()
	vpc, err := ec2c.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: aws.String("10.0.0.0/16")})
	if err != nil {
		t.Fatalf("creating a VPC in moto: %v", err)
	}
	subnet, err := ec2c.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: vpc.Vpc.VpcId, CidrBlock: aws.String("10.0.1.0/24"),
		AvailabilityZone: aws.String(region + "a")})
	if err != nil {
		t.Fatalf("creating a subnet in moto: %v", err)
	}
	images, err := ec2c.DescribeImages(ctx, &ec2.DescribeImagesInput{})
	if err != nil || len(images.Images) == 0 {
		t.Fatalf("moto offers no AMI: %v", err)
	}
	return MotoNetwork{VPC: aws.ToString(vpc.Vpc.VpcId), Subnet: aws.ToString(subnet.Subnet.SubnetId), Image: aws.ToString(images.Images[0].ImageId)}
}

// SecondZoneSubnet makes a subnet in zone, in the VPC of subnet, and returns
// its id: for groups whose subnets span zones.
func SecondZoneSubnet(t testing.TB, ec2c *ec2.Client, subnet, zone string) string {
	t.Helper()
	ctx := context.Background()
	described, err := ec2c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{subnet}})
	if err != nil || len(described.Subnets) == 0 {
		t.Fatalf("describing subnet %s in moto: %v", subnet, err)
	}
	second, err := ec2c.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: described.Subnets[0].VpcId,
		CidrBlock: aws.String("10.0.2.0/24"), AvailabilityZone: aws.String(zone)})
	if err != nil {
		t.Fatalf("creating a subnet in %s in moto: %v", zone, err)
	}
	return aws.ToString(second.Subnet.SubnetId)
}
