package awsdrivers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/drivers/eksasg"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/test/framework"
)

// completedAction is a CompleteLifecycleAction the recorder answered.
type completedAction struct {
	instance, token, result, hook string
	at                            time.Time
}

// lifecycleRecorder stands between the node controller and moto and
// answers CompleteLifecycleAction and RecordLifecycleActionHeartbeat
// itself, recording them (moto implements neither); every other call goes
// on to moto.
type lifecycleRecorder struct {
	mu         sync.Mutex
	completed  []completedAction
	heartbeats int
	// refuseAcks answers SQS DeleteMessageBatch with 503 (counted in
	// refused), so received messages stay on the queue.
	refuseAcks bool
	refused    int
	// minSize answers TerminateInstanceInAutoScalingGroup as Auto Scaling
	// does and moto does not: a decrement below the group's minimum size is
	// a ValidationError.
	minSize bool
	// terminating are instances DescribeAutoScalingGroups answers in state
	// Terminating:Wait (describedTerminating).
	terminating []string
}

func (r *lifecycleRecorder) start(t *testing.T, upstream string) string {
	asg, _, err := awscloud.SDKClients(upstream)(context.Background(), region, awsCredentials)
	require.NoError(t, err)
	return framework.StartInterceptor(t, upstream, func(w http.ResponseWriter, req *http.Request, body []byte, form url.Values) bool {
		r.mu.Lock()
		refuse := r.refuseAcks && req.Header.Get("X-Amz-Target") == "AmazonSQS.DeleteMessageBatch"
		if refuse {
			r.refused++
		}
		minSize := r.minSize
		terminating := slices.Clone(r.terminating)
		r.mu.Unlock()
		if refuse {
			http.Error(w, `{"__type":"ServiceUnavailable","message":"refused by the test"}`, http.StatusServiceUnavailable)
			return true
		}
		action := form.Get("Action")
		if action == "DescribeAutoScalingGroups" && len(terminating) > 0 {
			return describedTerminating(w, req, upstream, body, terminating)
		}
		if minSize && action == "TerminateInstanceInAutoScalingGroup" && form.Get("ShouldDecrementDesiredCapacity") == "true" {
			return belowMinSize(w, asg, form.Get("InstanceId"))
		}
		if action != "CompleteLifecycleAction" && action != "RecordLifecycleActionHeartbeat" {
			return false
		}
		r.mu.Lock()
		if action == "CompleteLifecycleAction" {
			r.completed = append(r.completed, completedAction{instance: form.Get("InstanceId"), token: form.Get("LifecycleActionToken"),
				result: form.Get("LifecycleActionResult"), hook: form.Get("LifecycleHookName"), at: time.Now()})
		} else {
			r.heartbeats++
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(w, `<%[1]sResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><%[1]sResult/><ResponseMetadata><RequestId>00000000-0000-4000-8000-000000000001</RequestId></ResponseMetadata></%[1]sResponse>`, action)
		return true
	})
}

// belowMinSize answers a decrementing termination of instance with Auto
// Scaling's ValidationError when its group is at its minimum size, and
// reports whether it answered.
func belowMinSize(w http.ResponseWriter, asg awscloud.AutoScaling, instance string) bool {
	ctx := context.Background()
	found, err := asg.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: []string{instance}})
	if err != nil || len(found.AutoScalingInstances) == 0 {
		return false
	}
	groups, err := asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{
		AutoScalingGroupNames: []string{aws.ToString(found.AutoScalingInstances[0].AutoScalingGroupName)}})
	if err != nil || len(groups.AutoScalingGroups) == 0 {
		return false
	}
	g := groups.AutoScalingGroups[0]
	if aws.ToInt32(g.DesiredCapacity) > aws.ToInt32(g.MinSize) {
		return false
	}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprintf(w, `<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><Error><Type>Sender</Type><Code>ValidationError</Code>`+
		`<Message>Currently, desiredSize equals minSize (%d). Terminating instance without replacement will violate group's min size constraint. `+
		`Either set shouldDecrementDesiredCapacity flag to false or lower group's min size constraint.</Message></Error>`+
		`<RequestId>00000000-0000-4000-8000-000000000002</RequestId></ErrorResponse>`, aws.ToInt32(g.MinSize))
	return true
}

