// Package resolve computes what a NodeSet means under its NodeClass: the
// effective driver configuration (the class's section with the overrides the
// class permits), the template hash that tells outdated Nodes apart, and the
// labels and taints every Node of the set carries. It is pure: no API calls.
package resolve

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// RestrictedFieldError says a NodeSet overrides a field its class does not let tenants set.
type RestrictedFieldError struct {
	// Class is the NodeClass's name.
	Class string
	// Fields are the overridden restricted fields, as spec paths.
	Fields []string
	// Allowed are the fields the class lets tenants override.
	Allowed []string
}

func (e *RestrictedFieldError) Error() string {
	allowed := "none"
	if len(e.Allowed) > 0 {
		allowed = strings.Join(e.Allowed, ", ")
	}
	msg := fmt.Sprintf("%s restricted by NodeClass %s; the fields tenants may override are: %s",
		strings.Join(e.Fields, ", ")+pluralIs(len(e.Fields)), e.Class, allowed)
	for _, field := range e.Fields {
		// spec.<section>.<map>.<key> under a listed map: the class sets the key.
		parts := strings.SplitN(field, ".", 3)
		if len(parts) == 3 && slices.ContainsFunc(e.Allowed, func(a string) bool { return strings.HasPrefix(parts[2], a+".") }) {
			msg += fmt.Sprintf(" (tenants may add keys to a listed map, but a key the class sets, such as %s, is the class's unless it is listed itself)", parts[2])
			break
		}
	}
	return msg
}

func pluralIs(n int) string {
	if n == 1 {
		return " is"
	}
	return " are"
}

// SectionName returns the JSON name of the driver section a class spec sets
// ("simulated", "eksAutoscalingGroup", ..., or "parameters"), or "" if none.
func SectionName(spec *nodesetv1alpha1.NodeClassSpec) string {
	switch {
	case spec.Simulated != nil:
		return "simulated"
	case spec.DockerMachine != nil:
		return "dockerMachine"
	case spec.EKSAutoscalingGroup != nil:
		return "eksAutoscalingGroup"
	case spec.EKSManagedNodeGroup != nil:
		return "eksManagedNodeGroup"
	case spec.Parameters != nil:
		return "parameters"
	}
	return ""
}

func nodeSetSection(set *nodesetv1alpha1.NodeSet) (string, any) {
	switch {
	case set.Spec.Simulated != nil:
		return "simulated", set.Spec.Simulated
	case set.Spec.DockerMachine != nil:
		return "dockerMachine", set.Spec.DockerMachine
	case set.Spec.EKSAutoscalingGroup != nil:
		return "eksAutoscalingGroup", set.Spec.EKSAutoscalingGroup
	case set.Spec.EKSManagedNodeGroup != nil:
		return "eksManagedNodeGroup", set.Spec.EKSManagedNodeGroup
	case set.Spec.Parameters != nil:
		return "parameters", set.Spec.Parameters
	}
	return "", nil
}

// EffectiveSpec returns the class's spec with the NodeSet's driver-section
// overrides merged in, where the class's tenantOverrides allow them. Merge
// rules: scalars and lists replace; maps merge, the class's keys winning
// unless "field.key" is itself listed; objects merge field by field when only
// some of their fields are listed. A NodeSet of nil yields the class's spec.
func EffectiveSpec(class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet) (nodesetv1alpha1.NodeClassSpec, error) {
	spec := *class.Spec.DeepCopy()
	if set == nil {
		return spec, nil
	}
	name, override := nodeSetSection(set)
	if name == "" {
		return spec, nil
	}
	classSection := SectionName(&spec)
	if name != classSection {
		return spec, fmt.Errorf("spec.%s does not match NodeClass %s, whose driver %s is configured in spec.%s",
			name, class.Name, spec.Driver, classSection)
	}
	base, err := toMap(sectionValue(&spec))
	if err != nil {
		return spec, err
	}
	patch, err := toMap(override)
	if err != nil {
		return spec, err
	}
	allowed := map[string]bool{}
	for _, field := range spec.TenantOverrides {
		allowed[field] = true
	}
	var restricted []string
	merged := mergeOverrides(base, patch, "", allowed, func(path string) {
		restricted = append(restricted, "spec."+name+"."+path)
	})
	if len(restricted) > 0 {
		sort.Strings(restricted)
		return spec, &RestrictedFieldError{Class: class.Name, Fields: restricted, Allowed: spec.TenantOverrides}
	}
	if err := setSection(&spec, name, merged); err != nil {
		return spec, err
	}
	return spec, nil
}

