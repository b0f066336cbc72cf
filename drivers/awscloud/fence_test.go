package awscloud

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChangingCallsAreFenced: while the fence refuses, a call that may
// change something is not sent (and not retried); reads go on. Once the
// fence lets it through, the call is sent and its User-Agent says when it
// was let through.
func TestChangingCallsAreFenced(t *testing.T) {
	var (
		mu       sync.Mutex
		received []string // action and User-Agent
	)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		mu.Lock()
		received = append(received, form.Get("Action")+" "+r.Header.Get("User-Agent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/xml")
		_, _ = w.Write([]byte(`<` + form.Get("Action") + `Response xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><` + form.Get("Action") +
			`Result></` + form.Get("Action") + `Result><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></` + form.Get("Action") + `Response>`))
	}))
	t.Cleanup(server.Close)
	leading := false
	fence := func() error {
		if !leading {
			return errors.New("write refused: this replica may not lead")
		}
		return nil
	}
	clients := NewSDKClients(SDKConfig{Endpoint: server.URL, Fence: fence})
	asg, _, err := clients(context.Background(), "us-east-1", map[string][]byte{
		CredentialAccessKeyID: []byte("AKIDEXAMPLE"), CredentialSecretAccessKey: []byte("secret")})
	require.NoError(t, err)
	ctx := context.Background()
	setDesired := &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String("g"), DesiredCapacity: aws.Int32(3)}

	_, err = asg.SetDesiredCapacity(ctx, setDesired)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SetDesiredCapacity not sent: write refused")
	_, err = asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{})
	require.NoError(t, err, "a read is not fenced")
	mu.Lock()
	require.Len(t, received, 1, "only the read was sent: %v", received)
	assert.Regexp(t, `^DescribeAutoScalingGroups `, received[0])
	assert.NotContains(t, received[0], FencedAtPrefix)
	mu.Unlock()

	leading = true
	_, err = asg.SetDesiredCapacity(ctx, setDesired)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, received, 2)
	assert.Regexp(t, `^SetDesiredCapacity .* fenced-at/[0-9]{13}$`, received[1])
}

func TestReadOnlyOperations(t *testing.T) {
	for op, want := range map[string]bool{
		"DescribeInstances": true, "ListNodegroups": true, "GetCallerIdentity": true,
		"SetDesiredCapacity": false, "TerminateInstances": false, "CreateTags": false, "ReceiveMessage": false, "CompleteLifecycleAction": false,
	} {
		assert.Equal(t, want, ReadOnly(op), op)
	}
}
