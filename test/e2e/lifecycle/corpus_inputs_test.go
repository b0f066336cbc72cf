package lifecycle

import (
	"fmt"
	"strings"
)

// badInput is one hostile or careless request to the API server. target is
// "set" (a NodeSet posted by the attacking tenant), "class" (a NodeClass
// posted by the admin) or "scale" (a tenant's write of a NodeSet's /scale).
// want are substrings the refusal must contain with the webhook registered;
// field (want[0] unless set) is what every layer must name: the refusal of
// the schema or webhook, or, for an object admitted while the webhook is
// away, its Accepted or Valid condition.
type badInput struct {
	name   string
	target string
	// object is the metadata.name to send, when fixed is true; otherwise
	// each run generates one. For "scale" it is the NodeSet scaled.
	object string
	fixed  bool
	// intoVictim sends the request into the victim's namespace.
	intoVictim bool
	// patch sends a JSON merge patch instead of a PUT ("scale" only).
	patch bool
	body  func(name string) string
	want  []string
	field string
}

// named is the field every layer must name.
func (in badInput) named() string {
	if in.field != "" {
		return in.field
	}
	return in.want[0]
}

// setBody and classBody wrap a spec in an object; name is inserted verbatim
// so that names themselves can be bad.
func setBody(name, spec string) string {
	return fmt.Sprintf(`{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeSet","metadata":{"name":%q},"spec":%s}`, name, spec)
}

func classBody(name, spec string) string {
	return fmt.Sprintf(`{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeClass","metadata":{"name":%q},"spec":%s}`, name, spec)
}

// selectorSpec is a class spec allowed to the namespaces its selector matches.
func selectorSpec(selector string) string {
	return `{"driver":"simulated","simulated":{},"allowedNamespaces":{"from":"Selector","selector":` + selector + `}}`
}

// Constructors of inputs, shared by the corpus's files.
func setInput(name, spec string, want ...string) badInput {
	return badInput{name: name, target: "set", body: func(n string) string { return setBody(n, spec) }, want: want}
}

func namedSetInput(name, setName, spec string, want ...string) badInput {
	in := setInput(name, spec, want...)
	in.object, in.fixed = setName, true
	return in
}

func classInput(name, spec string, want ...string) badInput {
	return badInput{name: name, target: "class", body: func(n string) string { return classBody(n, spec) }, want: want}
}

func namedClassInput(name, className, spec string, want ...string) badInput {
	in := classInput(name, spec, want...)
	in.object, in.fixed = className, true
	return in
}

// rawSetInput is a NodeSet body of its own; format has one %q for the name.
func rawSetInput(name, format string, want ...string) badInput {
	return badInput{name: name, target: "set", body: func(n string) string { return fmt.Sprintf(format, n) }, want: want}
}

// simSpec is a simulated class spec with extra fields appended.
func simSpec(extra string) string {
	return `{"driver":"simulated","simulated":{}` + extra + `}`
}

