package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/test/framework"
)

// sample is one scraped series: its labels (with __name__) and value.
type sample struct {
	labels map[string]string
	value  float64
}

func (s sample) name() string { return s.labels["__name__"] }

// scrape reads /metrics on port in the text format, with instance added to
// every series as Prometheus adds its target's address.
func scrape(t *testing.T, port int) []sample {
	t.Helper()
	code, body, err := get(context.Background(), port, "/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	var out []sample
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		require.NoError(t, err, line)
		s.labels["instance"] = fmt.Sprintf("127.0.0.1:%d", port)
		out = append(out, s)
	}
	return out
}

// parseSample parses `name{a="x",b="y"} value`.
func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	end := strings.IndexAny(line, "{ ")
	if end < 0 {
		return s, fmt.Errorf("no value")
	}
	s.labels["__name__"] = line[:end]
	rest := line[end:]
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for !strings.HasPrefix(rest, "}") {
			eq := strings.Index(rest, "=\"")
			if eq < 0 {
				return s, fmt.Errorf("bad label in %q", rest)
			}
			name := strings.TrimPrefix(rest[:eq], ",")
			rest = rest[eq+2:]
			var value strings.Builder
			for i := 0; ; i++ {
				if i >= len(rest) {
					return s, fmt.Errorf("unterminated label value")
				}
				if rest[i] == '\\' && i+1 < len(rest) {
					i++
					if rest[i] == 'n' {
						value.WriteByte('\n')
					} else {
						value.WriteByte(rest[i])
					}
					continue
				}
				if rest[i] == '"' {
					rest = rest[i+1:]
					break
				}
				value.WriteByte(rest[i])
			}
			s.labels[name] = value.String()
			rest = strings.TrimPrefix(rest, ",")
		}
		rest = rest[1:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	s.value = v
	return s, err
}

// alertRule returns the expression of the alert named in
// deploy/observability/prometheus-rules.yaml.
func alertRule(t *testing.T, alert string) string {
	t.Helper()
	return shippedAlert(t, alert)["expr"].(string)
}

// shippedAlert is the rule of the alert named in
// deploy/observability/prometheus-rules.yaml.
func shippedAlert(t *testing.T, alert string) map[string]any {
	t.Helper()
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	objs, err := framework.ReadObjects(filepath.Join(root, "deploy", "observability", "prometheus-rules.yaml"))
	require.NoError(t, err)
	for _, obj := range objs {
		groups, _, _ := unstructured.NestedSlice(obj.Object, "spec", "groups")
		for _, g := range groups {
			rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
			for _, r := range rules {
				if rule := r.(map[string]any); rule["alert"] == alert {
					return rule
				}
			}
		}
	}
	t.Fatalf("no alert %s in deploy/observability/prometheus-rules.yaml", alert)
	return nil
}

// metricsPort is the port of the process's --metrics-bind-address (its last).
func metricsPort(t *testing.T, p *framework.Process) int {
	t.Helper()
	port := 0
	for _, arg := range p.Args {
		if addr, ok := strings.CutPrefix(arg, "--metrics-bind-address="); ok {
			_, portText, _ := strings.Cut(addr, ":")
			var err error
			port, err = strconv.Atoi(portText)
			require.NoError(t, err, arg)
		}
	}
	require.NotZero(t, port, "%s has no --metrics-bind-address", p.Name)
	return port
}

