package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"nodeset.dev/nodeset/test/framework"
)

// steps says where a scale's time goes, from the audit log: when each
// Node took each step.
//
// Going up, a Node is created by the nodeset-controller, reported Ready by
// its (simulated) kubelet, and registered by the node controller (the
// providerID recorded with the startup taint lifted, one write).
//
// Going down, the nodeset-controller deletes it, the node controller
// cordons it, lists its pods (its own list, or a list of every pod shared
// by the drains of the moment) and, once the machine is gone, releases its
// finalizer.
type steps struct {
	// Nodes is how many Nodes went through every step.
	Nodes int `json:"nodes"`
	// Last are the seconds from the scale until the last Node had taken
	// each step.
	Last map[string]float64 `json:"lastSeconds"`
	// Median and P90 are the seconds each step took per Node, from the end
	// of the step before ("delete -> cordon", ...).
	Median map[string]float64 `json:"medianSeconds"`
	P90    map[string]float64 `json:"p90Seconds"`
	// Server is the median seconds of a step's request at the API server
	// (from its receipt to its response), part of the step's time: the
	// rest is the controller's before it sent the request.
	Server map[string]float64 `json:"serverMedianSeconds"`
}

var (
	upSteps   = []string{"create", "kubelet Ready", "registered"}
	downSteps = []string{"delete", "cordon", "pod list", "release"}
)

// stepAt is one Node's step: when its request reached the API server, and
// when it was done.
type stepAt struct{ sent, done time.Time }

func (s stepAt) missing() bool { return s.done.IsZero() }

// summarize makes steps of when each Node (by name) took each step, in the
// order of names; Nodes that missed a step are left out.
func summarize(ends map[string][]stepAt, names []string, start time.Time) *steps {
	out := &steps{Last: map[string]float64{}, Median: map[string]float64{}, P90: map[string]float64{}, Server: map[string]float64{}}
	took, served := map[string][]float64{}, map[string][]float64{}
	for _, s := range ends {
		if len(s) != len(names) || slices.ContainsFunc(s, stepAt.missing) {
			continue
		}
		out.Nodes++
		for i, step := range names {
			out.Last[step] = max(out.Last[step], s[i].done.Sub(start).Seconds())
			if i > 0 {
				took[names[i-1]+" -> "+step] = append(took[names[i-1]+" -> "+step], s[i].done.Sub(s[i-1].done).Seconds())
				served[step] = append(served[step], s[i].done.Sub(s[i].sent).Seconds())
			}
		}
	}
	for step, d := range took {
		sort.Float64s(d)
		out.Median[step] = d[len(d)/2]
		out.P90[step] = d[len(d)*9/10]
	}
	for step, d := range served {
		sort.Float64s(d)
		out.Server[step] = d[len(d)/2]
	}
	return out
}

// scaleUpTimes reads the steps of the Nodes named with prefix from the
// audit events of a scale-up that started at start. Nodes are created with
// a generated name, which the audit log of a create does not have: the
// creates are counted only in Last, the per-Node steps start at the
// kubelet's first status.
func scaleUpTimes(events []framework.AuditEvent, start time.Time, prefix string) *steps {
	ends := map[string][]stepAt{}
	var lastCreate time.Time
	for _, e := range events {
		if e.ObjectRef == nil || !e.Succeeded() || e.ObjectRef.Resource != "nodes" {
			continue
		}
		if e.User.Username == "nodeset-controller" && e.Verb == "create" {
			lastCreate = e.Completed
			continue
		}
		name := e.ObjectRef.Name
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		switch s := ends[name]; {
		case s == nil && source(e) == "simulated-kubelets" && e.ObjectRef.Subresource == "status":
			ends[name] = []stepAt{{e.RequestReceived, e.Completed}, {}}
		case len(s) == 2 && s[1].missing() && source(e) == "node-controller" && (e.Verb == "patch" || e.Verb == "update") && e.ObjectRef.Subresource == "":
			s[1] = stepAt{e.RequestReceived, e.Completed}
		}
	}
	out := summarize(ends, upSteps[1:], start)
	if !lastCreate.IsZero() {
		out.Last[upSteps[0]] = lastCreate.Sub(start).Seconds()
	}
	return out
}

