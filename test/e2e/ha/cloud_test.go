package ha

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/test/framework"
)

var (
	appIDRE     = regexp.MustCompile(`app/(\S+)`)
	awsFencedRE = regexp.MustCompile(awscloud.FencedAtPrefix + `([0-9]+)`)
)

// TestNeverTwoReplicasChangeTheCloud runs two node-controller replicas
// serving eks-asg against moto, through a proxy that records every AWS
// request. Each scale-down is paused in flight (drains held by a budget)
// by SIGSTOPping the leader until the standby took over. Every AWS call
// that changes something must carry the fence's stamp, and ordered by it,
// each replica's changing calls form one unbroken run: no replica changed
// the cloud while another did, and a woken leader changed nothing.
func TestNeverTwoReplicasChangeTheCloud(t *testing.T) {
	ctx := context.Background()
	cp := framework.Shared(t)
	moto := framework.StartMoto(t)
	proxy := framework.StartFaultProxy(t, moto, 1)
	_, ec2c, err := awscloud.SDKClients(moto)(ctx, "us-east-1", framework.MotoCredentials)
	require.NoError(t, err)
	network := framework.NewMotoNetwork(t, ec2c.(*ec2.Client), "us-east-1")

	c, err := framework.NewControllers(ctx, cp, framework.ControllerOptions{NodeArgs: []string{
		"--drivers=eks-asg", "--cluster-name=ha-cloud", "--aws-endpoint-url=" + proxy.URL, "--group-poll-interval=2s"}})
	require.NoError(t, err)
	c.Node.Env = append(c.Node.Env, "AWS_EC2_METADATA_DISABLED=true")
	nodeStandby, _, err := c.Replica(c.Node)
	require.NoError(t, err)
	nodes := &replicas{name: "node-controller", all: [2]*framework.Process{c.Node, nodeStandby}}
	startAll(t, cp, c.NodeSet, c.Node, nodeStandby)
	kubelets, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	go framework.ReportAWSNodesReady(kubelets, kube)
	cs := versioned.NewForConfigOrDie(cp.AdminConfig())

	const ns = "ha-cloud"
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ha-cloud-aws"}, Data: framework.MotoCredentials}, metav1.CreateOptions{})
	require.NoError(t, err)
	class := framework.ASGClass("ha-cloud", "us-east-1", network, "ha-cloud-aws")
	// A drain behind a budget that allows no eviction gives up at this
	// timeout: what keeps a scale-down in flight for the pause.
	class.Spec.Drain.Timeout = &metav1.Duration{Duration: 3 * time.Second}
	_, err = cs.NodesetV1alpha1().NodeClasses().Create(ctx, class, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: "ha-cloud", Replicas: ptr.To[int32](0)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	current := 0
	for i, size := range []int32{5, 2, 4, 1} {
		if int(size) > current {
			scale(t, cs, ns, "web", size)
			current = int(size)
			eventually(t, 3*time.Minute, fmt.Sprintf("%d Ready nodes", size), func(ctx context.Context) (bool, string) {
				return readyNodes(ctx, kube, ns, "web", int(size))
			})
			continue
		}
		leader, standby := nodes.leader(t, kube)
		guard(t, kube, ns, fmt.Sprintf("guard-%d", i), nodeNamesOf(ctx, kube, ns, "web"))
		scale(t, cs, ns, "web", size)
		inFlight(t, kube, ns, "web", current, int(size))
		current = int(size)
		nodes.pauseUntilTakeover(t, kube, leader, standby)
		eventually(t, 3*time.Minute, fmt.Sprintf("%d Ready nodes", size), func(ctx context.Context) (bool, string) {
			return readyNodes(ctx, kube, ns, "web", int(size))
		})
	}

	// Every changing call went through a fence, and by the fence's stamps
	// the replicas' changing calls never interleave.
	type change struct {
		replica, action string
		admitted        time.Time
	}
	var changes []change
	for _, call := range proxy.Calls() {
		if awscloud.ReadOnly(call.Action) {
			continue
		}
		app, stamp := appIDRE.FindStringSubmatch(call.UserAgent), awsFencedRE.FindStringSubmatch(call.UserAgent)
		require.NotNil(t, app, "%s names its replica: %q", call.Action, call.UserAgent)
		require.NotNil(t, stamp, "%s went through the fence: %q", call.Action, call.UserAgent)
		ms, err := strconv.ParseInt(stamp[1], 10, 64)
		require.NoError(t, err)
		changes = append(changes, change{replica: app[1], action: call.Action, admitted: time.UnixMilli(ms)})
	}
	sort.SliceStable(changes, func(i, j int) bool { return changes[i].admitted.Before(changes[j].admitted) })
	runs, again := unbrokenRuns(changes, func(c change) string { return c.replica }, func(c change) string { return c.action })
	t.Logf("changing AWS calls by replica runs, in the order the fences let them through:\n  %s", strings.Join(runs, "\n  "))
	assert.Empty(t, again, "replicas that changed the cloud again after another replica had")
	assert.GreaterOrEqual(t, len(runs), 2, "the standby changed the cloud after a takeover")
}