// badInputs is the first part of the corpus: wrong types, huge numbers,
// unknown fields, malformed selectors, Unicode and empty strings, and values
// that fit the schema's syntax but not the Go types or a Node.
func badInputs() []badInput {
	set := setInput
	named := func(name, setName string, want ...string) badInput {
		return namedSetInput(name, setName, `{"nodeClassName":"corpus-sim"}`, want...)
	}
	class, namedClass, raw, sim := classInput, namedClassInput, rawSetInput, simSpec
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
		class("maxNodes is a string", sim(`,"limits":{"maxNodes":"10"}`), "spec.limits.maxNodes", "integer"),
		class("tenantOverrides is a string", sim(`,"tenantOverrides":"instanceType"`), "spec.tenantOverrides", "array"),
		class("failurePercent is a boolean", `{"driver":"simulated","simulated":{"failurePercent":true}}`, "spec.simulated.failurePercent", "must be of type int32"),
		class("matchLabels is a list", selectorSpec(`{"matchLabels":["team"]}`), "spec.allowedNamespaces.selector.matchLabels", "object"),

		// Huge numbers.
		set("replicas beyond int32", `{"nodeClassName":"corpus-sim","replicas":2147483648}`, "spec.replicas"),
		set("replicas in exponent form", `{"nodeClassName":"corpus-sim","replicas":1e20}`, "spec.replicas"),
		set("replicas beyond int64", `{"nodeClassName":"corpus-sim","replicas":99999999999999999999999}`, "spec.replicas"),
		set("replicas below int32", `{"nodeClassName":"corpus-sim","replicas":-2147483649}`, "spec.replicas"),
		set("maxReplicas beyond int32", `{"nodeClassName":"corpus-sim","replicas":1,"autoscaling":{"minReplicas":1,"maxReplicas":4294967296}}`, "spec.autoscaling.maxReplicas"),
		set("minReadySeconds beyond int32", `{"nodeClassName":"corpus-sim","minReadySeconds":10000000000}`, "spec.minReadySeconds"),
		set("replicas over the class limit", `{"nodeClassName":"corpus-limited","replicas":2000000}`, "spec.limits.maxNodesPerNamespace of 2", "LimitExceeded"),
		class("maxNodes beyond int32", sim(`,"limits":{"maxNodes":99999999999}`), "spec.limits.maxNodes"),

		// Unknown fields (kubectl's default is fieldValidation=Strict).
		set("misspelt replicas", `{"nodeClassName":"corpus-sim","replica":3}`, `unknown field "spec.replica"`),
		set("misspelt template labels", `{"nodeClassName":"corpus-sim","template":{"label":{"a":"b"}}}`, `unknown field "spec.template.label"`),
		set("misspelt maxSurge", `{"nodeClassName":"corpus-sim","strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurges":1}}}`, `unknown field "spec.strategy.rollingUpdate.maxSurges"`),
		set("unknown driver override field", `{"nodeClassName":"corpus-sim","simulated":{"cpu":"4"}}`, `unknown field "spec.simulated.cpu"`),
		raw("misspelt spec", `{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeSet","metadata":{"name":%q},"specs":{"nodeClassName":"corpus-sim"}}`, `unknown field "specs"`),
		raw("misspelt metadata field", `{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeSet","metadata":{"name":%q,"labelz":{"a":"b"}},"spec":{"nodeClassName":"corpus-sim"}}`, `unknown field "metadata.labelz"`),
		class("misspelt driver", `{"drivers":"simulated","simulated":{}}`, `unknown field "spec.drivers"`),

		// Malformed selectors.
		class("unknown operator", selectorSpec(`{"matchExpressions":[{"key":"team","operator":"Like","values":["a"]}]}`),
			"spec.allowedNamespaces", "operator must be In, NotIn, Exists or DoesNotExist"),
		class("In without values", selectorSpec(`{"matchExpressions":[{"key":"team","operator":"In"}]}`),
			"spec.allowedNamespaces", "values must be non-empty when the operator is In or NotIn"),
		class("Exists with values", selectorSpec(`{"matchExpressions":[{"key":"team","operator":"Exists","values":["a"]}]}`),
			"spec.allowedNamespaces", "values must be empty when the operator is Exists or DoesNotExist"),
		class("matchLabels key with a space", selectorSpec(`{"matchLabels":{"bad key!":"a"}}`),
			"spec.allowedNamespaces.selector.matchLabels", `"bad key!"`, "name part must consist of alphanumeric characters"),
		class("matchLabels value with a space", selectorSpec(`{"matchLabels":{"team":"a b"}}`),
			"spec.allowedNamespaces.selector.matchLabels", `"a b"`, "a valid label must"),
		class("matchExpressions key empty", selectorSpec(`{"matchExpressions":[{"key":"","operator":"Exists"}]}`),
			"spec.allowedNamespaces.selector.matchExpressions[0].key", "name part must be non-empty", "InvalidConfiguration"),

		// Unicode in names.
		named("accented NodeSet name", "wéb", "metadata.name", "RFC 1123"),
		named("emoji NodeSet name", "🚀", "metadata.name", "RFC 1123"),
		namedClass("Chinese NodeClass name", "节点", sim(""), "metadata.name", "RFC 1123"),
		set("accented class reference", `{"nodeClassName":"sïm"}`, "spec.nodeClassName", "should match"),
		set("accented label key", `{"nodeClassName":"corpus-sim","template":{"labels":{"tëam":"a"}}}`, `spec.template.labels key "tëam"`, "InvalidTemplate"),
		set("accented label value", `{"nodeClassName":"corpus-sim","template":{"labels":{"team":"naïve"}}}`, `spec.template.labels["team"] value "naïve"`, "InvalidTemplate"),
		set("accented taint key", `{"nodeClassName":"corpus-sim","template":{"taints":[{"key":"zoné","effect":"NoSchedule"}]}}`, "spec.template.taints[0].key", "should match"),
		set("accented annotation key", `{"nodeClassName":"corpus-sim","template":{"annotations":{"é/x":"a"}}}`, `spec.template.annotations key "é/x"`, "InvalidTemplate"),
		class("accented allowed namespace", sim(`,"allowedNamespaces":{"from":"List","namespaces":["équipe"]}`),
			"spec.allowedNamespaces.namespaces[0]", "should match"),

		// Empty strings.
		named("empty NodeSet name", "", "metadata.name", "name or generateName is required"),
		set("empty class reference", `{"nodeClassName":""}`, "spec.nodeClassName", "at least 1 chars long"),
		set("empty label key", `{"nodeClassName":"corpus-sim","template":{"labels":{"":"a"}}}`, `spec.template.labels key ""`, "InvalidTemplate"),
		set("empty taint key", `{"nodeClassName":"corpus-sim","template":{"taints":[{"key":"","effect":"NoSchedule"}]}}`, "spec.template.taints[0].key", "at least 1 chars long"),
		set("empty strategy type", `{"nodeClassName":"corpus-sim","strategy":{"type":""}}`, "spec.strategy.type", "Unsupported value"),
		set("empty deletePolicy", `{"nodeClassName":"corpus-sim","deletePolicy":""}`, "spec.deletePolicy", "Unsupported value"),
		class("empty driver", `{"driver":"","simulated":{}}`, "spec.driver"),
		class("empty tenant override", sim(`,"tenantOverrides":[""]`), "spec.tenantOverrides[0]", "should match"),
		class("empty allowed namespace", sim(`,"allowedNamespaces":{"from":"List","namespaces":[""]}`), "spec.allowedNamespaces.namespaces[0]", "should match"),
		class("empty docker-machine driver", `{"driver":"docker-machine","dockerMachine":{"driverName":""}}`, "spec.dockerMachine.driverName", "at least 1 chars long"),
		class("empty drain timeout", sim(`,"drain":{"timeout":""}`), "spec.drain.timeout", "duration"),
		class("empty cluster name", `{"driver":"eks-asg","eksAutoscalingGroup":{"clusterName":"","region":"eu-west-1"}}`, "spec.eksAutoscalingGroup.clusterName", "at least 1 chars long"),

		// Values that fit the schema's syntax but not the Go types or a Node.
		named("NodeSet name of 64", strings.Repeat("n", 64), "metadata.name must be at most 63 characters"),
		namedClass("NodeClass name of 64", strings.Repeat("c", 64), sim(""), "metadata.name must be at most 63 characters"),
		set("bootDelay past time.Duration", `{"nodeClassName":"corpus-sim","simulated":{"bootDelay":"9999999999h"}}`, "spec.simulated.bootDelay", "at most 1h"),
		class("drain timeout past time.Duration", sim(`,"drain":{"timeout":"9999999999h"}`), "spec.drain.timeout", "at most 24h"),
		set("capacity exponent that stalls the parser", `{"nodeClassName":"corpus-sim","simulated":{"capacity":{"cpu":"1e-2147483648"}}}`, "spec.simulated.capacity", "at most 1Pi"),
		set("maxSurge past int32", `{"nodeClassName":"corpus-sim","strategy":{"rollingUpdate":{"maxSurge":2147483648}}}`, "spec.strategy.rollingUpdate.maxSurge"),
		set("taint key prefix of 254", `{"nodeClassName":"corpus-sim","template":{"taints":[{"key":"`+strings.Repeat("p", 254)+`/k","effect":"NoSchedule"}]}}`,
			"spec.template.taints[0].key", "prefix before '/' must be at most 253"),
		set("template annotations over 256KiB", `{"nodeClassName":"corpus-sim","template":{"annotations":{"a":"`+strings.Repeat("x", 262144)+`"}}}`,
			"spec.template.annotations", "256 KiB"),
		set("autoscaling bounds", `{"nodeClassName":"corpus-sim","replicas":12,"autoscaling":{"minReplicas":1,"maxReplicas":10}}`,
			"replicas is 12, the bounds are 1 and 10"),
		class("unknown driver with a built-in section", `{"driver":"foo","simulated":{}}`,
			"spec.simulated is only for spec.driver simulated", "spec.parameters"),
		class("override inside a list", `{"driver":"eks-asg","eksAutoscalingGroup":{"clusterName":"prod","region":"eu-west-1"},"tenantOverrides":["blockDevices.volumeSize"]}`,
			"spec.tenantOverrides[0]", "list elements cannot be overridden piecewise", "list the whole list (blockDevices) instead", "InvalidConfiguration"),
		class("class label key", sim(`,"nodeTemplate":{"labels":{"bad key!":"a"}}`),
			"spec.nodeTemplate.labels", `"bad key!"`, "InvalidConfiguration"),
		class("class taint value", sim(`,"nodeTemplate":{"taints":[{"key":"a","value":"b c","effect":"NoSchedule"}]}`),
			"spec.nodeTemplate.taints[0].value"),
	}
}