func mergeOverrides(base, patch map[string]any, prefix string, allowed map[string]bool, restricted func(string)) map[string]any {
	if base == nil {
		base = map[string]any{}
	}
	for key, value := range patch {
		path := prefix + key
		baseValue := base[key]
		switch {
		case allowed[path]:
			if patchMap, ok := value.(map[string]any); ok {
				if baseMap, ok := baseValue.(map[string]any); ok {
					base[key] = mergeMap(baseMap, patchMap, path, allowed, restricted)
					continue
				}
			}
			base[key] = value
		case hasAllowedBelow(allowed, path):
			patchMap, ok := value.(map[string]any)
			baseMap, baseIsMap := baseValue.(map[string]any)
			if !ok || (baseValue != nil && !baseIsMap) {
				// A listed key with dots (tags.example.com/owner) is
				// no field below a value the class sets that is not
				// an object (its tag example): written as objects in
				// free-form parameters, it would replace that value.
				restricted(path)
				continue
			}
			base[key] = mergeOverrides(baseMap, patchMap, path+".", allowed, restricted)
		case reflect.DeepEqual(baseValue, value) || isSchemaDefault(path, value):
			// The class's own value, or the value the schema defaulted in the
			// tenant's section: no change, so nothing is overridden, and the
			// class's value (or its absence) stays.
		default:
			restricted(path)
		}
	}
	return base
}

// schemaDefaults are the values the CRD schema gives driver-section fields
// a NodeSet leaves out (+kubebuilder:default), by path in the section: the
// API server puts them in a tenant's section as in the class's, in every
// object the tenant sets a field of.
var schemaDefaults = map[string]any{
	"bootstrap.format":           string(nodesetv1alpha1.BootstrapNodeConfig),
	"metadataOptions.httpTokens": "required",
	"interruptions.rebalance":    string(nodesetv1alpha1.RebalanceTaint),
}

// isSchemaDefault reports whether a value of a NodeSet's driver section is
// the schema's default of its field. The tenant cannot leave such a value
// out (the API server writes it in), so it is no word of theirs on the
// field, whatever the class sets there: counted as an override, it would
// refuse every NodeSet that uses an entry of tenantOverrides beside it,
// and a class edited to another value (BootstrapScript for NodeConfig)
// would refuse its NodeSets instead of rolling them. A tenant who wants
// the default where the class sets another value is not heard; any other
// value is an override as usual.
func isSchemaDefault(path string, value any) bool {
	def, ok := schemaDefaults[path]
	return ok && reflect.DeepEqual(def, value)
}

// mergeMap merges an overridable map: the tenant adds keys; a key the
// class sets stays the class's unless that key itself is listed, and a
// tenant value for it is restricted (refused, never silently dropped).
func mergeMap(base, patch map[string]any, path string, allowed map[string]bool, restricted func(string)) map[string]any {
	out := make(map[string]any, len(base)+len(patch))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range patch {
		if classValue, classSets := base[k]; classSets && !allowed[path+"."+k] {
			if !reflect.DeepEqual(classValue, v) {
				restricted(path + "." + k)
			}
			continue
		}
		out[k] = v
	}
	return out
}

func hasAllowedBelow(allowed map[string]bool, path string) bool {
	for field := range allowed {
		if strings.HasPrefix(field, path+".") {
			return true
		}
	}
	return false
}

func sectionValue(spec *nodesetv1alpha1.NodeClassSpec) any {
	switch SectionName(spec) {
	case "simulated":
		return spec.Simulated
	case "dockerMachine":
		return spec.DockerMachine
	case "eksAutoscalingGroup":
		return spec.EKSAutoscalingGroup
	case "eksManagedNodeGroup":
		return spec.EKSManagedNodeGroup
	case "parameters":
		return spec.Parameters
	}
	return nil
}

func setSection(spec *nodesetv1alpha1.NodeClassSpec, name string, value map[string]any) error {
	raw, err := json.Marshal(value)
	if err != nil {
		return err
	}
	var target any
	switch name {
	case "simulated":
		spec.Simulated = &nodesetv1alpha1.SimulatedMachine{}
		target = spec.Simulated
	case "dockerMachine":
		spec.DockerMachine = &nodesetv1alpha1.DockerMachine{}
		target = spec.DockerMachine
	case "eksAutoscalingGroup":
		spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{}
		target = spec.EKSAutoscalingGroup
	case "eksManagedNodeGroup":
		spec.EKSManagedNodeGroup = &nodesetv1alpha1.EKSManagedNodeGroup{}
		target = spec.EKSManagedNodeGroup
	case "parameters":
		spec.Parameters = &runtime.RawExtension{Raw: raw}
		return nil
	}
	return json.Unmarshal(raw, target)
}

