package awsdrivers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/eksasg"
	"nodeset.dev/nodeset/test/framework"
)

// startSet starts the kubelet stand-in, makes an eks-asg class and an empty
// NodeSet of it, and returns the name of the set's group.
func (e *env) startSet(class, namespace, name string) string {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	go e.kubelets(ctx)
	e.createClass(class)
	e.createSet(namespace, name, class, 0)
	return eksasg.GroupName(cluster, namespace, name)
}

// settled waits for the set to converge on size and checks the invariants:
// Nodes = live instances = replicas, one Node per instance (converged), and
// no instance running anywhere that is not one of them.
func (e *env) settled(namespace, name, group string, step, size int, timeout time.Duration) {
	e.t.Helper()
	nodes := e.converged(namespace, name, group, size, timeout)
	assert.Equal(e.t, instanceIDs(e.t, providerIDs(nodes)), e.runningInstances(), "step %d: the running instances are exactly the Nodes'", step)
}

// TestCrashSequenceEKSASG scales an eks-asg NodeSet through a sequence
// (6→2→5→0 with 8 SIGKILLs in make test; 50→10→40→0 with 24 in make
// test-reliability), killing either controller at random moments.
func TestCrashSequenceEKSASG(t *testing.T) {
	e := newEnv(t)
	ns := "crash-asg"
	group := e.startSet("crash", ns, "seq")
	p := framework.PlanCrashes(t, framework.CrashPlan{Sizes: []int{6, 2, 5, 0}, Kills: 8, Seed: 20261123},
		framework.CrashPlan{Sizes: []int{50, 10, 40, 0}, Kills: 24})
	kills := p.RunCrashes(t, []*framework.Process{e.ctrl.NodeSet, e.ctrl.Node},
		func(size int) {
			e.update(ns, "seq", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To(int32(size)) })
		},
		func(step, size int) { e.settled(ns, "seq", group, step, size, 4*time.Minute) })
	assert.GreaterOrEqual(t, kills, p.Kills-len(p.Sizes)+1)
	t.Logf("%d SIGKILLs survived; instances leaked: %d", kills, len(e.runningInstances()))
}

// TestCloudFaults runs a scale sequence with the node controller's AWS calls
// going through a proxy that throttles, fails, slows, drops and loses the
// answers of a share of them.
func TestCloudFaults(t *testing.T) {
	e, proxy := newFaultyEnv(t, 20261123)
	ns := "faults"
	group := e.startSet("faulty", ns, "web")
	proxy.SetFaults(framework.Faults{Throttle: 0.10, ServerError: 0.05, Slow: 0.05, SlowDelay: time.Second, Drop: 0.05, LoseAnswer: 0.03})
	for step, size := range []int{6, 2, 5, 0} {
		e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To(int32(size)) })
		e.settled(ns, "web", group, step, size, 3*time.Minute)
	}
	injected := proxy.Injected()
	t.Logf("faults injected: %v", injected)
	for _, kind := range []string{"throttle", "server-error", "slow", "drop", "lose-answer"} {
		assert.Positive(t, injected[kind], "some %s faults were injected", kind)
	}
	retries := metricSum(t, e.ctrl.NodeMetricsPort, "nodeset_cloud_api_retries_total")
	t.Logf("retries the node controller made: %v", retries)
	assert.Positive(t, retries, "the SDK retried, and the metric shows it")
}

// newFaultyEnv is newEnv with the node controller's AWS calls going through
// a fault proxy of seed, which injects nothing until told.
func newFaultyEnv(t *testing.T, seed uint64) (*env, *framework.FaultProxy) {
	var proxy *framework.FaultProxy
	e := newEnvWith(t, func(endpoint string) string {
		proxy = framework.StartFaultProxy(t, endpoint, seed)
		return proxy.URL
	})
	return e, proxy
}

// metricSum adds up every series of a counter on a controller's /metrics.
func metricSum(t *testing.T, port int, name string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	sum := 0.0
	for _, m := range regexp.MustCompile(`(?m)^`+name+`\{[^}]*\} ([0-9.e+]+)$`).FindAllStringSubmatch(string(body), -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		sum += v
	}
	return sum
}

