package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/test/framework"
)

// What became of an input, as counted in a run's closing log line.
const (
	byWebhook    = "refused by the webhook"
	bySchema     = "refused by the schema"
	byRBAC       = "refused by RBAC"
	byPolicy     = "refused by the admission policy"
	byAutoscaler = "refused by the autoscaler API"
	harmless     = "admitted and harmless"
	unvalidated  = "admitted and harmless, class not validated (no node controller serves its driver here)"
	failure      = "failures"
)

var outcomeOrder = []string{byWebhook, bySchema, byRBAC, byPolicy, byAutoscaler, harmless, unvalidated, failure}

// notAcceptedReasons are the reasons of Accepted=False a want may name: the
// controller must report the same one for an object admitted without the
// webhook.
var notAcceptedReasons = []string{"InvalidTemplate", "OverrideNotAllowed", "NamespaceNotAllowed", "LimitExceeded"}

// TestBadInputCorpus sends each input of the corpus (NodeSets and
// NodeClasses as raw JSON the way kubectl does, with fieldValidation=Strict;
// /scale writes; cluster-autoscaler's gRPC calls; pods aimed at another
// namespace's Dedicated nodes) to the real API server twice: with the
// nodeset webhook registered, where every one is refused naming the field,
// and with its registration deleted, where every one is either refused by
// the schema (or the admission policy, or the autoscaler API) naming the
// field, or admitted and harmless: a NodeSet Accepted=False naming the
// field and without a Node, a NodeClass Valid=False naming the field that
// no NodeSet is accepted for, a /scale write past the class's limits that
// gets no Node beyond them. Throughout, a victim tenant's NodeSet keeps its
// Nodes, and it still scales at the end.
func TestBadInputCorpus(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	victimNS := createNamespace(t, "corpus-victim")
	createCorpusClasses(t, victimNS)
	createSet(t, victimNS, "victim", corpusLimited, 1)
	eventually(t, 2*time.Minute, "the victim's node", converged(c, t, victimNS, "victim", 1))
	victimNodes := nodeNames(t, victimNS, "victim")
	cp := framework.Shared(t)
	require.NoError(t, framework.InstallAdmissionPolicy(ctx, cp))
	t.Cleanup(func() { require.NoError(t, framework.UninstallAdmissionPolicy(context.Background(), cp)) })

	corpus := append(append(badInputs(), driverInputs()...), classInputs()...)
	scales, calls, pods := scaleInputs(), autoscalerInputs(), podInputs()
	total := len(corpus) + len(scales) + len(calls) + len(pods) + 1 // and a pod update
	require.GreaterOrEqual(t, total, 120)
	names := sets.New[string]()
	for _, in := range corpus {
		require.False(t, names.Has(in.name), "two inputs named %q", in.name)
		names.Insert(in.name)
	}

	var summaries []string
	for _, hooked := range []bool{true, false} {
		title, tag := "with the webhook", "h"
		if !hooked {
			title, tag = "without the webhook", "u"
		}
		t.Run(title, func(t *testing.T) {
			if !hooked {
				withoutWebhook(t)
			}
			r := newCorpusRun(t, c, tag, hooked, victimNS)
			start := time.Now()
			for i, in := range corpus {
				r.send(i, in)
			}
			for _, in := range scales {
				r.send(0, in)
			}
			r.call(calls)
			r.createPods(pods)
			r.awaitHarmless(2 * time.Minute)
			r.cleanUp()
			require.Equal(t, victimNodes, nodeNames(t, victimNS, "victim"), "the victim keeps its Nodes")
			summary := r.summary(total)
			t.Logf("%s, %d inputs in %s: %s", title, total, time.Since(start).Round(time.Second), summary)
			summaries = append(summaries, title+": "+summary)
		})
	}
	t.Logf("corpus of %d inputs (%d NodeSet/NodeClass, %d /scale, %d autoscaler, %d pod):\n  %s",
		total, len(corpus), len(scales), len(calls), len(pods)+1, strings.Join(summaries, "\n  "))

	// The victim still scales.
	scale(t, victimNS, "victim", 2)
	eventually(t, 2*time.Minute, "the victim scales", converged(c, t, victimNS, "victim", 2))
}

