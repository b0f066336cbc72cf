package resolve

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// ReservedForTenants says why a tenant may not set a Node label or taint
// key, or "" when it may. Keys under nodeset.dev are nodeset's own: they
// tie a Node to its NodeSet and class. Keys in the kubernetes.io and k8s.io
// domains (node-role, node-restriction, topology, node.kubernetes.io, the
// hostname, ...) are the cluster admin's and the kubelet's, as the
// NodeRestriction admission plugin keeps them: a NodeClass may set them, a
// NodeSet may not. Keys in the amazonaws.com and aws.com domains
// (eks.amazonaws.com/capacityType, eks.amazonaws.com/nodegroup,
// topology.ebs.csi.aws.com/zone) state what the cloud made: a tenant's
// would draw other tenants' pods that select spot or on-demand capacity, a
// node group, or a volume's zone.
func ReservedForTenants(key string) string {
	switch {
	case nodeutil.InDomain(key, "nodeset.dev"):
		return reservedForNodeset
	case nodeutil.InDomain(key, "kubernetes.io"), nodeutil.InDomain(key, "k8s.io"):
		return "keys in the kubernetes.io and k8s.io domains are reserved for the cluster admin (set them in the NodeClass)"
	case nodeutil.InDomain(key, "amazonaws.com"), nodeutil.InDomain(key, "aws.com"):
		return "keys in the amazonaws.com and aws.com domains state what the cloud made and are reserved for the cluster admin (set them in the NodeClass)"
	}
	return ""
}

const reservedForNodeset = "keys under nodeset.dev/ are reserved for nodeset"

// reservedAnnotation says why a tenant may not set a Node annotation, or
// "" when it may. nodeset and its drivers read annotations of their domain
// on a Node (simulated.nodeset.dev/unreachable taints it NoExecute).
// Kubernetes's own components write and read those of the kubernetes.io
// and k8s.io domains there: the kubelet keeps its CSI drivers' node IDs in
// csi.volume.kubernetes.io/nodeid and registers no CSI driver while that
// does not parse, so other tenants' pods with volumes would be scheduled
// onto the Node and never start; node.alpha.kubernetes.io/ttl is how long
// the kubelet caches Secrets, volumes.kubernetes.io/... who attaches
// volumes. cluster-autoscaler's (scale-down-disabled) are the tenant's.
func reservedAnnotation(key string) string {
	switch {
	case key == nodesetv1alpha1.AnnotationRestartedAt:
		return "" // the tenant's: kubectl nodeset rollout restart
	case nodeutil.InDomain(key, "nodeset.dev"):
		return reservedForNodeset
	case strings.HasPrefix(key, "cluster-autoscaler.kubernetes.io/"):
		return ""
	case nodeutil.InDomain(key, "kubernetes.io"), nodeutil.InDomain(key, "k8s.io"):
		return "annotations in the kubernetes.io and k8s.io domains are what Kubernetes's own components write and read on a Node " +
			"(the kubelet's CSI driver registry in csi.volume.kubernetes.io/nodeid, which a value that does not parse breaks for every pod of the Node, " +
			"its object cache's TTL, who attaches volumes) and are reserved for the cluster admin (set them in the NodeClass); " +
			"cluster-autoscaler's, under cluster-autoscaler.kubernetes.io/, are the tenant's"
	}
	return ""
}

// reservedTag says why a NodeSet may not set an AWS tag key on its group,
// launch template and instances, or "" when it may. The AWS drivers read
// their own tags back (the owner, the template hash, the regions a group
// was in) to decide what is whose. Other programs of the cluster decide
// by tags what is theirs to act on: cluster-autoscaler's auto-discovery
// takes every Auto Scaling group tagged k8s.io/cluster-autoscaler/enabled
// and k8s.io/cluster-autoscaler/<cluster> as a node group of its own, raises
// it for any tenant's pending pods that its node-template/ tags say fit,
// past the class's limits that the tenants of the class share, and lowers
// it by terminating instances of its choosing; the cloud controller
// manager and the AWS Load Balancer Controller take what is tagged
// kubernetes.io/cluster/<cluster> (or KubernetesCluster, the former key)
// as the cluster's, and a tag naming another cluster hands the instances
// to that cluster's controllers. EKS writes eks: tags (eks:cluster-name,
// eks:nodegroup-name) to say which cluster and node group an instance is
// of; aws: is AWS's. A NodeClass may set them; the eks-asg driver tags
// instances with kubernetes.io/cluster/<clusterName> itself. Keys compare
// without case, as AWS's aws: prefix does.
func reservedTag(key string) string {
	lower := strings.ToLower(key)
	switch {
	case nodeutil.InDomain(lower, "nodeset.dev"):
		return reservedForNodeset
	case nodeutil.InDomain(lower, "kubernetes.io"), nodeutil.InDomain(lower, "k8s.io"), lower == "kubernetescluster":
		return "tag keys in the kubernetes.io and k8s.io domains, and KubernetesCluster, decide which cluster and which cluster-autoscaler, " +
			"cloud controller manager and load balancer controller act on a group, its instances and everyone's load balancers; " +
			"they are reserved for the cluster admin (set them in the NodeClass)"
	case strings.HasPrefix(lower, "eks:"), strings.HasPrefix(lower, "aws:"):
		return "tag keys with the eks: and aws: prefixes are what AWS and EKS write to say what they made; they are reserved for AWS"
	}
	return ""
}