// TestManagedNodeGroupCloudFaults takes an eks-managed NodeSet through its
// scale-ups and its deletion with the node controller's AWS calls going
// through the fault proxy, and the answers of its node group's creation, of
// a scaling and of its deletion lost (the call took effect, the driver does
// not know): after each step the cluster has one node group, of the size
// the set asks for and recorded in its status, and none once the set is
// gone. (moto launches no instances for node groups, so there are no Nodes
// to take a scale-down: nodeset lowers a node group only by terminating a
// drained instance.)
func TestManagedNodeGroupCloudFaults(t *testing.T) {
	e, proxy := newFaultyEnv(t, 20261127)
	api := e.managedClass()
	groups := regexp.MustCompile(`^/clusters/prod/node-groups$`)
	scaling := regexp.MustCompile(`^/clusters/prod/node-groups/[^/]+/update-config$`)
	group := regexp.MustCompile(`^/clusters/prod/node-groups/[^/]+$`)
	proxy.LoseAnswers(http.MethodPost, groups, 1)
	proxy.LoseAnswers(http.MethodPost, scaling, 1)
	proxy.LoseAnswers(http.MethodDelete, group, 1)
	proxy.SetFaults(framework.Faults{Throttle: 0.10, ServerError: 0.05, Slow: 0.05, SlowDelay: time.Second, Drop: 0.05, LoseAnswer: 0.03})
	ns := "managed-faults"
	name := e.managedSet(ns, "web", 2)

	for step, size := range []int32{2, 5, 7} {
		e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To(size) })
		e.oneNodeGroup(api, ns, "web", name, size, fmt.Sprintf("step %d", step))
	}
	e.deleteManagedSet(api, ns, "web")

	injected := proxy.Injected()
	t.Logf("faults injected: %v", injected)
	// How many calls the run makes depends on the machine's pace; the
	// faults drawn at random are counted together.
	assert.Positive(t, injected["throttle"]+injected["server-error"]+injected["slow"]+injected["drop"]+injected["lose-answer"],
		"faults were injected at random")
	assert.Equal(t, 1, injected["lose-answer POST "+groups.String()], "the answer of the node group's creation was lost")
	assert.Equal(t, 1, injected["lose-answer POST "+scaling.String()], "the answer of a scaling was lost")
	assert.Equal(t, 1, injected["lose-answer DELETE "+group.String()], "the answer of the node group's deletion was lost")
	assert.Positive(t, metricSum(t, e.ctrl.NodeMetricsPort, "nodeset_cloud_api_retries_total"), "the SDK retried, and the metric shows it")
}

// TestCrashSequenceEKSManaged raises an eks-managed NodeSet (2→5→7 with 6
// SIGKILLs in make test; 10→20→30 with 18 in make test-reliability) and
// deletes it, killing either controller at random moments: after each
// step the cluster has one node group, of the size the set asks for, and
// none once the set is gone. (moto launches no instances for node groups:
// the sequence only raises, as TestManagedNodeGroupCloudFaults.)
func TestCrashSequenceEKSManaged(t *testing.T) {
	e := newEnv(t)
	api := e.managedClass()
	ns := "crash-managed"
	name := e.managedSet(ns, "seq", 0)
	p := framework.PlanCrashes(t, framework.CrashPlan{Sizes: []int{2, 5, 7}, Kills: 6, Seed: 20261127},
		framework.CrashPlan{Sizes: []int{10, 20, 30}, Kills: 18})
	kills := p.RunCrashes(t, []*framework.Process{e.ctrl.NodeSet, e.ctrl.Node},
		func(size int) {
			e.update(ns, "seq", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To(int32(size)) })
		},
		func(step, size int) { e.oneNodeGroup(api, ns, "seq", name, int32(size), fmt.Sprintf("step %d", step)) })
	assert.GreaterOrEqual(t, kills, p.Kills-len(p.Sizes)+1)
	e.deleteManagedSet(api, ns, "seq")
	t.Logf("%d SIGKILLs survived", kills)
}
