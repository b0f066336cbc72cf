package lifecycle

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// badInput is one request body that must be refused. target is "class" (sent
// by the admin) or "set" (sent by a tenant); want are substrings the refusal
// must contain: the field, and the rule where the API server names one.
type badInput struct {
	name   string
	target string
	body   string
	want   []string
}

// setBody and classBody wrap a spec in an object; name is inserted verbatim
// so that names themselves can be bad.
func setBody(name, spec string) string {
	return fmt.Sprintf(`{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeSet","metadata":{"name":%q},"spec":%s}`, name, spec)
}

func classBody(name, spec string) string {
	return fmt.Sprintf(`{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeClass","metadata":{"name":%q},"spec":%s}`, name, spec)
}

// selectorClass is a class allowed to the namespaces its selector matches.
func selectorClass(name, selector string) string {
	return classBody(name, `{"driver":"simulated","simulated":{},"allowedNamespaces":{"from":"Selector","selector":`+selector+`}}`)
}

func badInputs() []badInput {
	set := func(name, spec string, want ...string) badInput {
		return badInput{name: name, target: "set", body: setBody("corpus", spec), want: want}
	}
	named := func(name, setName string, want ...string) badInput {
		return badInput{name: name, target: "set", body: setBody(setName, `{"nodeClassName":"corpus-sim"}`), want: want}
	}
	class := func(name, body string, want ...string) badInput {
		return badInput{name: name, target: "class", body: body, want: want}
	}
	sim := func(extra string) string {
		return `{"driver":"simulated","simulated":{}` + extra + `}`
	}
	return []badInput{
		// Wrong types.
		set("replicas is a word", `{"nodeClassName":"corpus-sim","replicas":"three"}`, "spec.replicas", "integer"),
		set("replicas is a fraction", `{"nodeClassName":"corpus-sim","replicas":1.5}`, "spec.replicas", "integer"),
		set("replicas is a boolean", `{"nodeClassName":"corpus-sim","replicas":true}`, "spec.replicas", "must be of type int32"),
		set("nodeClassName is a number", `{"nodeClassName":42}`, "spec.nodeClassName", "string"),
		set("labels is a list", `{"nodeClassName":"corpus-sim","template":{"labels":["a=b"]}}`, "spec.template.labels", "object"),
		set("taints is an object", `{"nodeClassName":"corpus-sim","template":{"taints":{"key":"a"}}}`, "spec.template.taints"),
		set("spec is a string", `"three nodes please"`, "spec", "object"),
		set("minReplicas is a string", `{"nodeClassName":"corpus-sim","replicas":1,"autoscaling":{"minReplicas":"1","maxReplicas":3}}`, "spec.autoscaling.minReplicas", "integer"),
		set("paused is a word", `{"nodeClassName":"corpus-sim","paused":"yes"}`, "spec.paused", "boolean"),
		set("label value is a number", `{"nodeClassName":"corpus-sim","template":{"labels":{"team":1}}}`, "spec.template.labels.team", "string"),
		class("maxNodes is a string", classBody("corpus-c", sim(`,"limits":{"maxNodes":"10"}`)), "spec.limits.maxNodes", "integer"),
		class("tenantOverrides is a string", classBody("corpus-c", sim(`,"tenantOverrides":"instanceType"`)), "spec.tenantOverrides", "array"),
		class("failurePercent is a boolean", classBody("corpus-c", `{"driver":"simulated","simulated":{"failurePercent":true}}`), "spec.simulated.failurePercent", "must be of type int32"),
		class("matchLabels is a list", selectorClass("corpus-c", `{"matchLabels":["team"]}`), "spec.allowedNamespaces.selector.matchLabels", "object"),

		// Huge numbers.
		set("replicas beyond int32", `{"nodeClassName":"corpus-sim","replicas":2147483648}`, "spec.replicas"),
		set("replicas in exponent form", `{"nodeClassName":"corpus-sim","replicas":1e20}`, "spec.replicas"),
		set("replicas beyond int64", `{"nodeClassName":"corpus-sim","replicas":99999999999999999999999}`, "spec.replicas"),
		set("replicas below int32", `{"nodeClassName":"corpus-sim","replicas":-2147483649}`, "spec.replicas"),
		set("maxReplicas beyond int32", `{"nodeClassName":"corpus-sim","replicas":1,"autoscaling":{"minReplicas":1,"maxReplicas":4294967296}}`, "spec.autoscaling.maxReplicas"),
		set("minReadySeconds beyond int32", `{"nodeClassName":"corpus-sim","minReadySeconds":10000000000}`, "spec.minReadySeconds"),
		set("replicas over the class limit", `{"nodeClassName":"corpus-sim","replicas":2000000}`, "spec.limits.maxNodesPerNamespace of 50", "LimitExceeded"),
		class("maxNodes beyond int32", classBody("corpus-c", sim(`,"limits":{"maxNodes":99999999999}`)), "spec.limits.maxNodes"),

		// Unknown fields (kubectl's default is fieldValidation=Strict).
		set("misspelt replicas", `{"nodeClassName":"corpus-sim","replica":3}`, `unknown field "spec.replica"`),
		set("misspelt template labels", `{"nodeClassName":"corpus-sim","template":{"label":{"a":"b"}}}`, `unknown field "spec.template.label"`),
		set("misspelt maxSurge", `{"nodeClassName":"corpus-sim","strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurges":1}}}`, `unknown field "spec.strategy.rollingUpdate.maxSurges"`),
		set("unknown driver override field", `{"nodeClassName":"corpus-sim","simulated":{"cpu":"4"}}`, `unknown field "spec.simulated.cpu"`),
		{name: "misspelt spec", target: "set", body: `{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeSet","metadata":{"name":"corpus"},"specs":{"nodeClassName":"corpus-sim"}}`,
			want: []string{`unknown field "specs"`}},
		{name: "misspelt metadata field", target: "set", body: `{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeSet","metadata":{"name":"corpus","labelz":{"a":"b"}},"spec":{"nodeClassName":"corpus-sim"}}`,
			want: []string{`unknown field "metadata.labelz"`}},
		class("misspelt driver", classBody("corpus-c", `{"drivers":"simulated","simulated":{}}`), `unknown field "spec.drivers"`),

		// Malformed selectors.
		class("unknown operator", selectorClass("corpus-c", `{"matchExpressions":[{"key":"team","operator":"Like","values":["a"]}]}`),
			"spec.allowedNamespaces", "operator must be In, NotIn, Exists or DoesNotExist"),
		class("In without values", selectorClass("corpus-c", `{"matchExpressions":[{"key":"team","operator":"In"}]}`),
			"spec.allowedNamespaces", "values must be non-empty when the operator is In or NotIn"),
		class("Exists with values", selectorClass("corpus-c", `{"matchExpressions":[{"key":"team","operator":"Exists","values":["a"]}]}`),
			"spec.allowedNamespaces", "values must be empty when the operator is Exists or DoesNotExist"),
		class("matchLabels key with a space", selectorClass("corpus-c", `{"matchLabels":{"bad key!":"a"}}`),
			"spec.allowedNamespaces.selector.matchLabels", `"bad key!"`, "name part must consist of alphanumeric characters"),
		class("matchLabels value with a space", selectorClass("corpus-c", `{"matchLabels":{"team":"a b"}}`),
			"spec.allowedNamespaces.selector.matchLabels", `"a b"`, "a valid label must"),
		class("matchExpressions key empty", selectorClass("corpus-c", `{"matchExpressions":[{"key":"","operator":"Exists"}]}`),
			"spec.allowedNamespaces.selector.matchExpressions[0].key", "name part must be non-empty", "InvalidConfiguration"),

		// Unicode in names.
		named("accented NodeSet name", "wéb", "metadata.name", "RFC 1123"),
		named("emoji NodeSet name", "🚀", "metadata.name", "RFC 1123"),
		class("Chinese NodeClass name", classBody("节点", sim("")), "metadata.name", "RFC 1123"),
		set("accented class reference", `{"nodeClassName":"sïm"}`, "spec.nodeClassName", "should match"),
		set("accented label key", `{"nodeClassName":"corpus-sim","template":{"labels":{"tëam":"a"}}}`, `spec.template.labels key "tëam"`, "InvalidTemplate"),
		set("accented label value", `{"nodeClassName":"corpus-sim","template":{"labels":{"team":"naïve"}}}`, `spec.template.labels["team"] value "naïve"`, "InvalidTemplate"),
		set("accented taint key", `{"nodeClassName":"corpus-sim","template":{"taints":[{"key":"zoné","effect":"NoSchedule"}]}}`, "spec.template.taints[0].key", "should match"),
		set("accented annotation key", `{"nodeClassName":"corpus-sim","template":{"annotations":{"é/x":"a"}}}`, `spec.template.annotations key "é/x"`, "InvalidTemplate"),
		class("accented allowed namespace", classBody("corpus-c", sim(`,"allowedNamespaces":{"from":"List","namespaces":["équipe"]}`)),
			"spec.allowedNamespaces.namespaces[0]", "should match"),

		// Empty strings.
		named("empty NodeSet name", "", "metadata.name", "name or generateName is required"),
		set("empty class reference", `{"nodeClassName":""}`, "spec.nodeClassName", "at least 1 chars long"),
		set("empty label key", `{"nodeClassName":"corpus-sim","template":{"labels":{"":"a"}}}`, `spec.template.labels key ""`, "InvalidTemplate"),
		set("empty taint key", `{"nodeClassName":"corpus-sim","template":{"taints":[{"key":"","effect":"NoSchedule"}]}}`, "spec.template.taints[0].key", "at least 1 chars long"),
		set("empty strategy type", `{"nodeClassName":"corpus-sim","strategy":{"type":""}}`, "spec.strategy.type", "Unsupported value"),
		set("empty deletePolicy", `{"nodeClassName":"corpus-sim","deletePolicy":""}`, "spec.deletePolicy", "Unsupported value"),
		class("empty driver", classBody("corpus-c", `{"driver":"","simulated":{}}`), "spec.driver"),
		class("empty tenant override", classBody("corpus-c", sim(`,"tenantOverrides":[""]`)), "spec.tenantOverrides[0]", "should match"),
		class("empty allowed namespace", classBody("corpus-c", sim(`,"allowedNamespaces":{"from":"List","namespaces":[""]}`)), "spec.allowedNamespaces.namespaces[0]", "should match"),
		class("empty docker-machine driver", classBody("corpus-c", `{"driver":"docker-machine","dockerMachine":{"driverName":""}}`), "spec.dockerMachine.driverName", "at least 1 chars long"),
		class("empty drain timeout", classBody("corpus-c", sim(`,"drain":{"timeout":""}`)), "spec.drain.timeout", "duration"),
		class("empty cluster name", classBody("corpus-c", `{"driver":"eks-asg","eksAutoscalingGroup":{"clusterName":"","region":"eu-west-1"}}`), "spec.eksAutoscalingGroup.clusterName", "at least 1 chars long"),

		// Values that fit the schema's syntax but not the Go types or a Node.
		named("NodeSet name of 64", strings.Repeat("n", 64), "metadata.name must be at most 63 characters"),
		class("NodeClass name of 64", classBody(strings.Repeat("c", 64), sim("")), "metadata.name must be at most 63 characters"),
		set("bootDelay past time.Duration", `{"nodeClassName":"corpus-sim","simulated":{"bootDelay":"9999999999h"}}`, "spec.simulated.bootDelay", "at most 1h"),
		class("drain timeout past time.Duration", classBody("corpus-c", sim(`,"drain":{"timeout":"9999999999h"}`)), "spec.drain.timeout", "at most 24h"),
		set("capacity exponent that stalls the parser", `{"nodeClassName":"corpus-sim","simulated":{"capacity":{"cpu":"1e-2147483648"}}}`, "spec.simulated.capacity", "at most 1Pi"),
		set("maxSurge past int32", `{"nodeClassName":"corpus-sim","strategy":{"rollingUpdate":{"maxSurge":2147483648}}}`, "spec.strategy.rollingUpdate.maxSurge"),
		set("taint key prefix of 254", `{"nodeClassName":"corpus-sim","template":{"taints":[{"key":"`+strings.Repeat("p", 254)+`/k","effect":"NoSchedule"}]}}`,
			"spec.template.taints[0].key", "prefix before '/' must be at most 253"),
		set("template annotations over 256KiB", `{"nodeClassName":"corpus-sim","template":{"annotations":{"a":"`+strings.Repeat("x", 262144)+`"}}}`,
			"spec.template.annotations", "256 KiB"),
		set("autoscaling bounds", `{"nodeClassName":"corpus-sim","replicas":12,"autoscaling":{"minReplicas":1,"maxReplicas":10}}`,
			"replicas is 12, the bounds are 1 and 10"),
		class("unknown driver with a built-in section", classBody("corpus-c", `{"driver":"foo","simulated":{}}`),
			"spec.simulated is only for spec.driver simulated", "spec.parameters"),
		class("override inside a list", classBody("corpus-c", `{"driver":"eks-asg","eksAutoscalingGroup":{"clusterName":"prod","region":"eu-west-1"},"tenantOverrides":["blockDevices.volumeSize"]}`),
			"spec.tenantOverrides[0]", "list elements cannot be overridden piecewise", "list the whole list (blockDevices) instead", "InvalidConfiguration"),
		class("class label key", classBody("corpus-c", sim(`,"nodeTemplate":{"labels":{"bad key!":"a"}}`)),
			"spec.nodeTemplate.labels", `"bad key!"`, "InvalidConfiguration"),
		class("class taint value", classBody("corpus-c", sim(`,"nodeTemplate":{"taints":[{"key":"a","value":"b c","effect":"NoSchedule"}]}`)),
			"spec.nodeTemplate.taints[0].value"),
	}
}