// describedTerminating answers a DescribeAutoScalingGroups with moto's
// answer in which each of the instances is in state Terminating:Wait, as
// Auto Scaling describes an instance whose termination waits on a
// lifecycle hook (moto holds no instance for a hook), and reports whether
// it answered.
func describedTerminating(w http.ResponseWriter, req *http.Request, upstream string, body []byte, instances []string) bool {
	forward, err := http.NewRequestWithContext(req.Context(), req.Method, upstream+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return false
	}
	forward.Header = req.Header.Clone()
	forward.Header.Del("Accept-Encoding")
	resp, err := http.DefaultClient.Do(forward)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return false
	}
	text := string(answer)
	for _, id := range instances {
		for at := 0; ; {
			i := strings.Index(text[at:], "<InstanceId>"+id+"</InstanceId>")
			if i < 0 {
				break
			}
			i += at
			start, end := strings.LastIndex(text[:i], "<member>"), strings.Index(text[i:], "</member>")
			if start < 0 || end < 0 {
				break
			}
			end += i
			member := strings.Replace(text[start:end], "<LifecycleState>InService</LifecycleState>", "<LifecycleState>Terminating:Wait</LifecycleState>", 1)
			text = text[:start] + member + text[end:]
			at = start + len(member)
		}
	}
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.WriteString(w, text)
	return true
}

// holdForHook has DescribeAutoScalingGroups describe the instance as
// waiting on a termination lifecycle hook from now on.
func (r *lifecycleRecorder) holdForHook(instance string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.terminating = append(r.terminating, instance)
}

func (r *lifecycleRecorder) enforceMinSize() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.minSize = true
}

func (r *lifecycleRecorder) holdAcks(hold bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuseAcks = hold
}

func (r *lifecycleRecorder) refusedAcks() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

func (r *lifecycleRecorder) actions() []completedAction {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]completedAction(nil), r.completed...)
}

// noticeEnv is env with an interruption queue and the lifecycle recorder.
type noticeEnv struct {
	*env
	queue     *framework.InterruptionQueue
	lifecycle *lifecycleRecorder
}

func newNoticeEnv(t *testing.T) (*noticeEnv, context.Context) {
	recorder := &lifecycleRecorder{}
	e := newEnvWith(t, func(endpoint string) string { return recorder.start(t, endpoint) },
		"--interruption-receive-wait=1s", "--interruption-visibility-timeout=10s")
	// The kubelet stand-in runs until the test ends; ctx ends with it.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.kubelets(ctx)
	return &noticeEnv{env: e, queue: framework.NewInterruptionQueue(t, e.endpoint, region, "nodeset-interruptions"), lifecycle: recorder}, ctx
}

// createNoticeClass makes an eks-asg class that reads the queue, with
// rebalance policy and a drain timeout of 2m.
func (e *noticeEnv) createNoticeClass(name string, rebalance nodesetv1alpha1.RebalancePolicy) {
	ctx := context.Background()
	_, err := e.kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-aws"}, Data: awsCredentials}, metav1.CreateOptions{})
	require.NoError(e.t, err)
	class := framework.ASGClass(name, region, e.network, name+"-aws")
	class.Spec.Drain.Timeout = &metav1.Duration{Duration: 2 * time.Minute}
	class.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: e.queue.URL,
		HeartbeatTimeout: &metav1.Duration{Duration: time.Minute}, Rebalance: rebalance}
	_, err = e.nodesets.NodesetV1alpha1().NodeClasses().Create(ctx, class, metav1.CreateOptions{})
	require.NoError(e.t, err)
}

