package nodeclass

import (
	"fmt"
	"reflect"
	"strings"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// SpecErrors checks what the schema cannot: that tenantOverrides name fields
// of the driver section, and that the allowedNamespaces selector is a valid
// label selector. The webhook refuses such a class at create and update time;
// the NodeClassController reports it as Valid=False.
func SpecErrors(spec *nodesetv1alpha1.NodeClassSpec) error {
	if err := TenantOverrideErrors(spec); err != nil {
		return err
	}
	if spec.AllowedNamespaces != nil && spec.AllowedNamespaces.Selector != nil {
		path := field.NewPath("spec", "allowedNamespaces", "selector")
		if errs := metav1validation.ValidateLabelSelector(spec.AllowedNamespaces.Selector, metav1validation.LabelSelectorValidationOptions{}, path); len(errs) > 0 {
			return fmt.Errorf("%w: %v", drivers.ErrInvalidConfiguration, errs.ToAggregate())
		}
	}
	return nil
}

// TenantOverrideErrors checks that every entry of spec.tenantOverrides names
// a field of the class's driver section (dotted for nested fields).
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
		if !fieldExists(section, strings.Split(path, ".")) {
			return drivers.InvalidConfiguration(fmt.Sprintf("spec.tenantOverrides[%d]", i),
				"%q is not a field of the driver section; fields are: %s", path, strings.Join(fieldNames(section), ", "))
		}
	}
	return nil
}

func fieldExists(t reflect.Type, path []string) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if len(path) == 0 {
		return true
	}
	if t.Kind() == reflect.Map {
		// A listed map key (tags.team): any key is a field of a map.
		return len(path) == 1
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		if jsonName(t.Field(i)) == path[0] {
			return fieldExists(t.Field(i).Type, path[1:])
		}
	}
	return false
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