// scaleDownTimes reads the steps of the Nodes named with prefix from the
// audit events of a scale-down that started at start.
func scaleDownTimes(events []framework.AuditEvent, start time.Time, prefix string) *steps {
	ends := map[string][]stepAt{}
	var lists []framework.AuditEvent
	for _, e := range events {
		if e.ObjectRef == nil || !e.Succeeded() || source(e) == "simulated-kubelets" {
			continue
		}
		name := e.ObjectRef.Name
		switch {
		case e.User.Username == "nodeset-controller" && e.Verb == "delete" && e.ObjectRef.Resource == "nodes" && strings.HasPrefix(name, prefix):
			ends[name] = []stepAt{{e.RequestReceived, e.Completed}}
		case e.User.Username == "node-controller" && (e.Verb == "update" || e.Verb == "patch") && e.ObjectRef.Resource == "nodes" && e.ObjectRef.Subresource == "" && len(ends[name]) > 0:
			// The first write after the delete is the cordon, the last
			// the release (patches both, updates in earlier versions).
			if len(ends[name]) == 1 {
				ends[name] = append(ends[name], stepAt{e.RequestReceived, e.Completed})
			} else {
				ends[name] = append(ends[name][:2], stepAt{}, stepAt{e.RequestReceived, e.Completed})
			}
		case e.User.Username == "node-controller" && e.Verb == "list" && e.ObjectRef.Resource == "pods":
			lists = append(lists, e)
		}
	}
	for name, s := range ends {
		if len(s) != 4 {
			delete(ends, name) // not released in the window
			continue
		}
		// The drain's pod list: the first one received after the cordon
		// that is either this Node's or every pod's.
		for _, l := range lists {
			own := strings.Contains(l.RequestURI, "spec.nodeName%3D"+name+"&") || strings.HasSuffix(l.RequestURI, "spec.nodeName%3D"+name)
			if !l.RequestReceived.Before(s[1].done) && (own || !strings.Contains(l.RequestURI, "spec.nodeName")) {
				s[2] = stepAt{l.RequestReceived, l.Completed}
				break
			}
		}
	}
	return summarize(ends, downSteps, start)
}

// refusals counts the requests refused with 429 by source, and the longest
// a leader-election request took at the API server.
func refusals(events []framework.AuditEvent) (map[string]float64, float64) {
	refused := map[string]float64{"controllers": 0, "leader-election": 0, "simulated-kubelets": 0}
	var leaseMax time.Duration
	for _, e := range events {
		src := source(e)
		if src == "" {
			continue
		}
		if src == "leader-election" {
			leaseMax = max(leaseMax, e.Completed.Sub(e.RequestReceived))
		}
		if e.ResponseStatus == nil || e.ResponseStatus.Code != 429 {
			continue
		}
		if src == "nodeset-controller" || src == "node-controller" {
			src = "controllers"
		}
		refused[src]++
	}
	return refused, leaseMax.Seconds()
}

// conflictsAfter counts the node controller's Node writes refused with 409,
// per node, by the writer of the last successful write of that Node
// received before: what the node controller's cached copy missed.
func conflictsAfter(events []framework.AuditEvent, n int) map[string]float64 {
	out := map[string]float64{}
	lastWriter := map[string]string{}
	for _, e := range events {
		if e.ObjectRef == nil || e.ObjectRef.Resource != "nodes" || !e.IsWrite() {
			continue
		}
		name := e.ObjectRef.Name
		if e.Succeeded() {
			writer := source(e)
			if writer == "" {
				writer = e.User.Username
			}
			lastWriter[name] = writer
			continue
		}
		if e.ResponseStatus != nil && e.ResponseStatus.Code == 409 && source(e) == "node-controller" {
			out[lastWriter[name]] += 1 / float64(n)
		}
	}
	return out
}

// noRestarts fails the benchmark when a controller exited during the run
// (and was restarted by its supervision): its figures would be of two
// processes, not one run.
func noRestarts(b *testing.B, c *framework.Controllers) {
	for _, p := range []*framework.Process{c.NodeSet, c.Node} {
		if n := p.Restarts(); n > 0 {
			b.Errorf("%s exited and was restarted %d times during the run; its figures are not one run's", p.Name, n)
		}
	}
}

// grantBaseline lets the baseline's user manage Nodes.
func grantBaseline(b *testing.B, cp *framework.ControlPlane) {
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	_, err := kube.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: baselineUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: baselineUser}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
}