// workload runs replicas pods of a Deployment with a PodDisruptionBudget
// (maxUnavailable 2) on the set's Nodes, all on first while it is
// schedulable. It plays the parts a cluster's scheduler and kubelets play
// for them: pending pods are bound (to first, else to another schedulable
// Ready Node of the set), bound pods run, and deleted pods finish.
func (e *noticeEnv) workload(ctx context.Context, namespace, set, first string, replicas int32) {
	e.t.Helper()
	labels := map[string]string{"app": "web"}
	require.NoError(e.t, framework.WaitForDefaultServiceAccount(ctx, e.kube, namespace))
	_, err := e.kube.AppsV1().Deployments(namespace).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}}}}},
	}, metav1.CreateOptions{})
	require.NoError(e.t, err)
	_, err = e.kube.PolicyV1().PodDisruptionBudgets(namespace).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{})
	require.NoError(e.t, err)
	require.NoError(e.t, framework.StartPods(ctx, e.kube, namespace))
	e.t.Cleanup(func() {
		// Node names come again in the next test's moto: pods left bound
		// to them would be on its Nodes, and would hold up their drains
		// (no kubelet finishes them). The ReplicaSets go first and are
		// waited for: while one exists it makes pods again.
		background := context.Background()
		_ = e.kube.AppsV1().Deployments(namespace).Delete(background, "web", metav1.DeleteOptions{})
		_ = e.kube.AppsV1().ReplicaSets(namespace).DeleteCollection(background, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = wait.PollUntilContextTimeout(background, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			sets, err := e.kube.AppsV1().ReplicaSets(namespace).List(ctx, metav1.ListOptions{})
			return err == nil && len(sets.Items) == 0, nil
		})
		_ = e.kube.PolicyV1().PodDisruptionBudgets(namespace).Delete(background, "web", metav1.DeleteOptions{})
		_ = e.kube.CoreV1().Pods(namespace).DeleteCollection(background, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	})
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			pods, err := e.kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			target := ""
			for _, n := range e.setNodes(namespace, set) {
				if n.DeletionTimestamp == nil && !n.Spec.Unschedulable && nodeutil.IsReady(&n) && !nodeutil.HasStartupTaint(&n) && (target == "" || n.Name == first) {
					target = n.Name
				}
			}
			for i := range pods.Items {
				pod := &pods.Items[i]
				switch {
				case pod.DeletionTimestamp != nil:
					_ = e.kube.CoreV1().Pods(namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				case pod.Spec.NodeName == "" && target != "":
					_ = e.kube.CoreV1().Pods(namespace).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: namespace},
						Target: corev1.ObjectReference{Kind: "Node", Name: target}}, metav1.CreateOptions{})
				}
			}
			return false, nil
		})
	}()
	e.waitFor(fmt.Sprintf("%d running pods on %s", replicas, first), 2*time.Minute, func() (bool, string) {
		n := e.runningPodsOn(namespace, first)
		return n == int(replicas), fmt.Sprintf("%d running", n)
	})
}

func (e *noticeEnv) runningPodsOn(namespace, node string) int {
	pods, err := e.kube.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	require.NoError(e.t, err)
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

func (e *noticeEnv) podsOn(namespace, node string) int {
	pods, err := e.kube.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	require.NoError(e.t, err)
	return len(pods.Items)
}

// waitFor polls done until it holds, failing with its last word after timeout.
func (e *env) waitFor(what string, timeout time.Duration, done func() (bool, string)) {
	e.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, msg := done()
		last = msg
		return ok, nil
	})
	require.NoError(e.t, err, "waiting for %s: %s", what, last)
}

// eventCount adds up the Events with reason on the object with uid (Node
// names come again from test to test).
func (e *env) eventCount(namespace string, uid types.UID, reason string) int {
	events, err := e.kube.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(uid) + ",reason=" + reason})
	require.NoError(e.t, err)
	n := 0
	for _, ev := range events.Items {
		n += max(int(ev.Count), 1)
	}
	return n
}

// metric is the value of a counter or histogram series on the node
// controller's /metrics (all its series added up).
func (e *env) metric(name string) float64 {
	e.t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", e.ctrl.NodeMetricsPort))
	require.NoError(e.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	sum := 0.0
	for _, m := range regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`(\{[^}]*\})? ([0-9.e+]+)$`).FindAllStringSubmatch(string(body), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		require.NoError(e.t, err)
		sum += v
	}
	return sum
}