// createCorpusClasses makes the classes the tenant inputs aim at.
func createCorpusClasses(t *testing.T, victimNS string) {
	t.Helper()
	only := func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{victimNS}}
	}
	section := func(driver string, sections nodesetv1alpha1.DriverSections, overrides ...string) func(*nodesetv1alpha1.NodeClass) {
		return func(c *nodesetv1alpha1.NodeClass) {
			c.Spec.Driver, c.Spec.DriverSections, c.Spec.TenantOverrides = driver, sections, overrides
		}
	}
	createClass(t, "corpus-sim", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](50)}
	})
	createClass(t, corpusLimited, func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Tenancy = nodesetv1alpha1.TenancyDedicated
		c.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](6), MaxNodesPerNamespace: ptr.To[int32](2)}
	})
	createClass(t, corpusOpen, func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Simulated.Labels = map[string]string{"example.com/team": "platform"}
		c.Spec.Simulated.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")}
		c.Spec.TenantOverrides = []string{"labels", "bootDelay", "capacity.memory"}
	})
	createClass(t, corpusASG, section(nodesetv1alpha1.DriverEKSASG, nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{
		ClusterName: "prod", Region: "eu-west-1", ImageID: "ami-0123456789abcdef0",
		MixedInstances: &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m5.large"}},
		Tags:           map[string]string{"team": "unassigned", "cost-center": "platform"},
		Bootstrap:      &nodesetv1alpha1.EKSBootstrap{KubeletExtraArgs: []string{"--v=2"}},
	}}, "mixedInstances.instanceTypes", "tags", "bootstrap.kubeletExtraArgs",
		// The schema defaults bootstrap.format in a tenant's section too:
		// without it listed, no kubeletExtraArgs would get past the
		// override check to the kubelet-flag rules.
		"bootstrap.format"))
	createClass(t, corpusManaged, section(nodesetv1alpha1.DriverEKSManaged, nodesetv1alpha1.DriverSections{EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{
		ClusterName: "prod", Region: "eu-west-1", NodeRole: "arn:aws:iam::123456789012:role/node",
		Labels: map[string]string{"example.com/pool": "gpu"},
	}}, "labels", "taints", "instanceTypes"))
	createClass(t, corpusDocker, section(nodesetv1alpha1.DriverDockerMachine, nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{
		DriverName: "fake", Options: map[string]string{"fake-size": "small"},
	}}, "options"))
	createClass(t, corpusExternal, func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Driver, c.Spec.Simulated, c.Spec.TenantOverrides = "corpus-out-of-tree", nil, []string{"size"}
		c.Spec.Parameters = &runtime.RawExtension{Raw: []byte(`{"size":"small","image":"base","labels":{"a":"b"}}`)}
	})
	createClass(t, corpusListed, only)
	createClass(t, corpusUnserved, func(c *nodesetv1alpha1.NodeClass) {
		only(c)
		c.Spec.Driver, c.Spec.Simulated = "no-such-driver", nil
		c.Spec.Parameters = &runtime.RawExtension{Raw: []byte(`{}`)}
	})
	createClass(t, corpusSelector, func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromSelector,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "premium"}}}
	})
}

// corpusRun sends the corpus once, from an attacker namespace of its own.
type corpusRun struct {
	t            *testing.T
	c            *controllers
	tag          string
	hooked       bool
	ns, victimNS string
	tenantKube   kubernetes.Interface
	tenantSets   versioned.Interface
	admin        kubernetes.Interface
	cs           versioned.Interface
	counts       map[string]int
	// pending are the objects admitted without the webhook, each with the
	// check that shows it harmless.
	pending []pendingCheck
	// admittedSets and admittedClasses are deleted when the run ends.
	admittedSets, admittedClasses []string
}

type pendingCheck struct {
	input    string
	category string
	check    func(s *corpusSnapshot) (bool, string)
}

func newCorpusRun(t *testing.T, c *controllers, tag string, hooked bool, victimNS string) *corpusRun {
	ns := createNamespace(t, "corpus-attacker-"+tag)
	tenantKube, tenantSets := tenant(t, "tenant-b", ns)
	admin, cs := clients(t)
	r := &corpusRun{t: t, c: c, tag: tag, hooked: hooked, ns: ns, victimNS: victimNS,
		tenantKube: tenantKube, tenantSets: tenantSets, admin: admin, cs: cs, counts: map[string]int{}}
	// What the /scale and autoscaler inputs act on: a set of the limited
	// class and an autoscaled one, one Node each.
	createSet(t, ns, "scaled", corpusLimited, 1)
	auto := tenantSet("auto", "corpus-sim", 1)
	auto.Spec.Autoscaling = &nodesetv1alpha1.Autoscaling{MinReplicas: 1, MaxReplicas: 3}
	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(context.Background(), auto, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "the attacker's limited set", converged(c, t, ns, "scaled", 1))
	eventually(t, 2*time.Minute, "the attacker's autoscaled set", converged(c, t, ns, "auto", 1))
	return r
}

