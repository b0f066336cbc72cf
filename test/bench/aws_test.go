package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/test/framework"
)

// awsResult is what one fleet of eks-asg NodeSets cost in AWS calls.
type awsResult struct {
	NodeSets int `json:"nodeSets"`
	Nodes    int `json:"nodesLaunched"`
	// LaunchCalls are the calls from the NodeSets' creation until every
	// Node was Ready, by operation.
	LaunchCalls    map[string]float64 `json:"launchCallsByOperation"`
	CallsPerNode   float64            `json:"callsPerLaunchedNode"`
	PollCalls      map[string]float64 `json:"steadyCallsPerPollByOperation"`
	CallsPerPoll   float64            `json:"steadyCallsPerPoll"`
	PollInterval   float64            `json:"pollIntervalSeconds"`
	SecondsToReady float64            `json:"secondsToReady"`
}

const (
	awsRegion       = "us-east-1"
	awsPollInterval = 10 * time.Second
	awsSteadyPolls  = 3
)

// BenchmarkAWSCalls runs both controllers with the eks-asg driver against
// moto: 1 NodeSet of 2 nodes, 50 NodeSets of 2 nodes each, and 1 NodeSet of
// 100 nodes are made and their Nodes reported Ready by a kubelet stand-in. It counts, from the node
// controller's nodeset_cloud_api_calls_total, the AWS calls per launched
// node and, once everything is steady, per poll of every group.
func BenchmarkAWSCalls(b *testing.B) {
	var results []*awsResult
	for _, fleet := range []struct{ sets, nodes int }{{1, 2}, {50, 2}, {1, 100}} {
		b.Run(fmt.Sprintf("nodesets=%d/nodes=%d", fleet.sets, fleet.nodes), func(b *testing.B) {
			for range b.N {
				r := awsFleet(b, fleet.sets, fleet.nodes)
				results = append(results, r)
				b.ReportMetric(r.CallsPerNode, "aws-calls/node")
				b.ReportMetric(r.CallsPerPoll, "aws-calls/poll")
			}
		})
	}
	reportAWS(b, results)
}

// awsResults are BenchmarkAWSCalls' figures, for BenchmarkFleet's table
// when both run in one process (it runs first: its file sorts first).
var awsResults []*awsResult

// awsFleet makes sets NodeSets of perSet nodes each and counts the calls.
func awsFleet(b *testing.B, sets, perSet int) *awsResult {
	ctx := context.Background()
	cp := framework.Shared(b)
	endpoint := framework.StartMoto(b)
	_, ec2c, err := awscloud.SDKClients(endpoint)(ctx, awsRegion, framework.MotoCredentials)
	if err != nil {
		b.Fatal(err)
	}
	network := framework.NewMotoNetwork(b, ec2c.(*ec2.Client), awsRegion)
	controllers, err := framework.NewControllers(ctx, cp, framework.ControllerOptions{
		NodeArgs: []string{"--drivers=eks-asg", "--cluster-name=bench", "--aws-endpoint-url=" + endpoint,
			"--group-poll-interval=" + awsPollInterval.String(), "--orphan-collection-interval=5m", "-v=1"},
		NodeSetArgs: []string{"-v=1"},
	})
	if err != nil {
		b.Fatal(err)
	}
	controllers.Node.Env = append(controllers.Node.Env, "AWS_EC2_METADATA_DISABLED=true")
	if err := controllers.Start(); err != nil {
		b.Fatal(err)
	}
	defer controllers.Stop()
	defer noRestarts(b, controllers)
	readyCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := controllers.WaitReady(readyCtx); err != nil {
		b.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	cs := versioned.NewForConfigOrDie(cp.AdminConfig())
	kubelets, stopKubelets := context.WithCancel(ctx)
	defer stopKubelets()
	go framework.ReportAWSNodesReady(kubelets, kube)

	name := fmt.Sprintf("aws-bench-%d-%d", sets, perSet)
	if _, err := kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: framework.MotoCredentials}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, framework.ASGClass(name, awsRegion, network, name), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, time.Minute, "the class is Valid", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(class.Status.Conditions, nodesetv1alpha1.NodeClassValid), fmt.Sprint(class.Status.Conditions)
	})
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}

	r := &awsResult{NodeSets: sets, Nodes: sets * perSet, PollInterval: awsPollInterval.Seconds()}
	before := cloudCalls(b, controllers.NodeMetricsPort)
	start := time.Now()
	parallel(b, setNames(sets), func(set string) error {
		_, err := cs.NodesetV1alpha1().NodeSets(name).Create(ctx, &nodesetv1alpha1.NodeSet{
			ObjectMeta: metav1.ObjectMeta{Name: set, Namespace: name},
			Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: name, Replicas: ptr.To(int32(perSet))},
		}, metav1.CreateOptions{})
		return err
	})
	selector := nodesetv1alpha1.LabelNodeClass + "=" + name
	waitFor(b, 5*time.Minute, fmt.Sprintf("%d Nodes Ready", r.Nodes), func(ctx context.Context) (bool, string) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range nodes.Items {
			if nodeutil.IsReady(&nodes.Items[i]) && !nodeutil.HasStartupTaint(&nodes.Items[i]) {
				ready++
			}
		}
		return ready == r.Nodes, fmt.Sprintf("%d of %d Ready", ready, r.Nodes)
	})
	r.SecondsToReady = time.Since(start).Seconds()
	launched := cloudCalls(b, controllers.NodeMetricsPort)
	r.LaunchCalls = diff(launched, before)
	r.CallsPerNode = total(r.LaunchCalls) / float64(r.Nodes)

	// Let the settling polls (every 2 s) end, then count a few regular ones.
	// Nothing the node controller exposes says which kind of poll it is at,
	// so two poll intervals stand for "settled"; the steady window is the
	// measurement itself (calls per poll interval), so it is fixed.
	time.Sleep(2 * awsPollInterval)
	steadyStart := cloudCalls(b, controllers.NodeMetricsPort)
	time.Sleep(awsSteadyPolls * awsPollInterval)
	r.PollCalls = diff(cloudCalls(b, controllers.NodeMetricsPort), steadyStart)
	for op := range r.PollCalls {
		r.PollCalls[op] /= awsSteadyPolls
	}
	r.CallsPerPoll = total(r.PollCalls)

	// Leave the control plane as it was.
	parallel(b, setNames(sets), func(set string) error {
		return cs.NodesetV1alpha1().NodeSets(name).Delete(ctx, set, metav1.DeleteOptions{})
	})
	waitFor(b, 5*time.Minute, "the NodeSets gone", func(ctx context.Context) (bool, string) {
		list, err := cs.NodesetV1alpha1().NodeSets(name).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d left", len(list.Items))
	})
	return r
}

func setNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("set-%02d", i)
	}
	return names
}

var cloudCallRE = regexp.MustCompile(`(?m)^nodeset_cloud_api_calls_total\{driver="eks-asg",operation="([A-Za-z]+)",outcome="[a-z]+"\} ([0-9.e+]+)$`)

// cloudCalls scrapes the node controller's AWS calls by operation.
func cloudCalls(b *testing.B, port int) map[string]float64 {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range cloudCallRE.FindAllStringSubmatch(string(body), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			b.Fatal(err)
		}
		out[m[1]] += v
	}
	return out
}

func diff(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for op, v := range after {
		if d := v - before[op]; d > 0 {
			out[op] = d
		}
	}
	return out
}

func total(m map[string]float64) float64 {
	sum := 0.0
	for _, v := range m {
		sum += v
	}
	return sum
}

func reportAWS(b *testing.B, results []*awsResult) {
	if len(results) == 0 {
		return
	}
	awsResults = results
	ops := sortedKeys(results, func(r *awsResult) map[string]float64 { return r.LaunchCalls },
		func(r *awsResult) map[string]float64 { return r.PollCalls })
	t := &table[*awsResult]{results: results, label: 52, column: 12}
	t.row("NodeSets (eks-asg)", func(r *awsResult) string { return strconv.Itoa(r.NodeSets) })
	t.row("nodes launched", func(r *awsResult) string { return strconv.Itoa(r.Nodes) })
	t.row("seconds until all Ready", func(r *awsResult) string { return num(r.SecondsToReady) })
	t.row("AWS calls per launched node", func(r *awsResult) string { return num(r.CallsPerNode) })
	for _, op := range ops {
		t.row("  launch: "+op, func(r *awsResult) string { return num(r.LaunchCalls[op]) })
	}
	t.row(fmt.Sprintf("AWS calls per steady poll (every %s)", awsPollInterval), func(r *awsResult) string { return num(r.CallsPerPoll) })
	for _, op := range ops {
		t.row("  poll: "+op, func(r *awsResult) string { return num(r.PollCalls[op]) })
	}
	fmt.Printf("\nAWS calls (eks-asg against moto):\n%s", t.out.String())
	writeJSON(b, "NODESET_BENCH_AWS_JSON", "bench-aws.json", map[string]any{"results": results})
}