// installFlowSchemas creates deploy/'s FlowSchemas for as long as b runs,
// with the controllers' users for their service accounts, and the
// baseline's user beside them, so that it is limited by the same priority
// level.
func installFlowSchemas(b *testing.B, cp *framework.ControlPlane) {
	root, err := framework.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "controllers", "flowschema.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ctx := context.Background()
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var fs flowcontrolv1.FlowSchema
		if err := yaml.UnmarshalStrict([]byte(doc), &fs); err != nil {
			b.Fatal(err)
		}
		for i := range fs.Spec.Rules {
			rule := &fs.Spec.Rules[i]
			var users []flowcontrolv1.Subject
			for _, s := range rule.Subjects {
				if s.Kind == flowcontrolv1.SubjectKindServiceAccount {
					users = append(users, flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: s.ServiceAccount.Name}})
				}
			}
			if !slices.ContainsFunc(rule.ResourceRules, func(r flowcontrolv1.ResourcePolicyRule) bool { return slices.Contains(r.Resources, "leases") }) {
				users = append(users, flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: baselineUser}})
			}
			rule.Subjects = users
		}
		if _, err := kube.FlowcontrolV1().FlowSchemas().Create(ctx, &fs, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		b.Logf("FlowSchema %s installed: priority level %s", fs.Name, fs.Spec.PriorityLevelConfiguration.Name)
		b.Cleanup(func() {
			if err := kube.FlowcontrolV1().FlowSchemas().Delete(context.Background(), fs.Name, metav1.DeleteOptions{}); err != nil {
				b.Error(err)
			}
		})
	}
}

// auditEvent is a completed request for the step tests.
func auditEvent(user, agent, verb, resource, sub, name, uri string, received, completed time.Time, code int) framework.AuditEvent {
	var e framework.AuditEvent
	e.Stage, e.Verb, e.UserAgent, e.User.Username = "ResponseComplete", verb, agent, user
	e.ObjectRef = &struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	}{Resource: resource, Subresource: sub, Name: name}
	e.RequestURI, e.RequestReceived, e.Completed = uri, received, completed
	e.ResponseStatus = &struct {
		Code int `json:"code"`
	}{Code: code}
	return e
}

func TestScaleDownTimes(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	events := []framework.AuditEvent{
		auditEvent("nodeset-controller", "nodeset-controller", "delete", "nodes", "", "fleet-a", "/api/v1/nodes/fleet-a", at(0), at(10), 200),
		auditEvent("nodeset-controller", "nodeset-controller", "delete", "nodes", "", "fleet-b", "/api/v1/nodes/fleet-b", at(5), at(20), 200),
		// A's cordon, refused once, then done.
		auditEvent("node-controller", "node-controller", "update", "nodes", "", "fleet-a", "/api/v1/nodes/fleet-a", at(100), at(110), 409),
		auditEvent("node-controller", "node-controller", "patch", "nodes", "", "fleet-a", "/api/v1/nodes/fleet-a", at(200), at(210), 200),
		// A list of every pod before B's cordon serves A only.
		auditEvent("node-controller", "node-controller", "list", "pods", "", "", "/api/v1/pods?limit=500", at(300), at(310), 200),
		auditEvent("node-controller", "node-controller", "update", "nodes", "", "fleet-b", "/api/v1/nodes/fleet-b", at(400), at(420), 200),
		// A kubelet's write and another Node's list are not B's steps.
		auditEvent(framework.KubeletsName, "nodeset-simulated-kubelet/v1alpha1", "patch", "nodes", "", "fleet-b", "/api/v1/nodes/fleet-b", at(450), at(460), 200),
		auditEvent("node-controller", "node-controller", "list", "pods", "", "", "/api/v1/pods?fieldSelector=spec.nodeName%3Dfleet-bb", at(470), at(480), 200),
		auditEvent("node-controller", "node-controller", "list", "pods", "", "", "/api/v1/pods?fieldSelector=spec.nodeName%3Dfleet-b", at(500), at(530), 200),
		auditEvent("node-controller", "node-controller", "patch", "nodes", "", "fleet-a", "/api/v1/nodes/fleet-a", at(600), at(610), 200),
		auditEvent("node-controller", "node-controller", "update", "nodes", "", "fleet-b", "/api/v1/nodes/fleet-b", at(900), at(920), 200),
		// Not a Node of the set.
		auditEvent("nodeset-controller", "nodeset-controller", "delete", "nodes", "", "other-c", "/api/v1/nodes/other-c", at(5), at(20), 200),
	}
	got := scaleDownTimes(events, start, "fleet-")
	assert.Equal(t, 2, got.Nodes)
	assert.Equal(t, map[string]float64{"delete": 0.02, "cordon": 0.42, "pod list": 0.53, "release": 0.92}, got.Last)
	// A: 0.2 to cordon, 0.1 to its list, 0.3 to release; B: 0.4, 0.11, 0.39.
	assert.InDelta(t, 0.4, got.Median["delete -> cordon"], 1e-9)
	assert.InDelta(t, 0.11, got.Median["cordon -> pod list"], 1e-9)
	assert.InDelta(t, 0.39, got.Median["pod list -> release"], 1e-9)
	// Cordons at the server 10 and 20 ms; lists 10 and 30; releases 10 and 20.
	assert.InDelta(t, 0.02, got.Server["cordon"], 1e-9)
	assert.InDelta(t, 0.03, got.Server["pod list"], 1e-9)
	assert.InDelta(t, 0.02, got.Server["release"], 1e-9)
}

