package node

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/component"
)

// plantedSecretKey is an AWS-style secret access key: "/" and "+" make its
// URL-escaped forms differ from it.
const plantedSecretKey = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYplanted31"

// echoes are the ways a driver or its cloud may quote the key.
func echoes(value string) string {
	quoted, _ := json.Marshal(map[string]string{"SecretAccessKey": value})
	return strings.Join([]string{
		"key " + value,
		"url https://sts.example/?X-Secret=" + url.QueryEscape(value),
		"basic " + base64.StdEncoding.EncodeToString([]byte("AKIAPLANTED:"+value)),
		"body " + string(quoted),
	}, "; ")
}

// assertNoEcho fails when text holds the key in any of the forms echoes
// uses.
func assertNoEcho(t *testing.T, text, where string) {
	t.Helper()
	for _, form := range []string{plantedSecretKey, url.QueryEscape(plantedSecretKey),
		base64.StdEncoding.EncodeToString([]byte("AKIAPLANTED:" + plantedSecretKey))[16:40]} {
		assert.NotContains(t, text, form, where)
	}
}

// TestGroupSyncErrorsLogNoCredential: the error a group sync returns is
// logged by the worker, as a Node sync's is; a group driver's error that
// quotes the class's credentials must not carry them there.
func TestGroupSyncErrorsLogNoCredential(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "nodeset-system", Name: "aws"},
		Data: map[string][]byte{"aws_secret_access_key": []byte(plantedSecretKey)}}
	g := newGroupFixture(t, 2, secret)
	obj, exists, err := g.classIndexer.GetByKey("asg")
	require.NoError(t, err)
	require.True(t, exists)
	class := obj.(*nodesetv1alpha1.NodeClass).DeepCopy()
	class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "aws"}
	require.NoError(t, g.classIndexer.Update(class))
	g.group.ensureErr = fmt.Errorf("creating Auto Scaling group: %w: %s", drivers.ErrThrottled, echoes(plantedSecretKey))

	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(4)))
	ctx := klog.NewContext(context.Background(), logger)
	err = g.controller.syncGroup(ctx, "team-a/web")
	require.Error(t, err)
	require.NotEmpty(t, g.group.ensured, "the driver was called")
	assert.ErrorIs(t, err, drivers.ErrThrottled, "the kind of error stays")
	assertNoEcho(t, err.Error(), "the error the sync returns")

	// The group worker logs what the sync returns.
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	queue.Add("team-a/web")
	workers, stop := context.WithCancel(ctx)
	component.StartWorkers(workers, queue, 1, "nodeset", g.controller.syncGroup)
	logged := func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
	require.Eventually(t, func() bool { return strings.Contains(logged(), "Error syncing") }, 10*time.Second, 10*time.Millisecond)
	stop()
	queue.ShutDown()
	assert.Contains(t, logged(), "[redacted:aws_secret_access_key]", "the worker logs the driver's error, scrubbed")
	assertNoEcho(t, logged(), "the log")
	assertNoEcho(t, strings.Join(g.events(), "\n"), "the Events")
	set, getErr := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, getErr)
	require.NotNil(t, set.Status.Group)
	assertNoEcho(t, set.Status.Group.Message, "status.group.message")
}