func toMap(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if string(raw) == "null" {
		return out, nil
	}
	return out, json.Unmarshal(raw, &out)
}

// TemplateHash hashes everything that shapes a Node of the set: the effective
// driver configuration, the class's and the set's templates and the tenancy.
// Nodes labelled with another hash are outdated.
func TemplateHash(effective *nodesetv1alpha1.NodeClassSpec, set *nodesetv1alpha1.NodeSet) string {
	shape := struct {
		Driver   string                         `json:"driver"`
		Sections nodesetv1alpha1.DriverSections `json:"sections"`
		Params   *runtime.RawExtension          `json:"parameters,omitempty"`
		Class    nodesetv1alpha1.NodeTemplate   `json:"class"`
		Set      nodesetv1alpha1.NodeTemplate   `json:"set"`
		Tenancy  nodesetv1alpha1.Tenancy        `json:"tenancy"`
	}{effective.Driver, hashedSections(effective.DriverSections), effective.Parameters, effective.NodeTemplate, set.Spec.Template, effective.Tenancy}
	raw, _ := json.Marshal(shape)
	h := fnv.New32a()
	_, _ = h.Write(raw)
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// hashedSections are the driver sections without what configures the
// controllers or the cloud rather than the machines (eks-asg interruption
// handling, the simulated cloud's room), so changing that rolls no Node.
func hashedSections(sections nodesetv1alpha1.DriverSections) nodesetv1alpha1.DriverSections {
	if asg := sections.EKSAutoscalingGroup; asg != nil && asg.Interruptions != nil {
		copied := *asg
		copied.Interruptions = nil
		sections.EKSAutoscalingGroup = &copied
	}
	if sim := sections.Simulated; sim != nil && sim.MaxMachines != nil {
		copied := *sim
		copied.MaxMachines = nil
		sections.Simulated = &copied
	}
	return sections
}

// SelectorLabels are the labels that select a NodeSet's Nodes.
func SelectorLabels(set *nodesetv1alpha1.NodeSet) map[string]string {
	return map[string]string{
		nodesetv1alpha1.LabelNodeSetNamespace: set.Namespace,
		nodesetv1alpha1.LabelNodeSet:          set.Name,
	}
}

// Selector selects a NodeSet's Nodes: those labelled with it, less those
// whose labels were tampered with (nodeutil.Members).
func Selector(set *nodesetv1alpha1.NodeSet) labels.Selector {
	return nodeutil.Members(labels.SelectorFromSet(SelectorLabels(set)))
}

// NodeLabels are the labels of a Node of the set: the class's template, then
// the set's, then the reserved nodeset labels, which always win. A Node of a
// Dedicated class carries its tenant twice: nodeset.dev/tenant, and
// LabelTenantRestricted, which no kubelet can put on its own Node (a
// kubelet may relabel its Node nodeset.dev/tenant=<another namespace>).
// Every Node carries the seal of its namespace, set and class
// (nodeutil.Seal), which no kubelet can change either.
func NodeLabels(effective *nodesetv1alpha1.NodeClassSpec, class string, set *nodesetv1alpha1.NodeSet, templateHash string) map[string]string {
	out := map[string]string{}
	for k, v := range effective.NodeTemplate.Labels {
		out[k] = v
	}
	for k, v := range set.Spec.Template.Labels {
		out[k] = v
	}
	for k, v := range SelectorLabels(set) {
		out[k] = v
	}
	out[nodesetv1alpha1.LabelNodeClass] = class
	out[nodesetv1alpha1.LabelTemplateHash] = templateHash
	out[nodesetv1alpha1.LabelSeal] = nodeutil.Seal(set.Namespace, set.Name, class)
	if effective.Tenancy == nodesetv1alpha1.TenancyDedicated {
		out[nodesetv1alpha1.LabelTenant] = set.Namespace
		out[nodesetv1alpha1.LabelTenantRestricted] = set.Namespace
	}
	return out
}

// NodeAnnotations are the annotations of a Node of the set: the class's, then the set's.
func NodeAnnotations(effective *nodesetv1alpha1.NodeClassSpec, set *nodesetv1alpha1.NodeSet) map[string]string {
	out := map[string]string{}
	for k, v := range effective.NodeTemplate.Annotations {
		out[k] = v
	}
	for k, v := range set.Spec.Template.Annotations {
		out[k] = v
	}
	return out
}

// NodeTaints are the taints of a registered Node of the set: the class's, the
// set's (a set's taint replaces the class's with the same key and effect),
// and the tenant taint of Dedicated classes.
func NodeTaints(effective *nodesetv1alpha1.NodeClassSpec, set *nodesetv1alpha1.NodeSet) []corev1.Taint {
	var out []corev1.Taint
	add := func(t corev1.Taint) {
		for i := range out {
			if out[i].Key == t.Key && out[i].Effect == t.Effect {
				out[i] = t
				return
			}
		}
		out = append(out, t)
	}
	for _, t := range effective.NodeTemplate.Taints {
		add(corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	if set != nil {
		for _, t := range set.Spec.Template.Taints {
			add(corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
		}
		if effective.Tenancy == nodesetv1alpha1.TenancyDedicated {
			add(corev1.Taint{Key: nodesetv1alpha1.LabelTenant, Value: set.Namespace, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return out
}

// NewNode is a Node of the set as it is created, without its name: the
// set's labels, annotations and taints, the driver annotation, the startup
// taints and labels and the termination finalizer; and, when the set's status.capacity is that of
// templateHash, the machine's capacity and allocatable in its status, as a
// kubelet registers its Node (the API server keeps a Node's status on
// create), so that nothing reads a new Node as a node of no resources.
func NewNode(effective *nodesetv1alpha1.NodeClassSpec, class string, set *nodesetv1alpha1.NodeSet, templateHash string) *corev1.Node {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      nodeutil.AddStartupLabels(NodeLabels(effective, class, set, templateHash)),
			Annotations: NodeAnnotations(effective, set),
			Finalizers:  []string{nodesetv1alpha1.FinalizerTermination},
		},
		Spec: corev1.NodeSpec{Taints: append(NodeTaints(effective, set), StartupTaints()...)},
	}
	// The driver that makes its machine, from the start: the node
	// controller's writes then add to a map that exists, and never need
	// the whole Node to be as they read it.
	node.Annotations[nodesetv1alpha1.AnnotationDriver] = string(effective.Driver)
	if set != nil && set.Status.Capacity != nil && set.Status.Capacity.TemplateHash == templateHash && len(set.Status.Capacity.Resources) > 0 {
		allocatable := set.Status.Capacity.Allocatable
		if len(allocatable) == 0 {
			allocatable = set.Status.Capacity.Resources
		}
		node.Status.Capacity = set.Status.Capacity.Resources.DeepCopy()
		node.Status.Allocatable = allocatable.DeepCopy()
		maps.Copy(node.Labels, AcceleratorLabels(set.Status.Capacity.Resources))
	}
	return node
}

// acceleratorResources are the extended resources of accelerators that
// cluster-autoscaler knows: a Node labelled LabelAccelerator counts as
// starting while none of them is allocatable.
var acceleratorResources = []corev1.ResourceName{
	"nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/xe", "habana.ai/gaudi", "microsoft.com/directx",
}

// AcceleratorLabels is the LabelAccelerator label of a machine of this
// capacity, when it has accelerators. A GPU's device plugin reports it
// after the kubelet is Ready, and the label is what tells
// cluster-autoscaler to wait for it rather than count a Node without it as
// ready capacity and make more.
func AcceleratorLabels(capacity corev1.ResourceList) map[string]string {
	for _, name := range acceleratorResources {
		if q, ok := capacity[name]; ok && q.Sign() > 0 {
			return map[string]string{nodesetv1alpha1.LabelAccelerator: strings.ReplaceAll(string(name), "/", "-")}
		}
	}
	return nil
}

// StartupTaints keep pods off a Node until its kubelet reports Ready:
// nodeset's own, and the same under cluster-autoscaler's startup-taint
// prefix so that cluster-autoscaler counts the Node as still starting.
// The node controller lifts both in one update.
func StartupTaints() []corev1.Taint {
	return []corev1.Taint{
		{Key: nodesetv1alpha1.TaintUnregistered, Effect: corev1.TaintEffectNoExecute},
		{Key: nodeutil.AutoscalerStartupTaint, Effect: corev1.TaintEffectNoExecute},
	}
}

// Overrides reports whether the NodeSet sets any field of a driver section,
// so that its machines may differ from the class's.
func Overrides(set *nodesetv1alpha1.NodeSet) bool {
	name, _ := nodeSetSection(set)
	return name != ""
}