// spotSet makes a class reading the queue and a NodeSet of it with
// replicas Ready Nodes, and returns the group and the Nodes.
func (e *noticeEnv) spotSet(namespace, class string, rebalance nodesetv1alpha1.RebalancePolicy, replicas int32) (string, []corev1.Node) {
	e.createNoticeClass(class, rebalance)
	e.createSet(namespace, "web", class, replicas)
	group := eksasg.GroupName(cluster, namespace, "web")
	return group, e.converged(namespace, "web", group, int(replicas), 2*time.Minute)
}

func (e *noticeEnv) replicas(namespace string) int32 {
	set, err := e.nodesets.NodesetV1alpha1().NodeSets(namespace).Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(e.t, err)
	return *set.Spec.Replicas
}

func (e *noticeEnv) nodeGone(name string) bool {
	_, err := e.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

func TestSpotWarningDrainsTheNodeAndAReplacementComesUp(t *testing.T) {
	e, ctx := newNoticeEnv(t)
	const ns = "spot"
	group, nodes := e.spotSet(ns, "spot", "", 2)
	victim := nodes[0]
	e.workload(ctx, ns, "web", victim.Name, 10)
	instance := path.Base(victim.Spec.ProviderID)

	notice := time.Now()
	e.queue.Put(t, framework.SpotInterruptionWarning(region, instance, notice))
	e.waitFor("the Node drained", 2*time.Minute, func() (bool, string) {
		n := e.podsOn(ns, victim.Name)
		return n == 0, fmt.Sprintf("%d pods on %s", n, victim.Name)
	})
	drained := time.Since(notice)
	e.waitFor("the Node gone", time.Minute, func() (bool, string) { return e.nodeGone(victim.Name), "still there" })
	gone := time.Since(notice)
	t.Logf("notice → Node drained: %.1fs for a Node with 10 pods (PodDisruptionBudget maxUnavailable 2); notice → Node gone: %.1fs",
		drained.Seconds(), gone.Seconds())

	t.Log("the same warning again, and a rebalance recommendation after it: nothing more happens")
	e.queue.Put(t, framework.SpotInterruptionWarning(region, instance, notice))
	e.queue.Put(t, framework.RebalanceRecommendation(region, instance, notice.Add(-time.Minute)))
	e.waitFor("the queue empty", time.Minute, func() (bool, string) { d := e.queue.Depth(t); return d == 0, fmt.Sprintf("%d messages", d) })

	after := e.converged(ns, "web", group, 2, 2*time.Minute)
	assert.NotContains(t, providerIDs(after), victim.Spec.ProviderID, "a replacement took the interrupted instance's place")
	assert.EqualValues(t, 2, e.replicas(ns), "spec.replicas is what the tenant asked for")
	assert.Equal(t, 10, e.runningPodsOn(ns, after[0].Name)+e.runningPodsOn(ns, after[1].Name), "the pods run elsewhere")
	assert.Equal(t, 1, e.eventCount("default", victim.UID, "Interrupted"), "one notice told")
	assert.EqualValues(t, 1, e.metric("nodeset_node_drain_duration_seconds_count"), "one drain")
	set, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, 1, e.eventCount(ns, set.UID, "Interrupted"), "told on the NodeSet too")
	assert.EqualValues(t, 2, e.metric(`nodeset_interruptions_received_total{kind="SpotInterruption"}`))
	assert.EqualValues(t, 1, e.metric("nodeset_interruption_drain_duration_seconds_count"))
	assert.Zero(t, e.metric("nodeset_interruption_drains_unfinished_total"))
	assert.NotContains(t, e.runningInstances(), instance, "the interrupted instance is gone")
}