// TestNodeSetNotAvailableAlertWithTwoReplicas: deploy/ runs two
// nodeset-controller replicas, and a standby serves its caches too, so
// Prometheus scrapes each NodeSet's replica counts from both. The
// NodeSetNotAvailable alert must still evaluate, fire for a NodeSet with
// fewer available Nodes than desired, and not for one that has them all.
func TestNodeSetNotAvailableAlertWithTwoReplicas(t *testing.T) {
	c := startControllers(t)
	standby, standbyHealth, err := c.Replica(c.NodeSet)
	require.NoError(t, err)
	require.NoError(t, standby.Start())
	t.Cleanup(func() { standby.Kill(syscall.SIGTERM) })
	framework.FailOnCrash(t, standby)
	eventually(t, time.Minute, "the standby's /readyz", func(ctx context.Context) (bool, string) {
		code, body, err := get(ctx, standbyHealth, "/readyz")
		return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
	})

	ns := createNamespace(t, "alert-available")
	createClass(t, "alert-available-sim", nil)
	createSet(t, ns, "whole", "alert-available-sim", 1)
	eventually(t, 2*time.Minute, "1 node", converged(c, t, ns, "whole", 1))
	// Machines that take an hour to boot: two Nodes, none available.
	createClass(t, "alert-available-slow", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Simulated.BootDelay = &metav1.Duration{Duration: time.Hour}
		class.Spec.RegistrationTimeout = &metav1.Duration{Duration: time.Hour}
	})
	createSet(t, ns, "short", "alert-available-slow", 2)
	t.Cleanup(func() {
		_, cs := clients(t)
		_ = cs.NodesetV1alpha1().NodeSets(ns).Delete(context.Background(), "short", metav1.DeleteOptions{})
	})

	expr := alertRule(t, "NodeSetNotAvailable")
	eventually(t, time.Minute, "NodeSetNotAvailable fires for "+ns+"/short only", func(ctx context.Context) (bool, string) {
		var data []sample
		perReplica := map[int]int{}
		for _, port := range []int{c.NodeSetMetricsPort, metricsPort(t, standby)} {
			for _, s := range scrape(t, port) {
				if s.name() == "nodeset_nodeset_replicas" && s.labels["namespace"] == ns {
					perReplica[port]++
				}
				data = append(data, s)
			}
		}
		if len(perReplica) < 2 || perReplica[c.NodeSetMetricsPort] != 10 {
			return false, fmt.Sprintf("series of the namespace per replica: %v", perReplica)
		}
		out, err := evalPromQL(expr, data)
		if err != nil {
			return false, "the rule does not evaluate: " + err.Error()
		}
		var firing []string
		for _, s := range out {
			if s.labels["namespace"] == ns {
				firing = append(firing, s.labels["nodeset"])
			}
		}
		return slices.Equal(firing, []string{"short"}), fmt.Sprintf("firing for %v", firing)
	})

	// The dashboard's desired and available replicas of a NodeSet count
	// its Nodes once, however many replicas report them.
	var data []sample
	for _, port := range []int{c.NodeSetMetricsPort, metricsPort(t, standby)} {
		data = append(data, scrape(t, port)...)
	}
	exprs := dashboardExprs(t, "nodeset_nodeset_replicas")
	require.Len(t, exprs, 2)
	for _, expr := range exprs {
		out, err := evalPromQL(expr, data)
		require.NoError(t, err, expr)
		values := map[string]float64{}
		for _, s := range out {
			if s.labels["namespace"] == ns {
				values[s.labels["nodeset"]] = s.value
			}
		}
		assert.Equal(t, 1.0, values["whole"], "%s for %s/whole, which has 1 Node: %v", expr, ns, values)
	}
}

// dashboardExprs are the queries of deploy/observability's Grafana
// dashboard that use metric.
func dashboardExprs(t *testing.T, metric string) []string {
	t.Helper()
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "deploy", "observability", "grafana-dashboard.json"))
	require.NoError(t, err)
	var dashboard struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(data, &dashboard))
	uses := regexp.MustCompile(`\b` + metric + `\b`)
	var out []string
	for _, p := range dashboard.Panels {
		for _, target := range p.Targets {
			if uses.MatchString(target.Expr) {
				out = append(out, target.Expr)
			}
		}
	}
	return out
}

// documentedLabels reads docs/observability.md's catalogue: metric name ->
// its label names, sorted.
func documentedLabels(t *testing.T) map[string][]string {
	t.Helper()
	doc := observabilityDoc(t)
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| [a-z]+ \\|([^|]*)\\|")
	label := regexp.MustCompile("`([a-z_]+)`")
	out := map[string][]string{}
	for _, line := range strings.Split(doc, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		names := []string{}
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			names = append(names, l[1])
		}
		sort.Strings(names)
		out[m[1]] = names
	}
	return out
}

