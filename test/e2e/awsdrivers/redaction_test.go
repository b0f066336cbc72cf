package awsdrivers

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/drivers/eksasg"
	"nodeset.dev/nodeset/test/framework"
)

// Planted AWS credentials: distinctive values in every key of the class's
// Secret.
var plantedAWS = map[string][]byte{
	awscloud.CredentialAccessKeyID:     []byte("AKIAPLANTED7Q2W9E4RX"),
	awscloud.CredentialSecretAccessKey: []byte("planted/Secret+Key0x9f8e7d6c5b4a3210"),
	awscloud.CredentialSessionToken:    []byte("PlantedSessionToken//Zx81Yw72Vu63"),
}

// echoingCloud stands between the node controller and moto and, for the
// actions it is told, answers with an AWS error that quotes what the
// request carried (its Authorization header, with the access key id, and
// its session token) and the secret key: a cloud that quotes anything.
type echoingCloud struct {
	url string

	mu      sync.Mutex
	echoing map[string]string // action → error code
	echoed  map[string]int
}

func startEchoingCloud(t *testing.T, upstream string) *echoingCloud {
	t.Helper()
	c := &echoingCloud{echoing: map[string]string{}, echoed: map[string]int{}}
	c.url = framework.StartInterceptor(t, upstream, func(w http.ResponseWriter, r *http.Request, body []byte, form url.Values) bool {
		action := form.Get("Action")
		// Only the planted class's own requests are answered with its
		// secret: a cloud quotes what the caller sent, never another
		// caller's credentials (the other classes of the shared control
		// plane sign with theirs).
		own := strings.Contains(r.Header.Get("Authorization"), "Credential="+string(plantedAWS[awscloud.CredentialAccessKeyID])+"/")
		c.mu.Lock()
		code, echo := c.echoing[action]
		echo = echo && own
		if echo {
			c.echoed[action]++
		}
		c.mu.Unlock()
		if !echo {
			return false
		}
		var msg bytes.Buffer
		_ = xml.EscapeText(&msg, []byte(fmt.Sprintf("request %s signed with %q, session token %s, secret %s",
			action, r.Header.Get("Authorization"), r.Header.Get("X-Amz-Security-Token"), plantedAWS[awscloud.CredentialSecretAccessKey])))
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusBadRequest)
		if strings.Contains(string(body), "Version=2011-01-01") { // Auto Scaling
			fmt.Fprintf(w, `<ErrorResponse><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>echo</RequestId></ErrorResponse>`, code, msg.String())
			return true
		}
		fmt.Fprintf(w, `<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>echo</RequestID></Response>`, code, msg.String())
		return true
	})
	return c
}

// echo makes the cloud answer action with an echoing error of code; an
// empty code forwards it again.
func (c *echoingCloud) echo(action, code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if code == "" {
		delete(c.echoing, action)
		return
	}
	c.echoing[action] = code
}

func (c *echoingCloud) times(action string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.echoed[action]
}