func (r *corpusRun) count(category string) { r.counts[category]++ }

func (r *corpusRun) summary(total int) string {
	var parts []string
	sum := 0
	for _, category := range outcomeOrder {
		if n := r.counts[category]; n > 0 || category == failure {
			parts = append(parts, fmt.Sprintf("%s %d", category, n))
			sum += n
		}
	}
	if sum != total {
		parts = append(parts, fmt.Sprintf("(%d of %d inputs counted)", sum, total))
	}
	return strings.Join(parts, ", ")
}

// send posts one NodeSet, NodeClass or /scale input and judges the answer.
func (r *corpusRun) send(i int, in badInput) {
	r.t.Run(in.name, func(t *testing.T) {
		ctx := context.Background()
		name := in.object
		if !in.fixed && in.target != "scale" {
			name = fmt.Sprintf("c%s-%03d", r.tag, i)
		}
		ns := r.ns
		if in.intoVictim {
			ns = r.victimNS
		}
		client := r.tenantKube.CoreV1().RESTClient()
		req := client.Post().AbsPath("/apis/nodeset.dev/v1alpha1/namespaces/" + ns + "/nodesets")
		switch in.target {
		case "class":
			if !in.fixed {
				name = "corpus-" + name
			}
			req = r.admin.CoreV1().RESTClient().Post().AbsPath("/apis/nodeset.dev/v1alpha1/nodeclasses")
		case "scale":
			path := "/apis/nodeset.dev/v1alpha1/namespaces/" + ns + "/nodesets/" + in.object + "/scale"
			req = client.Put().AbsPath(path)
			if in.patch {
				req = client.Patch("application/merge-patch+json").AbsPath(path)
			}
		}
		contentType := "application/json"
		if in.patch {
			contentType = "application/merge-patch+json"
		}
		var code int
		result := req.Param("fieldValidation", "Strict").SetHeader("Content-Type", contentType).Body([]byte(in.body(name))).Do(ctx)
		err := result.StatusCode(&code).Error()
		if err != nil {
			r.judgeRefusal(t, in, code, err)
			return
		}
		if in.target != "scale" {
			// generateName: the stored name.
			var stored metav1.PartialObjectMetadata
			if raw, err := result.Raw(); err == nil && json.Unmarshal(raw, &stored) == nil && stored.Name != "" {
				name = stored.Name
			}
		}
		r.admitted(t, in, name)
	})
}

// judgeRefusal counts a refusal by the layer that made it and checks that it
// names the field.
func (r *corpusRun) judgeRefusal(t *testing.T, in badInput, code int, err error) {
	msg := err.Error()
	category := bySchema
	switch {
	case strings.Contains(msg, "admission webhook"):
		category = byWebhook
	case strings.Contains(msg, "ValidatingAdmissionPolicy"):
		category = byPolicy
	case code == http.StatusForbidden:
		category = byRBAC
	}
	var problems []string
	if code < 400 || code >= 500 {
		problems = append(problems, fmt.Sprintf("want a 4xx refusal, got %d", code))
	}
	if !r.hooked && category == byWebhook {
		problems = append(problems, "refused by the webhook, whose registration is deleted")
	}
	want := in.want
	if !r.hooked {
		want = []string{in.named()}
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			problems = append(problems, fmt.Sprintf("the refusal does not say %q", w))
		}
	}
	if len(problems) > 0 {
		r.count(failure)
		t.Errorf("%s (%s, %d): %s\n  refusal: %s", in.name, category, code, strings.Join(problems, "; "), msg)
		return
	}
	r.count(category)
}