func TestLifecycleActionIsCompletedOnlyAfterTheDrain(t *testing.T) {
	e, ctx := newNoticeEnv(t)
	const ns = "hooked"
	group, nodes := e.spotSet(ns, "hooked", "", 2)
	hooks, err := e.asg.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(group)})
	require.NoError(t, err)
	require.Len(t, hooks.LifecycleHooks, 1, "the group has nodeset's termination hook")
	assert.Equal(t, eksasg.HookName, aws.ToString(hooks.LifecycleHooks[0].LifecycleHookName))
	assert.EqualValues(t, 60, aws.ToInt32(hooks.LifecycleHooks[0].HeartbeatTimeout))

	victim := nodes[0]
	e.workload(ctx, ns, "web", victim.Name, 10)
	instance := path.Base(victim.Spec.ProviderID)
	event := framework.TerminateLifecycleAction(region, group, eksasg.HookName, instance, "token-1", time.Now())
	e.queue.Put(t, event)
	e.queue.Put(t, event) // delivered twice
	// lastWithPods is when the last look that found pods on the Node
	// began: they were there at some moment after it, so an action
	// completed before it was completed while the Node still had pods.
	var lastWithPods time.Time
	e.waitFor("the Node drained", 2*time.Minute, func() (bool, string) {
		completed := len(e.lifecycle.actions())
		looked := time.Now()
		n := e.podsOn(ns, victim.Name)
		if n > 0 {
			lastWithPods = looked
			assert.Zero(t, completed, "no lifecycle action is completed while pods are on the Node")
		}
		return n == 0, fmt.Sprintf("%d pods on %s", n, victim.Name)
	})
	e.waitFor("the lifecycle action completed", time.Minute, func() (bool, string) {
		return len(e.lifecycle.actions()) > 0, "not yet"
	})
	first := e.lifecycle.actions()[0]
	assert.Equal(t, completedAction{instance: instance, token: "token-1", result: "CONTINUE", hook: eksasg.HookName, at: first.at}, first)
	assert.True(t, first.at.After(lastWithPods), "completed at %s, while pods were still on the Node (seen by the look begun at %s)", first.at, lastWithPods)
	e.waitFor("the queue empty", time.Minute, func() (bool, string) { d := e.queue.Depth(t); return d == 0, fmt.Sprintf("%d messages", d) })
	e.converged(ns, "web", group, 2, 2*time.Minute)
	assert.EqualValues(t, 2, e.replicas(ns))
	assert.EqualValues(t, 1, e.metric("nodeset_node_drain_duration_seconds_count"), "one drain for two deliveries")
	assert.Equal(t, 1, e.eventCount("default", victim.UID, "LifecycleActionCompleted"))
	assert.GreaterOrEqual(t, e.metric("nodeset_lifecycle_actions_completed_total"), 1.0)
}

func TestRebalanceRecommendationFollowsTheClassPolicy(t *testing.T) {
	e, ctx := newNoticeEnv(t)
	calmGroup, calm := e.spotSet("calm", "calm", nodesetv1alpha1.RebalanceTaint, 1)
	eagerGroup, eager := e.spotSet("eager", "eager", nodesetv1alpha1.RebalanceReplaceFirst, 1)
	e.queue.Put(t, framework.RebalanceRecommendation(region, path.Base(calm[0].Spec.ProviderID), time.Now()))
	e.queue.Put(t, framework.RebalanceRecommendation(region, path.Base(eager[0].Spec.ProviderID), time.Now()))

	t.Log("Taint: the Node is tainted PreferNoSchedule and stays")
	e.waitFor("the taint", time.Minute, func() (bool, string) {
		n, err := e.kube.CoreV1().Nodes().Get(ctx, calm[0].Name, metav1.GetOptions{})
		require.NoError(t, err)
		for _, taint := range n.Spec.Taints {
			if taint.Key == nodesetv1alpha1.TaintRebalanceRecommended {
				return taint.Effect == corev1.TaintEffectPreferNoSchedule, string(taint.Effect)
			}
		}
		return false, "no taint"
	})

	t.Log("ReplaceFirst: a replacement comes up, then the Node goes")
	e.waitFor("the group raised by one", time.Minute, func() (bool, string) {
		desired, _, err := e.instances(eagerGroup)
		return err == nil && desired == 2, fmt.Sprintf("desired %d (%v)", desired, err)
	})
	after := e.converged("eager", "web", eagerGroup, 1, 3*time.Minute)
	assert.NotEqual(t, eager[0].Spec.ProviderID, after[0].Spec.ProviderID, "the at-risk instance was replaced")
	assert.True(t, e.nodeGone(eager[0].Name))
	assert.EqualValues(t, 1, e.replicas("eager"))
	assert.Equal(t, 1, e.eventCount("default", eager[0].UID, "RebalanceRecommended"))

	calmNow := e.converged("calm", "web", calmGroup, 1, 30*time.Second)
	assert.Equal(t, calm[0].Name, calmNow[0].Name, "Taint replaces nothing")
	assert.Nil(t, calmNow[0].DeletionTimestamp)
	assert.EqualValues(t, 1, e.replicas("calm"))
	assert.EqualValues(t, 2, e.metric(`nodeset_interruptions_received_total{kind="RebalanceRecommendation"}`))
}