func TestRefusals(t *testing.T) {
	now := time.Now()
	lease := auditEvent("node-controller", "node-controller", "update", "leases", "", "node-controller", "", now, now.Add(1500*time.Millisecond), 429)
	lease.ObjectRef.Namespace = "nodeset-system"
	refused, slowest := refusals([]framework.AuditEvent{lease,
		auditEvent("node-controller", "node-controller", "update", "nodes", "", "x", "", now, now, 429),
		auditEvent(framework.KubeletsName, "nodeset-simulated-kubelet/v1alpha1", "update", "leases", "", "x", "", now, now, 200),
		auditEvent("tenant-a", "kubectl", "update", "nodes", "", "x", "", now, now, 429),
	})
	assert.Equal(t, map[string]float64{"leader-election": 1, "controllers": 1, "simulated-kubelets": 0}, refused)
	assert.InDelta(t, 1.5, slowest, 1e-9)
}

func TestConflictsAfter(t *testing.T) {
	now := time.Now()
	events := []framework.AuditEvent{
		auditEvent("node-controller", "node-controller", "update", "nodes", "", "a", "", now, now, 200),
		auditEvent(framework.ControllerManagerName, "kube-controller-manager", "update", "nodes", "", "a", "", now, now, 200),
		auditEvent("node-controller", "node-controller", "update", "nodes", "", "a", "", now, now, 409),
		auditEvent(framework.KubeletsName, "nodeset-simulated-kubelet/v1alpha1", "patch", "nodes", "status", "b", "", now, now, 200),
		auditEvent("node-controller", "node-controller", "update", "nodes", "", "b", "", now, now, 409),
		auditEvent(framework.KubeletsName, "nodeset-simulated-kubelet/v1alpha1", "patch", "nodes", "", "a", "", now, now, 409),
	}
	assert.Equal(t, map[string]float64{framework.ControllerManagerName: 0.5, "simulated-kubelets": 0.5}, conflictsAfter(events, 2))
}

func TestScaleUpTimes(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	kubelet := "nodeset-simulated-kubelet/v1alpha1"
	events := []framework.AuditEvent{
		auditEvent("nodeset-controller", "nodeset-controller", "create", "nodes", "", "", "/api/v1/nodes", at(0), at(10), 201),
		auditEvent("nodeset-controller", "nodeset-controller", "create", "nodes", "", "", "/api/v1/nodes", at(5), at(30), 201),
		// A: the kubelet's label patch is not its Ready; its status is.
		auditEvent("node-controller", kubelet, "patch", "nodes", "", "fleet-a", "/api/v1/nodes/fleet-a", at(100), at(110), 200),
		auditEvent("node-controller", kubelet, "patch", "nodes", "status", "fleet-a", "/api/v1/nodes/fleet-a/status", at(200), at(210), 200),
		// A's registration, refused once (its taints changed), then done.
		auditEvent("node-controller", "node-controller", "patch", "nodes", "", "fleet-a", "/api/v1/nodes/fleet-a", at(250), at(260), 422),
		auditEvent("node-controller", "node-controller", "patch", "nodes", "", "fleet-a", "/api/v1/nodes/fleet-a", at(300), at(310), 200),
		// B registered by an update (earlier versions).
		auditEvent("node-controller", kubelet, "patch", "nodes", "status", "fleet-b", "/api/v1/nodes/fleet-b/status", at(400), at(410), 200),
		auditEvent("node-controller", "node-controller", "update", "nodes", "", "fleet-b", "/api/v1/nodes/fleet-b", at(500), at(610), 200),
	}
	got := scaleUpTimes(events, start, "fleet-")
	assert.Equal(t, 2, got.Nodes)
	assert.Equal(t, map[string]float64{"create": 0.03, "kubelet Ready": 0.41, "registered": 0.61}, got.Last)
	assert.InDelta(t, 0.2, got.Median["kubelet Ready -> registered"], 1e-9, "A 0.1, B 0.2: the upper of two")
	assert.InDelta(t, 0.11, got.Server["registered"], 1e-9, "A 10 ms at the server, B 110 ms")
}