// TestAWSCredentialsAppearNowhere plants distinctive values in every key of
// an eks-asg class's credentials Secret, puts a cloud that quotes them in
// its errors between the node controller (logging at -v=6) and moto, and
// asserts that none of them appears in a status, Event, log line, metric,
// /debug/machines, or any Secret but the credentials Secret, while the
// class is validated (Valid=False on the cloud's word), its group fails to
// be made, and then is made.
func TestAWSCredentialsAppearNowhere(t *testing.T) {
	var cloud *echoingCloud
	e := newEnvWith(t, func(endpoint string) string {
		cloud = startEchoingCloud(t, endpoint)
		return cloud.url
	})
	ctx := context.Background()
	e.ctrl.Node.Kill(syscall.SIGTERM)
	e.ctrl.Node.Args = append(slices.Clone(e.ctrl.Node.Args), "-v=6")
	require.NoError(t, e.ctrl.Node.Start())
	readyCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	require.NoError(t, e.ctrl.WaitReady(readyCtx))

	// The class's validation fails with the cloud's echo.
	cloud.echo("DescribeImages", "AuthFailure")
	const secretName = "planted-aws"
	_, err := e.kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName}, Data: plantedAWS,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = e.nodesets.NodesetV1alpha1().NodeClasses().Create(ctx, framework.ASGClass("planted", region, e.network, secretName), metav1.CreateOptions{})
	require.NoError(t, err)
	valid := e.waitValid(t, "planted", metav1.ConditionFalse)
	assert.Contains(t, valid.Message, "AuthFailure")
	assert.Contains(t, valid.Message, "[redacted:"+awscloud.CredentialAccessKeyID+"]", "the cloud's echo reached the condition, scrubbed")

	// The class is valid once the cloud stops; then the group's creation
	// fails with the echo, and then succeeds.
	cloud.echo("DescribeImages", "")
	cloud.echo("CreateAutoScalingGroup", "ValidationError")
	_, err = e.kube.CoreV1().Secrets("nodeset-system").Patch(ctx, secretName, "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"example.com/revalidate":"1"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	e.waitValid(t, "planted", metav1.ConditionTrue)
	e.createSet("planted-ns", "web", "planted", 1)
	group := eksasg.GroupName(cluster, "planted-ns", "web")
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		set, err := e.nodesets.NodesetV1alpha1().NodeSets("planted-ns").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || set.Status.Group == nil {
			return false, nil
		}
		last = set.Status.Group.Message
		return strings.Contains(last, "[redacted:"), nil
	})
	require.NoError(t, err, "status.group.message shows the scrubbed echo; last %q", last)
	require.Positive(t, cloud.times("CreateAutoScalingGroup"))
	cloud.echo("CreateAutoScalingGroup", "")
	kubeletCtx, stopKubelets := context.WithCancel(ctx)
	defer stopKubelets()
	go e.kubelets(kubeletCtx)
	e.converged("planted-ns", "web", group, 1, 3*time.Minute)

	// Everything that stores or shows text.
	texts := map[string]string{}
	dump := func(what string, v any) {
		data, err := json.Marshal(v)
		require.NoError(t, err)
		texts[what] = string(data)
	}
	nodes, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	dump("Nodes", nodes)
	sets, err := e.nodesets.NodesetV1alpha1().NodeSets("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	dump("NodeSets", sets)
	classes, err := e.nodesets.NodesetV1alpha1().NodeClasses().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	dump("NodeClasses", classes)
	events, err := e.kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	dump("Events", events)
	texts["node-controller log"] = e.ctrl.Node.Logs()
	texts["nodeset-controller log"] = e.ctrl.NodeSet.Logs()
	for name, u := range map[string]string{
		"node-controller metrics":    fmt.Sprintf("http://127.0.0.1:%d/metrics", e.ctrl.NodeMetricsPort),
		"nodeset-controller metrics": fmt.Sprintf("http://127.0.0.1:%d/metrics", e.ctrl.NodeSetMetricsPort),
		"/debug/machines":            fmt.Sprintf("http://127.0.0.1:%d/debug/machines", e.ctrl.NodeHealthPort),
	} {
		resp, err := http.Get(u)
		require.NoError(t, err, u)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		texts[name] = string(body)
	}
	secrets, err := e.kube.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, s := range secrets.Items {
		if s.Namespace == "nodeset-system" && s.Name == secretName {
			continue
		}
		dump("Secret "+s.Namespace+"/"+s.Name, s)
	}
	assert.Contains(t, texts["Events"], "[redacted:", "the echo reached the Events, scrubbed")
	for where, text := range texts {
		for key, value := range plantedAWS {
			assert.NotContains(t, text, string(value), "%s holds %s", where, key)
		}
	}

	require.NoError(t, e.nodesets.NodesetV1alpha1().NodeSets("planted-ns").Delete(ctx, "web", metav1.DeleteOptions{}))
}

// waitValid waits for the class's Valid condition to have status.
func (e *env) waitValid(t *testing.T, name string, status metav1.ConditionStatus) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		class, err := e.nodesets.NodesetV1alpha1().NodeClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if c := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid); c != nil {
			got = *c
		}
		return got.Status == status && got.ObservedGeneration == class.Generation, nil
	})
	require.NoError(t, err, "NodeClass %s Valid=%s; last %+v", name, status, got)
	return got
}