// TestAGroupMessageOfAnyLengthIsBounded: what a cloud says of a group (an
// EKS node group's health issues with every instance they name, a failed
// update's errors) and a group driver's error may be of any length, and
// may quote the class's credentials. status.group.message keeps their
// beginning, scrubbed, and the GroupFailed Event is still told once.
func TestAGroupMessageOfAnyLengthIsBounded(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "nodeset-system", Name: "aws"},
		Data: map[string][]byte{"aws_secret_access_key": []byte(plantedSecretKey)}}
	g := newGroupFixture(t, 1, secret)
	obj, exists, err := g.classIndexer.GetByKey("asg")
	require.NoError(t, err)
	require.True(t, exists)
	class := obj.(*nodesetv1alpha1.NodeClass).DeepCopy()
	class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "aws"}
	require.NoError(t, g.classIndexer.Update(class))
	long := "AsgInstanceLaunchFailures: " + echoes(plantedSecretKey) + " (" + strings.Repeat("i-0123456789abcdef0, ", 5000) + "i-0)"
	groupFailed := func() (out []string) {
		for _, e := range g.events() {
			if strings.Contains(e, ReasonGroupFailed) {
				out = append(out, e)
			}
		}
		return out
	}
	message := func() string {
		set, err := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), "web", metav1.GetOptions{})
		require.NoError(t, err)
		require.NotNil(t, set.Status.Group)
		return set.Status.Group.Message
	}

	g.group.message = long
	require.NoError(t, g.syncGroup())
	got := message()
	assert.LessOrEqual(t, len(got), 4096, "status.group.message is bounded")
	assert.True(t, strings.HasPrefix(got, "AsgInstanceLaunchFailures: "), "and keeps the beginning")
	assert.True(t, strings.HasSuffix(got, "(cut)"), "and says it is cut")
	assertNoEcho(t, got, "status.group.message")
	told := groupFailed()
	require.Len(t, told, 1)
	assertNoEcho(t, told[0], "the GroupFailed Event")

	require.NoError(t, g.syncGroup())
	assert.Empty(t, groupFailed(), "the same long problem at the next poll is no news")

	g.group.message, g.group.ensureErr = "", fmt.Errorf("creating Auto Scaling group: %w: %s", drivers.ErrThrottled, long)
	require.Error(t, g.syncGroup())
	got = message()
	assert.LessOrEqual(t, len(got), 4096, "a driver's error in status.group.message is bounded")
	assertNoEcho(t, got, "status.group.message of an error")
}

// TestALongSyncErrorIsLoggedBounded: the worker logs the error a sync
// returns at every retry; a driver's error carrying a cloud's whole answer
// (a proxy's HTML page) is logged cut, scrubbed, and keeps its kind.
func TestALongSyncErrorIsLoggedBounded(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "nodeset-system", Name: "aws"},
		Data: map[string][]byte{"aws_secret_access_key": []byte(plantedSecretKey)}}
	g := newGroupFixture(t, 2, secret)
	obj, exists, err := g.classIndexer.GetByKey("asg")
	require.NoError(t, err)
	require.True(t, exists)
	class := obj.(*nodesetv1alpha1.NodeClass).DeepCopy()
	class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "aws"}
	require.NoError(t, g.classIndexer.Update(class))
	g.group.ensureErr = fmt.Errorf("creating Auto Scaling group: %w: %s %s", drivers.ErrThrottled, echoes(plantedSecretKey), strings.Repeat("<p>bad gateway</p>", 6000))

	err = g.controller.syncGroup(context.Background(), "team-a/web")
	require.Error(t, err)
	assert.ErrorIs(t, err, drivers.ErrThrottled, "the kind of error stays")
	assert.LessOrEqual(t, len(err.Error()), 4096, "what the worker logs is bounded")
	assert.True(t, strings.HasPrefix(err.Error(), "creating Auto Scaling group: "), "and keeps its beginning")
	assertNoEcho(t, err.Error(), "the error the sync returns")
}

// TestCredentialsNodesetNeverReadAppearNowhere: a class with no
// credentials Secret runs on the SDK's default chain (IRSA, an instance
// profile); those credentials are in no Secret nodeset read, yet an
// answer may echo them (a signature mismatch quoting the canonical
// request with its security token). They are recognised by their form.
func TestCredentialsNodesetNeverReadAppearNowhere(t *testing.T) {
	const (
		keyID   = "ASIAY34FZKBOKMUTVV7A"
		session = "IQoJb3JpZ2luX2VjEHcaCXVzLWVhc3QtMSJHMEUCIQDexampleexampleexample0123456789"
	)
	g := newGroupFixture(t, 2)
	g.group.ensureErr = fmt.Errorf("creating Auto Scaling group: %w: SignatureDoesNotMatch: canonical request:\nx-amz-security-token:%s\ncredential %s/20260101/us-east-1",
		drivers.ErrThrottled, session, keyID)
	err := g.controller.syncGroup(context.Background(), "team-a/web")
	require.Error(t, err)
	set, getErr := g.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, getErr)
	require.NotNil(t, set.Status.Group)
	events := strings.Join(g.events(), "\n")
	assert.Contains(t, set.Status.Group.Message, "[redacted:aws-session-token]")
	for _, sink := range []struct{ name, text string }{
		{"the error the worker logs", err.Error()}, {"status.group.message", set.Status.Group.Message}, {"the Events", events},
	} {
		assert.NotContains(t, sink.text, session, sink.name)
		assert.NotContains(t, sink.text, keyID, sink.name)
	}
}