// admitted records an object the API server stored: with the webhook that
// is a failure; without it, a check that it is harmless.
func (r *corpusRun) admitted(t *testing.T, in badInput, name string) {
	ctx := context.Background()
	switch in.target {
	case "set":
		r.admittedSets = append(r.admittedSets, name)
	case "class":
		r.admittedClasses = append(r.admittedClasses, name)
	}
	if r.hooked {
		r.count(failure)
		t.Errorf("%s: admitted with the webhook registered (stored as %q)", in.name, name)
		return
	}
	switch in.target {
	case "set":
		r.pending = append(r.pending, pendingCheck{input: in.name, category: harmless, check: setHarmless(in, name)})
	case "scale":
		r.pending = append(r.pending, pendingCheck{input: in.name, category: harmless, check: setHarmless(in, in.object)})
	case "class":
		// A NodeSet of the class shows that no NodeSet of it is accepted.
		probe := "probe-" + name
		_, err := r.tenantSets.NodesetV1alpha1().NodeSets(r.ns).Create(ctx, tenantSet(probe, name, 1), metav1.CreateOptions{})
		require.NoError(t, err, "a NodeSet of the admitted class, without the webhook")
		r.admittedSets = append(r.admittedSets, probe)
		r.pending = append(r.pending, pendingCheck{input: in.name, category: harmless, check: classHarmless(in, name, probe)})
	}
}

// corpusSnapshot is what the harmless checks look at: the attacker's
// NodeSets and Nodes, and the NodeClasses.
type corpusSnapshot struct {
	sets    map[string]*nodesetv1alpha1.NodeSet
	classes map[string]*nodesetv1alpha1.NodeClass
	nodes   []corev1.Node
}

func (r *corpusRun) snapshot(ctx context.Context) (*corpusSnapshot, error) {
	s := &corpusSnapshot{sets: map[string]*nodesetv1alpha1.NodeSet{}, classes: map[string]*nodesetv1alpha1.NodeClass{}}
	setList, err := r.cs.NodesetV1alpha1().NodeSets(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range setList.Items {
		s.sets[setList.Items[i].Name] = &setList.Items[i]
	}
	classList, err := r.cs.NodesetV1alpha1().NodeClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range classList.Items {
		s.classes[classList.Items[i].Name] = &classList.Items[i]
	}
	nodes, err := r.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodesetv1alpha1.LabelNodeSetNamespace + "=" + r.ns})
	if err != nil {
		return nil, err
	}
	s.nodes = nodes.Items
	return s, nil
}

// nodesWith counts the attacker's Nodes whose label key is value.
func (s *corpusSnapshot) nodesWith(key, value string) int {
	n := 0
	for _, node := range s.nodes {
		if node.Labels[key] == value {
			n++
		}
	}
	return n
}

// notAccepted says whether the set is Accepted=False at its generation
// with a message that names field, and why not.
func (s *corpusSnapshot) notAccepted(name, field, reason string) (bool, string) {
	set := s.sets[name]
	if set == nil {
		return false, "NodeSet " + name + " not found"
	}
	accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	switch {
	case accepted == nil || accepted.ObservedGeneration != set.Generation:
		return false, fmt.Sprintf("no Accepted condition for generation %d yet", set.Generation)
	case accepted.Status != metav1.ConditionFalse:
		return false, "Accepted=" + string(accepted.Status) + ": " + accepted.Message
	case reason != "" && accepted.Reason != reason:
		return false, fmt.Sprintf("Accepted=False %s, want %s: %s", accepted.Reason, reason, accepted.Message)
	case !strings.Contains(accepted.Message, field):
		return false, fmt.Sprintf("Accepted=False %s does not name %q: %s", accepted.Reason, field, accepted.Message)
	}
	return true, ""
}

// setHarmless: the set is Accepted=False naming the field, and has no Node;
// a set over a limit holds no more than its namespace's share.
func setHarmless(in badInput, name string) func(s *corpusSnapshot) (bool, string) {
	reason := ""
	for _, w := range in.want {
		for _, known := range notAcceptedReasons {
			if w == known {
				reason = known
			}
		}
	}
	field := in.named()
	if reason == "LimitExceeded" {
		field = "spec.limits.maxNodesPerNamespace"
	}
	return func(s *corpusSnapshot) (bool, string) {
		if ok, why := s.notAccepted(name, field, reason); !ok {
			return false, why
		}
		if reason == "LimitExceeded" {
			if n := s.nodesWith(nodesetv1alpha1.LabelNodeClass, corpusLimited); n > 2 {
				return false, fmt.Sprintf("the namespace has %d Nodes of %s, whose maxNodesPerNamespace is 2", n, corpusLimited)
			}
			return true, ""
		}
		if n := s.nodesWith(nodesetv1alpha1.LabelNodeSet, name); n > 0 {
			return false, fmt.Sprintf("%d Nodes made for it", n)
		}
		return true, ""
	}
}