func TestInterruptionsSurviveANodeControllerKill(t *testing.T) {
	e, ctx := newNoticeEnv(t)
	const ns = "notice-kill"
	group, nodes := e.spotSet(ns, "notice-kill", "", 3)
	// The notices are received and acted on, but their deletion from the
	// queue fails until the crash: all of them are in flight when it comes.
	e.lifecycle.holdAcks(true)
	for _, n := range nodes {
		e.queue.Put(t, framework.SpotInterruptionWarning(region, path.Base(n.Spec.ProviderID), time.Now()))
	}
	e.waitFor("a notice acted on and not acknowledged", time.Minute, func() (bool, string) {
		for _, n := range nodes {
			live, err := e.kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if (apierrors.IsNotFound(err) || (err == nil && live.Annotations[nodesetv1alpha1.AnnotationInterruption] != "")) && e.lifecycle.refusedAcks() > 0 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d acknowledgements refused", e.lifecycle.refusedAcks())
	})
	t.Log("SIGKILL while the notices are in flight")
	e.ctrl.Node.Kill(syscall.SIGKILL)
	require.NotZero(t, e.queue.Depth(t), "notices are still on the queue")
	e.lifecycle.holdAcks(false)
	require.NoError(t, e.ctrl.Node.Start())

	for _, n := range nodes {
		e.waitFor("Node "+n.Name+" gone", 2*time.Minute, func() (bool, string) { return e.nodeGone(n.Name), "still there" })
	}
	// A notice whose Node the killed process had released finds no Node
	// when it comes again, and the new process, which did not terminate
	// the instance, keeps it for a Node to come until its two minutes are
	// up; the delivery after that deletes it.
	e.waitFor("the queue empty", 3*time.Minute, func() (bool, string) { d := e.queue.Depth(t); return d == 0, fmt.Sprintf("%d messages", d) })
	after := e.converged(ns, "web", group, 3, 3*time.Minute)
	assert.EqualValues(t, 3, e.replicas(ns))
	logs := e.ctrl.Node.Logs()
	for _, n := range nodes {
		assert.NotContains(t, providerIDs(after), n.Spec.ProviderID)
		acted := regexp.MustCompile(`"Interruption notice; draining the Node".* node="` + regexp.QuoteMeta(n.Name) + `"`)
		assert.Len(t, acted.FindAllString(logs, -1), 1, "Node %s: one notice acted on, whatever was delivered again", n.Name)
		assert.LessOrEqual(t, e.eventCount("default", n.UID, "Interrupted"), 1)
	}

	t.Log("a message nobody can read, and a notice for an instance of no NodeSet: dropped and counted")
	badBefore, unknownBefore := e.metric("nodeset_interruption_messages_unparseable_total"), e.metric("nodeset_interruption_messages_unknown_machine_total")
	e.queue.Send(t, `{"Type":"Notification","Message":"hello"}`)
	// A spot warning would be kept for a Node that may yet appear, and
	// counted only once it expires; a state change is not kept.
	e.queue.Put(t, framework.InstanceStateChange(region, "i-0123456789abcdef0", "stopping", time.Now()))
	e.waitFor("both counted", time.Minute, func() (bool, string) {
		bad, unknown := e.metric("nodeset_interruption_messages_unparseable_total")-badBefore, e.metric("nodeset_interruption_messages_unknown_machine_total")-unknownBefore
		return bad == 1 && unknown == 1, fmt.Sprintf("unparseable %v, unknown %v", bad, unknown)
	})
	// A notice the new process keeps for its Node (above) may still be on
	// the queue until its two minutes are up.
	e.waitFor("the queue empty", 3*time.Minute, func() (bool, string) { d := e.queue.Depth(t); return d == 0, fmt.Sprintf("%d messages", d) })
}

func TestScheduledChangeAndStoppingInstanceAreDrainedAndReplaced(t *testing.T) {
	e, _ := newNoticeEnv(t)
	const ns = "maintenance"
	group, nodes := e.spotSet(ns, "maintenance", "", 2)
	retiring, stopping := nodes[0], nodes[1]
	now := time.Now()
	e.queue.Put(t, framework.ScheduledInstanceRetirement(region, path.Base(retiring.Spec.ProviderID), now, now.Add(14*24*time.Hour)))
	e.queue.Put(t, framework.InstanceStateChange(region, path.Base(stopping.Spec.ProviderID), "stopping", now))
	e.queue.Put(t, framework.InstanceStateChange(region, path.Base(stopping.Spec.ProviderID), "running", now.Add(-time.Minute)))
	for _, n := range []corev1.Node{retiring, stopping} {
		e.waitFor("Node "+n.Name+" gone", 2*time.Minute, func() (bool, string) { return e.nodeGone(n.Name), "still there" })
	}
	after := e.converged(ns, "web", group, 2, 3*time.Minute)
	assert.NotContains(t, providerIDs(after), retiring.Spec.ProviderID)
	assert.NotContains(t, providerIDs(after), stopping.Spec.ProviderID)
	assert.EqualValues(t, 2, e.replicas(ns))
	// Every message read and acknowledged, the running state's too.
	e.waitFor("the queue empty", time.Minute, func() (bool, string) { d := e.queue.Depth(t); return d == 0, fmt.Sprintf("%d messages", d) })
	assert.EqualValues(t, 1, e.metric(`nodeset_interruptions_received_total{kind="ScheduledChange"}`))
	assert.EqualValues(t, 1, e.metric(`nodeset_interruptions_received_total{kind="StateChange"}`), "the running state is read, and not counted: nothing is done for it")
	assert.Zero(t, e.metric("nodeset_interruption_drains_unfinished_total"), "neither Node had pods to leave behind")
}

// Auto Scaling refuses a termination with decrement that takes a group
// below its minimum size (moto does not; the test's proxy does). A NodeSet
// without autoscaling keeps its group at its size: an instance taken out
// ahead of an announced end must still go, and its replacement come up,
// long before the end (a retirement is announced weeks ahead). The group's
// minimum is 0 for that.
func TestAnnouncedEndReplacesTheInstanceAtTheGroupsMinimumSize(t *testing.T) {
	e, _ := newNoticeEnv(t)
	e.lifecycle.enforceMinSize()
	const ns = "retire-min"
	group, nodes := e.spotSet(ns, "retire-min", "", 2)
	retiring := nodes[0]
	now := time.Now()
	e.queue.Put(t, framework.ScheduledInstanceRetirement(region, path.Base(retiring.Spec.ProviderID), now, now.Add(14*24*time.Hour)))
	e.waitFor("Node "+retiring.Name+" gone", time.Minute, func() (bool, string) { return e.nodeGone(retiring.Name), "still there" })
	after := e.converged(ns, "web", group, 2, 2*time.Minute)
	assert.NotContains(t, providerIDs(after), retiring.Spec.ProviderID)
	assert.EqualValues(t, 2, e.replicas(ns))
}