// TestMetricLabelsMatchCatalogue: every series of nodeset's own and the
// workqueue metrics that the controllers expose carries exactly the labels
// docs/observability.md lists for its metric, and none of them is labelled
// by Node (a value per Node is a series per Node, at 10,000 Nodes).
func TestMetricLabelsMatchCatalogue(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "labels")
	createClass(t, "labels-sim", nil)
	createSet(t, ns, "labelled", "labels-sim", 1)
	eventually(t, 2*time.Minute, "1 node", converged(c, t, ns, "labelled", 1))
	nodes, err := setNodes(context.Background(), t, ns, "labelled")
	require.NoError(t, err)
	require.Len(t, nodes, 1)

	docs := documentedLabels(t)
	require.Contains(t, docs, "nodeset_nodes")
	for _, port := range []int{c.NodeSetMetricsPort, c.NodeMetricsPort} {
		for _, s := range scrape(t, port) {
			name := s.name()
			if !strings.HasPrefix(name, "nodeset_") && !strings.HasPrefix(name, "workqueue_") {
				continue
			}
			family := name
			want, ok := docs[family]
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if base, cut := strings.CutSuffix(name, suffix); cut && !ok {
					family = base
					want, ok = docs[family]
				}
			}
			if !assert.True(t, ok, "%s is not in docs/observability.md", name) {
				continue
			}
			var got []string
			for k, v := range s.labels {
				if k == "__name__" || k == "instance" || (k == "le" && family != name) {
					continue
				}
				got = append(got, k)
				assert.NotEqual(t, nodes[0].Name, v, "%s is labelled by Node", name)
			}
			sort.Strings(got)
			if len(got) == 0 {
				got = []string{}
			}
			assert.Equal(t, want, got, "labels of %s on :%d", name, port)
		}
	}
}

// TestOrphanCollectionBlockedAlert runs the example out-of-tree node
// controller next to the built-in one, with a machine its driver cannot
// read, so every orphan round of that controller fails to list while the
// built-in one's complete: NodesetOrphanCollectionBlocked fires for the
// controller that collects nothing, and for no other.
func TestOrphanCollectionBlockedAlert(t *testing.T) {
	c := startControllers(t)
	machineDir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(machineDir, "unreadable"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(machineDir, "unreadable", "machine.json"), []byte("not a machine"), 0o644))
	example, metrics := runExampleNodeController(t, []string{"--orphan-collection-interval=1s"},
		[]string{"EXAMPLE_MACHINE_DIR=" + machineDir})
	framework.FailOnCrash(t, example)

	expr := alertRule(t, "NodesetOrphanCollectionBlocked")
	rounds := func(data []sample, port int, outcome string) float64 {
		for _, s := range data {
			if s.name() == "nodeset_orphan_collection_rounds_total" && s.labels["outcome"] == outcome &&
				s.labels["instance"] == fmt.Sprintf("127.0.0.1:%d", port) {
				return s.value
			}
		}
		return -1
	}
	eventually(t, time.Minute, "NodesetOrphanCollectionBlocked fires for the example node controller only", func(ctx context.Context) (bool, string) {
		if code, _, err := get(ctx, metrics, "/metrics"); err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("example node controller metrics: %d %v", code, err)
		}
		data := append(scrape(t, c.NodeMetricsPort), scrape(t, metrics)...)
		state := fmt.Sprintf("built-in: %v completed; example: %v completed, %v list-failed",
			rounds(data, c.NodeMetricsPort, "completed"), rounds(data, metrics, "completed"), rounds(data, metrics, "list-failed"))
		if rounds(data, c.NodeMetricsPort, "completed") < 1 || rounds(data, metrics, "list-failed") < 1 {
			return false, "no rounds yet; " + state
		}
		require.Zero(t, rounds(data, metrics, "completed"), "the example node controller cannot complete a round; %s", state)
		out, err := evalPromQL(expr, data)
		if err != nil {
			return false, "the rule does not evaluate: " + err.Error()
		}
		var firing []string
		for _, s := range out {
			firing = append(firing, s.labels["instance"])
		}
		want := []string{fmt.Sprintf("127.0.0.1:%d", metrics)}
		return slices.Equal(firing, want), fmt.Sprintf("firing for %v, want %v; %s", firing, want, state)
	})
}