// NodesetKey reports whether a label, taint or annotation key is under
// nodeset.dev or one of its subdomains: nodeset's own words on a Node.
func NodesetKey(key string) bool {
	return nodeutil.InDomain(key, "nodeset.dev")
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

// TenantKubeletFlags are the kubelet flags a NodeSet may pass in
// kubeletExtraArgs: they size and tune the Node's own resources (how many
// pods, what is reserved for the system, when pods are evicted and images
// collected, how logs rotate and images are pulled, how much the kubelet
// logs). Every other flag is the class's: on a Shared class other
// namespaces' pods run on the Node, and --anonymous-auth,
// --authorization-mode, --read-only-port, --hostname-override,
// --provider-id, --node-ip, --kubeconfig, --cluster-dns, --feature-gates
// and the like decide who may exec into them, where their DNS queries go
// and which Node the kubelet claims to be.
var TenantKubeletFlags = []string{
	"--container-log-max-files", "--container-log-max-size",
	"--eviction-hard", "--eviction-max-pod-grace-period", "--eviction-minimum-reclaim",
	"--eviction-pressure-transition-period", "--eviction-soft", "--eviction-soft-grace-period",
	"--image-gc-high-threshold", "--image-gc-low-threshold", "--image-minimum-gc-age",
	"--kube-reserved", "--max-pods", "--pod-max-pids", "--pods-per-core",
	"--registry-burst", "--registry-qps", "--serialize-image-pulls", "--system-reserved",
	"--v",
}

// tenantKubeletWord is the first word of a kubelet argument, split as the
// bootstrap joins arguments into one command line, that is not one of
// TenantKubeletFlags given as --flag=value (the kubelet reads underscores
// as dashes), or "" when every word is. A value as a word of its own is
// refused too: after a flag that takes none, the kubelet would read it
// as whatever the flag before it left it to be.
func tenantKubeletWord(arg string) string {
	for _, word := range strings.Fields(arg) {
		name, _, hasValue := strings.Cut(strings.TrimPrefix(word, "--"), "=")
		if !strings.HasPrefix(word, "--") || !hasValue ||
			!slices.Contains(TenantKubeletFlags, "--"+strings.ReplaceAll(name, "_", "-")) {
			return word
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
	eachNodeKey(set, labels, taint)
	for k := range template.Annotations {
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			add("spec.template.annotations key %q: %s", k, msg)
		}
		if why := reservedAnnotation(k); why != "" {
			add("spec.template.annotations key %q: %s", k, why)
		}
	}
	if err := apivalidation.ValidateAnnotationsSize(template.Annotations); err != nil {
		add("spec.template.annotations: may not be more than %d bytes in all", apivalidation.TotalAnnotationSizeLimitB)
	}
	tags := func(path string, m map[string]string) {
		for k := range m {
			if why := reservedTag(k); why != "" {
				add("%s key %q: %s", path, k, why)
			}
		}
	}
	if s := set.Spec.EKSManagedNodeGroup; s != nil {
		tags("spec.eksManagedNodeGroup.tags", s.Tags)
	}
	if s := set.Spec.EKSAutoscalingGroup; s != nil {
		tags("spec.eksAutoscalingGroup.tags", s.Tags)
	}
	if s := set.Spec.EKSAutoscalingGroup; s != nil && s.Bootstrap != nil {
		for i, arg := range s.Bootstrap.KubeletExtraArgs {
			switch {
			case unquotable(arg):
				add("spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs[%d] %q: quotes, backquotes, backslashes and control characters are refused in kubelet arguments: "+
					"the bootstrap writes them into the kubelet's systemd unit, where they could end the value and add flags or lines of their own", i, arg)
			case kubeletFlagOfNodes(arg) != "":
				add("spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs[%d] %q: a NodeSet gives its Nodes labels and taints in spec.template, never through %s",
					i, arg, kubeletFlagOfNodes(arg))
			case tenantKubeletWord(arg) != "":
				add("spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs[%d] %q: %q is not a kubelet flag a NodeSet may set; a NodeSet may set, each as --flag=value, only %s. "+
					"Other flags (authentication and authorization, the read-only port, the Node's name, IP, provider ID and credentials, cluster DNS, "+
					"feature gates, ...) decide what the Node gives every pod on it and everyone who reaches its kubelet; the NodeClass may set them",
					i, arg, tenantKubeletWord(arg), strings.Join(TenantKubeletFlags, ", "))
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// TemplateConflicts names what a NodeSet would change of what its class
// stamps on every Node: a label or annotation the class sets, to another
// value, or a taint of the class's key and effect with another value,
// whether through the set's template or through the labels and taints of
// its driver section, which the kubelet or the cloud put on the Node
// (the simulated kubelet rewrites its labels on every status it posts).
// What the class stamps is the admin's word to everyone whose pods may land
// on the Node (lifecycle=spot, a zone, a taint that keeps pods off): a
// NodeSet may add to it, never change it. Each problem names its field; the
// result is sorted.
func TemplateConflicts(class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet) []string {
	var problems []string
	stamped := &class.Spec.NodeTemplate
	template := &set.Spec.Template
	conflict := func(path, key, value, classValue string) {
		problems = append(problems, fmt.Sprintf("%s[%q] %q: NodeClass %s sets it to %q on every Node, and a NodeSet may not change it",
			path, key, value, class.Name, classValue))
	}
	// The class's own labels and taints: its nodeTemplate's, and those of
	// its driver section, which reach the Node too.
	classLabels := StampedLabels(&class.Spec)
	type classTaint struct{ key, value, effect string }
	var classTaints []classTaint
	for _, t := range stamped.Taints {
		classTaints = append(classTaints, classTaint{t.Key, t.Value, string(t.Effect)})
	}
	if s := class.Spec.EKSManagedNodeGroup; s != nil {
		for _, t := range s.Taints {
			classTaints = append(classTaints, classTaint{t.Key, t.Value, kubeEffect(t.Effect)})
		}
	}
	labels := func(path string, m map[string]string) {
		for k, v := range m {
			if classValue, ok := classLabels[k]; ok && classValue != v {
				conflict(path, k, v, classValue)
			}
		}
	}
	taint := func(path, key, value, effect string) {
		for _, ct := range classTaints {
			if ct.key == key && ct.effect == kubeEffect(effect) && ct.value != value {
				problems = append(problems, fmt.Sprintf("%s %s=%s:%s: NodeClass %s puts %s=%s:%s on every Node, and a NodeSet may not change its value",
					path, key, value, effect, class.Name, ct.key, ct.value, ct.effect))
			}
		}
	}
	eachNodeKey(set, labels, taint)
	for k, v := range template.Annotations {
		if classValue, ok := stamped.Annotations[k]; ok && classValue != v {
			conflict("spec.template.annotations", k, v, classValue)
		}
	}
	sort.Strings(problems)
	return problems
}

// StampedLabels are the labels a class puts on every Node of its own:
// its nodeTemplate's, and those of its driver section that the kubelet or
// the cloud put on the Node (simulated.labels, eksManagedNodeGroup.labels).
func StampedLabels(spec *nodesetv1alpha1.NodeClassSpec) map[string]string {
	out := map[string]string{}
	if s := spec.Simulated; s != nil {
		maps.Copy(out, s.Labels)
	}
	if s := spec.EKSManagedNodeGroup; s != nil {
		maps.Copy(out, s.Labels)
	}
	maps.Copy(out, spec.NodeTemplate.Labels)
	return out
}

// CatalogueConflicts names the labels a NodeSet of class would put on its
// Nodes that another NodeClass of the catalogue (classes) stamps on its
// own Nodes, with the same value, and class does not: example.com/pool=gpu
// of a GPU class is what other tenants' pods select to land on that
// class's Nodes, and on a NodeSet's Nodes that carry it too they would
// land there instead, on Nodes of a tenant that may control them, where
// the GPU class's taints keep nothing off. A label of another class, like
// one of its own class, is the admin's word; a value no class stamps stays
// the tenant's. Each problem names its field and the class; the result is
// sorted.
func CatalogueConflicts(classes []*nodesetv1alpha1.NodeClass, class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet) []string {
	own := StampedLabels(&class.Spec)
	stampers := map[string]string{} // "key=value" -> the first class, by name, that stamps it
	names := make([]string, 0, len(classes))
	byName := map[string]*nodesetv1alpha1.NodeClass{}
	for _, other := range classes {
		if other.Name != class.Name {
			names = append(names, other.Name)
			byName[other.Name] = other
		}
	}
	sort.Strings(names)
	for _, name := range names {
		for k, v := range StampedLabels(&byName[name].Spec) {
			if _, seen := stampers[k+"="+v]; !seen {
				stampers[k+"="+v] = name
			}
		}
	}
	var problems []string
	labels := func(path string, m map[string]string) {
		for k, v := range m {
			other, stamped := stampers[k+"="+v]
			if ownValue, ok := own[k]; !stamped || (ok && ownValue == v) {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s[%q] %q: NodeClass %s stamps it on its Nodes, and a NodeSet of NodeClass %s may not: "+
				"the pods that select it to land on NodeClass %s's Nodes would land on this NodeSet's Nodes too",
				path, k, v, other, class.Name, other))
		}
	}
	eachNodeKey(set, labels, func(string, string, string, string) {})
	sort.Strings(problems)
	return problems
}

// eachNodeKey calls labels with each map of labels, and taint with each
// taint, that a NodeSet puts on its Nodes, with its field: the template's,
// and those of a driver section, which the kubelet or the cloud put on the
// Node.
func eachNodeKey(set *nodesetv1alpha1.NodeSet, labels func(path string, m map[string]string), taint func(path, key, value, effect string)) {
	labels("spec.template.labels", set.Spec.Template.Labels)
	for i, t := range set.Spec.Template.Taints {
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
}

// kubeEffect is a taint effect as Kubernetes spells it, also when given in
// EKS's spelling (NO_SCHEDULE) in eksManagedNodeGroup.
func kubeEffect(effect string) string {
	switch effect {
	case "NO_SCHEDULE":
		return string(corev1.TaintEffectNoSchedule)
	case "NO_EXECUTE":
		return string(corev1.TaintEffectNoExecute)
	case "PREFER_NO_SCHEDULE":
		return string(corev1.TaintEffectPreferNoSchedule)
	}
	return effect
}

// NodeAnnotationReserve is how much of a Node's annotations (256 KiB of
// keys and values, the API server's limit) the templates of its class and
// NodeSet leave free: for what nodeset records on the Node (its driver,
// when its machine was made, its drain, a provisioning error) and what the
// node's agents write there (the kubelet, kube-controller-manager, CSI and
// network plugins). Filled up, the API server refuses those writes, and
// the Node never registers nor, once deleted, leaves.
const NodeAnnotationReserve = 32 << 10

// NodeAnnotationBudget is what the class's and the set's template
// annotations may take of a Node's together.
const NodeAnnotationBudget = apivalidation.TotalAnnotationSizeLimitB - NodeAnnotationReserve

// NodeAnnotationErrors checks that the template annotations a NodeSet's
// Nodes get from its class and from the set, which each fit the schema's
// bound alone, fit NodeAnnotationBudget together. Each problem names its
// field.
func NodeAnnotationErrors(class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet) []string {
	size := 0
	for k, v := range NodeAnnotations(&class.Spec, set) {
		size += len(k) + len(v)
	}
	if size <= NodeAnnotationBudget {
		return nil
	}
	return []string{fmt.Sprintf("spec.template.annotations: with those of NodeClass %s, a Node would get %d bytes of template annotations, "+
		"and may get at most %d: a Node's annotations are at most %d bytes, and %d of them are left for what nodeset and the node's agents record there",
		class.Name, size, NodeAnnotationBudget, apivalidation.TotalAnnotationSizeLimitB, NodeAnnotationReserve)}
}

// ProvisioningSpec is EffectiveSpec for a controller about to make or
// change machines from a NodeSet's current spec, which may be newer than
// the set's last Accepted verdict (a tenant's edit the nodeset controller
// has not judged yet): it also refuses what TenantErrors,
// NodeAnnotationErrors, TemplateConflicts and, against the catalogue of
// every NodeClass, CatalogueConflicts find, so such an edit never reaches a
// machine or a cloud group. The nodeset controller reports the same
// problems as Accepted=False.
func ProvisioningSpec(catalogue []*nodesetv1alpha1.NodeClass, class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet) (nodesetv1alpha1.NodeClassSpec, error) {
	spec, err := EffectiveSpec(class, set)
	if err != nil || set == nil {
		return spec, err
	}
	problems := append(TenantErrors(set), NodeAnnotationErrors(class, set)...)
	problems = append(problems, TemplateConflicts(class, set)...)
	if problems = append(problems, CatalogueConflicts(catalogue, class, set)...); len(problems) > 0 {
		return spec, fmt.Errorf("NodeSet %s/%s: %s", set.Namespace, set.Name, strings.Join(problems, "; "))
	}
	return spec, nil
}
