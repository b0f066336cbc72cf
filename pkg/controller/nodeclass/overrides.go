package nodeclass

import (
	"fmt"
	"reflect"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// SpecErrors checks what the schema cannot afford: that tenantOverrides
// name fields of the driver section a NodeSet can set, that the labels,
// annotations and taints the class puts on Nodes are valid Kubernetes syntax,
// and that the allowedNamespaces selector is a valid label selector. The
// webhook refuses such a class at create and update time; the
// NodeClassController reports it as Valid=False.
func SpecErrors(spec *nodesetv1alpha1.NodeClassSpec) error {
	if err := SectionErrors(spec); err != nil {
		return err
	}
	if err := TenantOverrideErrors(spec); err != nil {
		return err
	}
	if errs := NodeTemplateErrors(spec); len(errs) > 0 {
		return fmt.Errorf("%w: %v", drivers.ErrInvalidConfiguration, errs.ToAggregate())
	}
	if spec.AllowedNamespaces != nil && spec.AllowedNamespaces.Selector != nil {
		path := field.NewPath("spec", "allowedNamespaces", "selector")
		if errs := metav1validation.ValidateLabelSelector(spec.AllowedNamespaces.Selector, metav1validation.LabelSelectorValidationOptions{}, path); len(errs) > 0 {
			return fmt.Errorf("%w: %v", drivers.ErrInvalidConfiguration, errs.ToAggregate())
		}
	}
	return nil
}

// SectionErrors checks that a built-in driver section is set only with its
// driver's name: an out-of-tree driver is configured through spec.parameters.
// The schema says the same; the webhook checks it too, for its message.
func SectionErrors(spec *nodesetv1alpha1.NodeClassSpec) error {
	sections := []struct {
		set    bool
		field  string
		driver string
	}{
		{spec.Simulated != nil, "spec.simulated", nodesetv1alpha1.DriverSimulated},
		{spec.DockerMachine != nil, "spec.dockerMachine", nodesetv1alpha1.DriverDockerMachine},
		{spec.EKSAutoscalingGroup != nil, "spec.eksAutoscalingGroup", nodesetv1alpha1.DriverEKSASG},
		{spec.EKSManagedNodeGroup != nil, "spec.eksManagedNodeGroup", nodesetv1alpha1.DriverEKSManaged},
	}
	for _, section := range sections {
		if section.set && spec.Driver != section.driver {
			return drivers.InvalidConfiguration(section.field,
				"is only for spec.driver %s, not %q; an out-of-tree driver is configured through spec.parameters", section.driver, spec.Driver)
		}
	}
	return nil
}

// NodeTemplateErrors checks the labels, annotations and taints the class
// puts on its Nodes (spec.nodeTemplate, spec.simulated.labels, the labels
// and taints of spec.eksManagedNodeGroup) with the API machinery's rules, so
// that a class whose Nodes the API server would refuse is refused itself.
func NodeTemplateErrors(spec *nodesetv1alpha1.NodeClassSpec) field.ErrorList {
	template := field.NewPath("spec", "nodeTemplate")
	errs := metav1validation.ValidateLabels(spec.NodeTemplate.Labels, template.Child("labels"))
	errs = append(errs, apimachineryvalidation.ValidateAnnotations(spec.NodeTemplate.Annotations, template.Child("annotations"))...)
	for i, taint := range spec.NodeTemplate.Taints {
		errs = append(errs, taintErrors(taint.Key, taint.Value, template.Child("taints").Index(i))...)
	}
	if spec.Simulated != nil {
		errs = append(errs, metav1validation.ValidateLabels(spec.Simulated.Labels, field.NewPath("spec", "simulated", "labels"))...)
	}
	if group := spec.EKSManagedNodeGroup; group != nil {
		path := field.NewPath("spec", "eksManagedNodeGroup")
		errs = append(errs, metav1validation.ValidateLabels(group.Labels, path.Child("labels"))...)
		for i, taint := range group.Taints {
			errs = append(errs, taintErrors(taint.Key, taint.Value, path.Child("taints").Index(i))...)
		}
	}
	return errs
}

func taintErrors(key, value string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(key) {
		errs = append(errs, field.Invalid(path.Child("key"), key, msg))
	}
	for _, msg := range validation.IsValidLabelValue(value) {
		errs = append(errs, field.Invalid(path.Child("value"), value, msg))
	}
	return errs
}

// TenantOverrideErrors checks that every entry of spec.tenantOverrides names
// a field of the class's driver section (dotted for nested fields) that a
// NodeSet can set: a list is overridden whole, never element by element.
func TenantOverrideErrors(spec *nodesetv1alpha1.NodeClassSpec) error {
	var section reflect.Type
	switch {
	case spec.Simulated != nil:
		section = reflect.TypeOf(nodesetv1alpha1.SimulatedMachine{})
	case spec.DockerMachine != nil:
		section = reflect.TypeOf(nodesetv1alpha1.DockerMachine{})
	case spec.EKSAutoscalingGroup != nil:
		section = reflect.TypeOf(nodesetv1alpha1.EKSAutoscalingGroup{})
	case spec.EKSManagedNodeGroup != nil:
		section = reflect.TypeOf(nodesetv1alpha1.EKSManagedNodeGroup{})
	default:
		return nil // out-of-tree parameters: free-form
	}
	for i, path := range spec.TenantOverrides {
		parts := strings.Split(path, ".")
		exists, list := lookupField(section, parts)
		if list > 0 {
			whole := strings.Join(parts[:list], ".")
			return drivers.InvalidConfiguration(fmt.Sprintf("spec.tenantOverrides[%d]", i),
				"%q is a field of the elements of the list %s: list elements cannot be overridden piecewise; list the whole list (%s) instead",
				path, whole, whole)
		}
		if !exists {
			return drivers.InvalidConfiguration(fmt.Sprintf("spec.tenantOverrides[%d]", i),
				"%q is not a field of the driver section; fields are: %s", path, strings.Join(fieldNames(section), ", "))
		}
	}
	return nil
}

// lookupField says whether path names a field of t that can be overridden.
// When path goes on past a list, list is the number of its leading parts
// that name the list (and exists is false); otherwise list is 0.
func lookupField(t reflect.Type, path []string) (exists bool, list int) {
	for depth := 0; ; depth++ {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if depth == len(path) {
			return true, 0
		}
		switch t.Kind() {
		case reflect.Slice:
			return false, depth
		case reflect.Map:
			// A listed map key (tags.team): any key is a field of a map.
			return depth == len(path)-1, 0
		case reflect.Struct:
			next := reflect.Type(nil)
			for i := range t.NumField() {
				if jsonName(t.Field(i)) == path[depth] {
					next = t.Field(i).Type
					break
				}
			}
			if next == nil {
				return false, 0
			}
			t = next
		default:
			return false, 0
		}
	}
}

func fieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if name := jsonName(t.Field(i)); name != "" {
			names = append(names, name)
		}
	}
	return names
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// overrideRisks are the tenantOverrides entries that reach a Node's labels
// and taints, the kubelet's command line or a machine's boot, by the class's
// driver, with what an admin should know before listing them.
var overrideRisks = map[string]map[string]string{
	nodesetv1alpha1.DriverSimulated: {
		"labels": "tenants may add Node labels through spec.simulated.labels; keys under nodeset.dev and in the kubernetes.io and k8s.io domains stay refused",
	},
	nodesetv1alpha1.DriverEKSManaged: {
		"labels":       "tenants may add Node labels through spec.eksManagedNodeGroup.labels; keys under nodeset.dev and in the kubernetes.io and k8s.io domains stay refused",
		"taints":       "tenants may add Node taints through spec.eksManagedNodeGroup.taints; keys under nodeset.dev and in the kubernetes.io and k8s.io domains stay refused",
		"remoteAccess": "tenants may open SSH to their nodes and name the security groups allowed to reach it",
	},
	nodesetv1alpha1.DriverEKSASG: {
		"bootstrap":                      "tenants may change how nodes join the cluster, including the API server endpoint and CA they trust, kubelet flags and commands run as root at boot",
		"bootstrap.kubeletExtraArgs":     "tenants may pass kubelet flags; --node-labels and --register-with-taints are refused, any other flag (--node-ip, --max-pods, --eviction-hard, ...) is not checked",
		"bootstrap.preBootstrapCommands": "tenants run commands as root on each node before it joins the cluster",
		"instanceProfile":                "tenants choose the IAM role their instances run with",
		"securityGroupIDs":               "tenants choose the network their nodes sit in",
	},
	nodesetv1alpha1.DriverDockerMachine: {
		"options":      "tenants may set any option of the docker-machine plugin, including ones that choose where machines run and who can reach them",
		"provisioning": "tenants may change the join script run on each machine",
	},
}

// OverrideWarnings are admission warnings for the tenantOverrides of a class
// that give tenants more than the machine's shape: what they reach, and what
// nodeset still refuses there. They do not refuse the class: an admin may
// mean it.
func OverrideWarnings(spec *nodesetv1alpha1.NodeClassSpec) []string {
	risks := overrideRisks[spec.Driver]
	var out []string
	for i, entry := range spec.TenantOverrides {
		if risk, ok := risks[entry]; ok {
			out = append(out, fmt.Sprintf("spec.tenantOverrides[%d] %q: %s", i, entry, risk))
		}
	}
	return out
}
