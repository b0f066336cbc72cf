package resolve

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// ReservedForTenants says why a tenant may not set a Node label or taint
// key, or "" when it may. Keys under nodeset.dev are nodeset's own: they
// tie a Node to its NodeSet and class. Keys in the kubernetes.io and k8s.io
// domains (node-role, node-restriction, topology, node.kubernetes.io, the
// hostname, ...) are the cluster admin's and the kubelet's, as the
// NodeRestriction admission plugin keeps them: a NodeClass may set them, a
// NodeSet may not.
func ReservedForTenants(key string) string {
	domain, _, found := strings.Cut(key, "/")
	if !found {
		return ""
	}
	inDomain := func(d string) bool { return domain == d || strings.HasSuffix(domain, "."+d) }
	switch {
	case inDomain("nodeset.dev"):
		return "keys under nodeset.dev/ are reserved for nodeset"
	case inDomain("kubernetes.io"), inDomain("k8s.io"):
		return "keys in the kubernetes.io and k8s.io domains are reserved for the cluster admin (set them in the NodeClass)"
	}
	return ""
}

// kubeletFlagsOfNodes are kubelet flags that give a Node labels or taints.
var kubeletFlagsOfNodes = []string{"--node-labels", "--register-with-taints"}

// kubeletFlagOfNodes is the flag of kubeletFlagsOfNodes an argument gives,
// or "": as the kubelet reads it, with one or two dashes, underscores for
// dashes, and anywhere in an argument that the bootstrap joins with others
// into one command line.
func kubeletFlagOfNodes(arg string) string {
	for _, word := range strings.Fields(arg) {
		if !strings.HasPrefix(word, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(word, "-"), "=")
		name = strings.ReplaceAll(strings.ToLower(name), "_", "-")
		for _, flag := range kubeletFlagsOfNodes {
			if "--"+name == flag {
				return flag
			}
		}
	}
	return ""
}

// unquotable reports whether a kubelet argument has a character that a
// layer between it and the kubelet reads as syntax rather than text: EKS's
// bootstrap.sh writes the arguments into a systemd drop-in as
// Environment='KUBELET_EXTRA_ARGS=...', where a quote ends the value, a
// backslash starts an escape (\x20 is a space, so a new word) and a new
// line starts a directive of the kubelet's unit. Plain kubelet flags need
// none of them.
func unquotable(arg string) bool {
	return strings.ContainsFunc(arg, func(r rune) bool {
		return r == '\'' || r == '"' || r == '\\' || r == '`' || unicode.IsControl(r)
	})
}

// TenantErrors checks what a NodeSet's tenant puts on its Nodes, with
// Kubernetes's own rules and the reserved keys, wherever it can reach a
// Node: the template's labels, annotations and taints, the labels and
// taints of a driver section (which the kubelet or the cloud puts on the
// Node), and kubelet flags. A NodeSet whose name cannot be a label value
// can have no Node either. Each problem names its field; the result is
// sorted.
func TenantErrors(set *nodesetv1alpha1.NodeSet) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, msg := range validation.IsValidLabelValue(set.Name) {
		add("metadata.name %q: the name of a NodeSet is the value of its Nodes' label %s: %s", set.Name, nodesetv1alpha1.LabelNodeSet, msg)
	}
	labels := func(path string, m map[string]string) {
		for k, v := range m {
			for _, msg := range validation.IsQualifiedName(k) {
				add("%s key %q: %s", path, k, msg)
			}
			for _, msg := range validation.IsValidLabelValue(v) {
				add("%s[%q] value %q: %s", path, k, v, msg)
			}
			if why := ReservedForTenants(k); why != "" {
				add("%s key %q: %s", path, k, why)
			}
		}
	}
	taint := func(path, key, value, effect string) {
		for _, msg := range validation.IsQualifiedName(key) {
			add("%s.key %q: %s", path, key, msg)
		}
		if value != "" {
			for _, msg := range validation.IsValidLabelValue(value) {
				add("%s.value %q: %s", path, value, msg)
			}
		}
		switch corev1.TaintEffect(effect) {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		case "NO_SCHEDULE", "NO_EXECUTE", "PREFER_NO_SCHEDULE": // EKS's spelling in eksManagedNodeGroup
		default:
			add("%s.effect %q: must be NoSchedule, PreferNoSchedule or NoExecute", path, effect)
		}
		if why := ReservedForTenants(key); why != "" {
			add("%s.key %q: %s", path, key, why)
		}
	}

	template := &set.Spec.Template
	labels("spec.template.labels", template.Labels)
	for k := range template.Annotations {
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			add("spec.template.annotations key %q: %s", k, msg)
		}
	}
	if err := apivalidation.ValidateAnnotationsSize(template.Annotations); err != nil {
		add("spec.template.annotations: may not be more than %d bytes in all", apivalidation.TotalAnnotationSizeLimitB)
	}
	for i, t := range template.Taints {
		taint(fmt.Sprintf("spec.template.taints[%d]", i), t.Key, t.Value, t.Effect)
	}

	if s := set.Spec.Simulated; s != nil {
		labels("spec.simulated.labels", s.Labels)
	}
	if s := set.Spec.EKSManagedNodeGroup; s != nil {
		labels("spec.eksManagedNodeGroup.labels", s.Labels)
		for i, t := range s.Taints {
			taint(fmt.Sprintf("spec.eksManagedNodeGroup.taints[%d]", i), t.Key, t.Value, t.Effect)
		}
	}
	if s := set.Spec.EKSAutoscalingGroup; s != nil && s.Bootstrap != nil {
		for i, arg := range s.Bootstrap.KubeletExtraArgs {
			if unquotable(arg) {
				add("spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs[%d] %q: quotes, backquotes, backslashes and control characters are refused in kubelet arguments: "+
					"the bootstrap writes them into the kubelet's systemd unit, where they could end the value and add flags or lines of their own", i, arg)
			}
			if flag := kubeletFlagOfNodes(arg); flag != "" {
				add("spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs[%d] %q: a NodeSet gives its Nodes labels and taints in spec.template, never through %s",
					i, arg, flag)
			}
		}
	}
	sort.Strings(problems)
	return problems
}