// classHarmless: the class is Valid=False naming the field, and a NodeSet of
// it is not accepted and gets no Node. A class of a driver no node
// controller here serves is never validated; its NodeSet waits.
func classHarmless(in badInput, name, probe string) func(s *corpusSnapshot) (bool, string) {
	return func(s *corpusSnapshot) (bool, string) {
		class := s.classes[name]
		if class == nil {
			return false, "NodeClass " + name + " not found"
		}
		valid := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
		served := class.Spec.Driver == nodesetv1alpha1.DriverSimulated || class.Spec.Driver == nodesetv1alpha1.DriverDockerMachine
		note := ""
		switch {
		case !served && valid == nil:
			if ok, why := s.notAccepted(probe, "so nothing validates NodeClass", "DriverNotServed"); !ok {
				return false, "its NodeSet: " + why
			}
			note = "unvalidated"
		case valid == nil || valid.ObservedGeneration != class.Generation:
			return false, "no Valid condition for this generation yet"
		case valid.Status != metav1.ConditionFalse || !strings.Contains(valid.Message, in.named()):
			return false, fmt.Sprintf("Valid=%s %s, want False naming %q: %s", valid.Status, valid.Reason, in.named(), valid.Message)
		default:
			if ok, why := s.notAccepted(probe, "", ""); !ok {
				return false, "its NodeSet: " + why
			}
		}
		if n := s.nodesWith(nodesetv1alpha1.LabelNodeSet, probe); n > 0 {
			return false, fmt.Sprintf("its NodeSet has %d Nodes", n)
		}
		return true, note
	}
}

// awaitHarmless polls every pending check together until all hold or the
// deadline passes. The sleeps are its poll interval, not a window that proves
// anything: each check waits for an observed state (a condition at the
// object's generation, the absence of Nodes after it).
func (r *corpusRun) awaitHarmless(timeout time.Duration) {
	ctx := context.Background()
	pending, last := r.pending, map[string]string{}
	deadline := time.Now().Add(timeout)
	for len(pending) > 0 && time.Now().Before(deadline) {
		snap, err := r.snapshot(ctx)
		if err != nil {
			last["*"] = err.Error()
			time.Sleep(250 * time.Millisecond)
			continue
		}
		var still []pendingCheck
		for _, p := range pending {
			ok, why := p.check(snap)
			if !ok {
				last[p.input] = why
				still = append(still, p)
				continue
			}
			category := p.category
			if strings.Contains(why, "unvalidated") {
				category = unvalidated
			}
			r.count(category)
		}
		pending = still
		if len(pending) > 0 {
			time.Sleep(250 * time.Millisecond)
		}
	}
	for _, p := range pending {
		r.count(failure)
		r.t.Errorf("%s: admitted without the webhook and not shown harmless within %s: %s", p.input, timeout, last[p.input])
	}
}

// cleanUp deletes what the run's inputs left stored and waits until it is
// gone: the classes' in-use finalizer goes with their last NodeSet.
func (r *corpusRun) cleanUp() {
	ctx := context.Background()
	for _, name := range r.admittedSets {
		if err := r.cs.NodesetV1alpha1().NodeSets(r.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			r.t.Errorf("deleting NodeSet %s: %v", name, err)
		}
	}
	for _, name := range r.admittedClasses {
		if err := r.cs.NodesetV1alpha1().NodeClasses().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			r.t.Errorf("deleting NodeClass %s: %v", name, err)
		}
	}
	eventually(r.t, 2*time.Minute, "what the inputs stored is gone", func(ctx context.Context) (bool, string) {
		var left []string
		for _, name := range r.admittedSets {
			if _, err := r.cs.NodesetV1alpha1().NodeSets(r.ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, "NodeSet "+name)
			}
		}
		for _, name := range r.admittedClasses {
			if _, err := r.cs.NodesetV1alpha1().NodeClasses().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, "NodeClass "+name)
			}
		}
		sort.Strings(left)
		return len(left) == 0, strings.Join(left, ", ")
	})
}
