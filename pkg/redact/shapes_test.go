package redact

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestShapes: credentials no Set holds (the controller's own, a plugin's)
// are found by their form, in each way an error or a tool's output prints
// them; text that only speaks of them is kept.
func TestShapes(t *testing.T) {
	const (
		keyID   = "AKIAIOSFODNN7EXAMPLE"
		secret  = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
		session = "IQoJb3JpZ2luX2VjEHcaCXVzLWVhc3QtMSJHMEUCIQDexampleexampleexample0123456789"
		jwt     = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJpc3MiOiJrdWJlcm5ldGVzIiwic3ViIjoic3lzdGVtIn0.c2lnbmF0dXJlc2lnbmF0dXJlc2ln"
		pem     = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn\n-----END RSA PRIVATE KEY-----"
		pw      = "s3cr3t-P4ssw0rd"
	)
	for _, tt := range []struct {
		name, text, gone, want string
	}{
		{"access key id", "InvalidClientTokenId: The security token for " + keyID + " is invalid", keyID, "[redacted:aws-access-key-id]"},
		{"temporary key id", "credential ASIAY34FZKBOKMUTVV7A/20250101/us-east-1", "ASIAY34FZKBOKMUTVV7A", "[redacted:aws-access-key-id]"},
		{"session token", "x-amz-security-token:" + session + "\nhost:ec2", session, "[redacted:aws-session-token]"},
		{"jwt", "token " + jwt + " rejected", jwt, "[redacted:jwt]"},
		{"bearer", "Authorization: Bearer 0123456789abcdef0123", "0123456789abcdef0123", "Bearer [redacted:authorization]"},
		{"pem", "key: " + pem + " unusable", "MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn", "[redacted:private-key]"},
		{"pem escaped", `{"key":"` + "-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXk\\n-----END OPENSSH PRIVATE KEY-----" + `"}`, "b3BlbnNzaC1rZXk", "[redacted:private-key]"},
		{"pem cut", "key " + pem[:50], "MIIEpAIBAAK", "[redacted:private-key]"},
		{"url password", "dial https://admin:" + pw + "@vcenter.example:443/sdk failed", pw, "https://admin:[redacted:url-password]@vcenter.example"},
		{"key=value", "aws_secret_access_key=" + secret + " rejected", secret, "aws_secret_access_key=[redacted:aws_secret_access_key]"},
		{"key: value", "password: " + pw, pw, "password: [redacted:password]"},
		{"json", `{"SecretAccessKey":"` + secret + `"}`, secret, `"SecretAccessKey":"[redacted:secretaccesskey]"`},
		{"json quoted", `error "{\"password\":\"` + pw + `\"}"`, pw, `\"password\":\"[redacted:password]`},
		{"flag =", "--amazonec2-secret-key=" + secret, secret, "--amazonec2-secret-key=[redacted:amazonec2-secret-key]"},
		{"flag value", "--openstack-password " + pw + " --openstack-username u", pw, "--openstack-password [redacted:openstack-password] --openstack-username u"},
		{"access token flag", "--digitalocean-access-token=dop_v1_0123456789abcdef", "dop_v1_0123456789abcdef", "[redacted:digitalocean-access-token]"},
		{"vsphere", "--vmwarevsphere-password='" + pw + "'", pw, "[redacted:vmwarevsphere-password]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Shapes(tt.text)
			assert.NotContains(t, got, tt.gone)
			assert.Contains(t, got, tt.want)
			err := ShapesOf(fmt.Errorf("%s: %w", tt.text, errSentinel))
			assert.NotContains(t, err.Error(), tt.gone)
			assert.ErrorIs(t, err, errSentinel, "the kind of error stays")
		})
	}
	for _, kept := range []string{
		"spec.credentialsSecretRef: Secret nodeset-system/aws not found",
		"the security token included in the request is expired",
		"an AutoScalingGroupName or LifecycleActionToken Auto Scaling does not give",
		"--openstack-password --openstack-username",
		"azure.BearerAuthorizer#WithAuthorization: Failed to refresh the Token",
		"https://vcenter.example:443/sdk",
		"i-0123456789abcdef0 in ami-0123456789abcdef0",
	} {
		assert.Equal(t, kept, Shapes(kept))
	}
}

// TestShapesKeepKnownNames: a value a Set names keeps its name when Shapes
// comes after the Set.
func TestShapesKeepKnownNames(t *testing.T) {
	s := New(map[string][]byte{"aws_secret_access_key": []byte("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"), "ssh_key": []byte(pemKey)})
	assert.Equal(t, "SecretAccessKey=[redacted:aws_secret_access_key]", Shapes(s.String("SecretAccessKey=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")))
	assert.Contains(t, Shapes(s.String("key "+pemKey)), "[redacted:ssh_key]")
}