// TestBadInputCorpus sends each bad input as raw JSON, the way kubectl does
// (fieldValidation=Strict), through the whole admission chain: schema, CEL
// and the nodeset webhook. Every one is refused with a message naming the
// field, and nothing is stored and no Node appears.
func TestBadInputCorpus(t *testing.T) {
	startControllers(t)
	ctx := context.Background()
	ns := createNamespace(t, "corpus")
	createClass(t, "corpus-sim", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](50)}
	})
	tenantKube, _ := tenant(t, "tenant-b", ns)
	admin, cs := clients(t)
	classesBefore := classNames(t)

	corpus := badInputs()
	require.GreaterOrEqual(t, len(corpus), 40)
	for _, in := range corpus {
		t.Run(in.name, func(t *testing.T) {
			client, path := tenantKube, "/apis/nodeset.dev/v1alpha1/namespaces/"+ns+"/nodesets"
			if in.target == "class" {
				client, path = admin, "/apis/nodeset.dev/v1alpha1/nodeclasses"
			}
			var code int
			err := client.CoreV1().RESTClient().Post().AbsPath(path).Param("fieldValidation", "Strict").
				SetHeader("Content-Type", "application/json").Body([]byte(in.body)).Do(ctx).StatusCode(&code).Error()
			require.Error(t, err, "accepted: %s", in.body)
			assert.True(t, code >= 400 && code < 500, "want a 4xx refusal, got %d: %v", code, err)
			assert.NotEqual(t, http.StatusInternalServerError, code)
			for _, want := range in.want {
				assert.Contains(t, err.Error(), want)
			}
		})
	}

	stored, err := cs.NodesetV1alpha1().NodeSets(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, stored.Items, "no NodeSet was stored")
	assert.Equal(t, classesBefore, classNames(t), "no NodeClass was stored")
	nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nodeset.dev/nodeset-namespace=" + ns})
	require.NoError(t, err)
	assert.Empty(t, nodes.Items, "no Node was made")
	_, err = cs.NodesetV1alpha1().NodeClasses().Get(ctx, "corpus-c", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "corpus-c must not exist: %v", err)
}

func classNames(t *testing.T) sets.Set[string] {
	t.Helper()
	_, cs := clients(t)
	list, err := cs.NodesetV1alpha1().NodeClasses().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	names := sets.New[string]()
	for _, c := range list.Items {
		names.Insert(c.Name)
	}
	return names
}