// TestStandbyProbesAndMetrics: a standby of each controller is live and
// ready (ready to take over; the nodeset-controller's once its caches
// serve the webhook and the autoscaler API), and the dashboard's Nodes by
// phase count each Node once with both node-controller replicas scraped.
func TestStandbyProbesAndMetrics(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "standby-metrics")
	createClass(t, "standby-metrics-sim", nil)
	createSet(t, ns, "counted", "standby-metrics-sim", 2)
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "counted", 2))

	var standbyMetrics []int
	for _, p := range []*framework.Process{c.NodeSet, c.Node} {
		standby, health, err := c.Replica(p)
		require.NoError(t, err)
		require.NoError(t, standby.Start())
		t.Cleanup(func() { standby.Kill(syscall.SIGTERM) })
		framework.FailOnCrash(t, standby)
		for _, path := range []string{"/healthz", "/readyz"} {
			eventually(t, time.Minute, standby.Name+" "+path, func(ctx context.Context) (bool, string) {
				code, body, err := get(ctx, health, path)
				return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
			})
		}
		standbyMetrics = append(standbyMetrics, metricsPort(t, standby))
	}

	leader := scrape(t, c.NodeMetricsPort)
	var nodes float64
	for _, s := range leader {
		if s.name() == "nodeset_nodes" {
			nodes += s.value
		}
	}
	require.GreaterOrEqual(t, nodes, 2.0, "the leader counts the set's Nodes")
	data := append(leader, scrape(t, standbyMetrics[1])...)
	exprs := dashboardExprs(t, "nodeset_nodes")
	require.NotEmpty(t, exprs)
	for _, expr := range exprs {
		out, err := evalPromQL(expr, data)
		require.NoError(t, err, expr)
		total := 0.0
		for _, s := range out {
			total += s.value
		}
		assert.Equal(t, nodes, total, "%s counts each Node once", expr)
	}
}

// TestEventReasonsDocumented: every reason the controllers record an Event
// with (a constant passed to an EventRecorder's Event or Eventf, to the
// node controller's routine Events or to its remediation) is in docs/observability.md's Events
// table, and every reason there is one the code records.
func TestEventReasonsDocumented(t *testing.T) {
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	fset := token.NewFileSet()
	constants := map[string]string{}
	var calls []*ast.CallExpr
	err = filepath.WalkDir(filepath.Join(root, "pkg", "controller"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							constants[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			case *ast.CallExpr:
				calls = append(calls, n)
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	recorded := map[string]bool{}
	for _, call := range calls {
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			continue
		}
		arg := -1
		switch sel.Sel.Name {
		case "Event", "Eventf":
			arg = 2
		case "record":
			if recv, ok := sel.X.(*ast.SelectorExpr); ok && recv.Sel.Name == "routine" {
				arg = 1
			}
		case "remediate": // records its reason on the Node it replaces
			arg = 3
		}
		if arg < 0 || len(call.Args) <= arg {
			continue
		}
		if id, ok := call.Args[arg].(*ast.Ident); ok {
			if value, ok := constants[id.Name]; ok {
				recorded[value] = true
			}
		}
	}
	require.Contains(t, recorded, "SuccessfulCreate")

	events := observabilityDoc(t)
	events = events[strings.Index(events, "## Events"):]
	events = events[:strings.Index(events[1:], "\n## ")+1]
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z]+)` \\|").FindAllStringSubmatch(events, -1) {
		documented[m[1]] = true
	}
	for reason := range recorded {
		assert.True(t, documented[reason], "Event reason %s is not in docs/observability.md's Events table", reason)
	}
	for reason := range documented {
		assert.True(t, recorded[reason], "docs/observability.md lists Event reason %s, which no controller records", reason)
	}
}

// TestWorkqueueNamesDocumented: every queue the controllers report in the
// workqueue metrics is named in docs/observability.md, so that a queue
// that grows can be looked up.
func TestWorkqueueNamesDocumented(t *testing.T) {
	c := startControllers(t)
	var row string
	for _, line := range strings.Split(observabilityDoc(t), "\n") {
		if strings.HasPrefix(line, "| `workqueue_depth` |") {
			row = line
		}
	}
	require.NotEmpty(t, row, "docs/observability.md has a workqueue_depth row")
	seen := map[string]bool{}
	for _, port := range []int{c.NodeSetMetricsPort, c.NodeMetricsPort} {
		for _, s := range scrape(t, port) {
			if s.name() == "workqueue_depth" {
				seen[s.labels["name"]] = true
			}
		}
	}
	require.Contains(t, seen, "nodeset")
	require.Contains(t, seen, "node")
	for name := range seen {
		assert.Contains(t, row, "`"+name+"`", "queue %s is not named in docs/observability.md's workqueue_depth row", name)
	}
}
