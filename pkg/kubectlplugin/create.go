package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/resolve"
)

type createOptions struct {
	class    string
	replicas int32
	labels   []string
	taints   []string
	sets     []string
	dryRun   string
	output   string
}

// createCommand is kubectl nodeset create NAME --class C --replicas N.
func (o *options) createCommand() *cobra.Command {
	co := &createOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME --class CLASS [--replicas N] [--label k=v] [--taint k=v:Effect] [--set field=value]",
		Short: "Create a NodeSet",
		Long: `Create a NodeSet of a NodeClass.

--set sets a field of the class's driver section, where the class lets
tenants override it (kubectl nodeset classes lists them), for example
--set instanceType=sim.large. A text field takes the value as typed
(--set version=1.30, --set tags.team=42); other fields read it as JSON when
it parses as JSON (numbers, true/false, lists), as text otherwise.`,
		Example: `  kubectl nodeset create web --class sim-small --replicas 3 --label tier=web --taint dedicated=web:NoSchedule
  kubectl nodeset create batch --class batch-spot --set 'mixedInstances.instanceTypes=["c6i.2xlarge"]' --dry-run=client -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.create(cmd.Context(), args[0], co)
		},
	}
	f := cmd.Flags()
	f.StringVar(&co.class, "class", "", "The NodeClass the nodes are made from.")
	f.Int32Var(&co.replicas, "replicas", 1, "The number of nodes.")
	f.StringArrayVar(&co.labels, "label", nil, "A label for the nodes, key=value (repeatable).")
	f.StringArrayVar(&co.taints, "taint", nil, "A taint for the nodes, key[=value]:Effect (repeatable).")
	f.StringArrayVar(&co.sets, "set", nil, "A driver-section field the class lets tenants override, field=value (repeatable).")
	f.StringVar(&co.dryRun, "dry-run", "none", `"none", "client" (print, send nothing) or "server" (the API server checks, stores nothing).`)
	f.StringVarP(&co.output, "output", "o", "", `"yaml" or "json" to print the NodeSet; the name only otherwise.`)
	_ = cmd.MarkFlagRequired("class")
	return cmd
}

func (o *options) create(ctx context.Context, name string, co *createOptions) error {
	switch co.dryRun {
	case "none", "client", "server":
	default:
		return fmt.Errorf(`--dry-run must be "none", "client" or "server", not %q`, co.dryRun)
	}
	switch co.output {
	case "", "yaml", "json":
	default:
		return fmt.Errorf(`--output must be "yaml" or "json", not %q`, co.output)
	}
	if co.replicas < 0 {
		return fmt.Errorf("--replicas must be 0 or more")
	}
	c, err := o.clients()
	if err != nil {
		return err
	}
	spec := map[string]any{"nodeClassName": co.class, "replicas": co.replicas}
	template := map[string]any{}
	if len(co.labels) > 0 {
		labels := map[string]any{}
		for _, l := range co.labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok || k == "" {
				return fmt.Errorf("--label %q: want key=value", l)
			}
			labels[k] = v
		}
		template["labels"] = labels
	}
	for _, t := range co.taints {
		taint, err := parseTaint(t)
		if err != nil {
			return err
		}
		list, _ := template["taints"].([]any)
		template["taints"] = append(list, taint)
	}
	if len(template) > 0 {
		spec["template"] = template
	}
	if len(co.sets) > 0 {
		// The field goes into the class's driver section.
		class, err := c.nodeset.NodesetV1alpha1().NodeClasses().Get(ctx, co.class, metav1.GetOptions{})
		if err != nil {
			return err
		}
		section := resolve.SectionName(&class.Spec)
		if section == "" {
			return fmt.Errorf("NodeClass %s has no driver section to override", co.class)
		}
		sectionType := sectionGoType(section)
		values := map[string]any{}
		for _, s := range co.sets {
			path, text, ok := strings.Cut(s, "=")
			if !ok || path == "" {
				return fmt.Errorf("--set %q: want field=value", s)
			}
			fields := strings.Split(path, ".")
			value := parseValue(text, fieldGoType(sectionType, fields))
			// Each field alone first, so that a value its field cannot
			// take is refused naming the --set it came from.
			one := map[string]any{}
			setPath(one, fields, value)
			if err := decodeStrict(one, sectionType); err != nil {
				return fmt.Errorf("--set %q: %w", s, err)
			}
			setPath(values, fields, value)
		}
		spec[section] = values
	}
	obj := map[string]any{
		"apiVersion": nodesetv1alpha1.GroupVersion.String(), "kind": "NodeSet",
		"metadata": map[string]any{"name": name, "namespace": c.namespace},
		"spec":     spec,
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	// What the server would decode, strictly: an unknown --set field fails
	// here, as it would there.
	set := &nodesetv1alpha1.NodeSet{}
	decoder := json.NewDecoder(bytes.NewReader(body))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(set); err != nil {
		return fmt.Errorf("NodeSet %s: %w", name, err)
	}
	if co.dryRun != "client" {
		req := c.nodeset.NodesetV1alpha1().RESTClient().Post().Namespace(c.namespace).Resource("nodesets").
			Param("fieldValidation", "Strict").SetHeader("Content-Type", "application/json").Body(body)
		if co.dryRun == "server" {
			req = req.Param("dryRun", metav1.DryRunAll)
		}
		created := &nodesetv1alpha1.NodeSet{}
		if err := req.Do(ctx).Into(created); err != nil {
			return err
		}
		set = created
	}
	set.APIVersion, set.Kind = nodesetv1alpha1.GroupVersion.String(), "NodeSet"
	// What is printed: the NodeSet the server stored (or would store), or on
	// a client dry run the manifest that would be sent, with no status and
	// none of the type's empty fields.
	var printed any = set
	if co.dryRun == "client" {
		printed = obj
	}
	switch co.output {
	case "yaml":
		data, err := yaml.Marshal(printed)
		if err != nil {
			return err
		}
		_, err = o.streams.Out.Write(data)
		return err
	case "json":
		data, err := json.MarshalIndent(printed, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.streams.Out, "%s\n", data)
		return err
	}
	suffix := ""
	switch co.dryRun {
	case "client":
		suffix = " (dry run)"
	case "server":
		suffix = " (server dry run)"
	}
	fmt.Fprintf(o.streams.Out, "nodeset.nodeset.dev/%s created%s\n", name, suffix)
	return nil
}

// parseTaint reads key[=value]:Effect.
func parseTaint(s string) (map[string]any, error) {
	rest, effect, ok := strings.Cut(s, ":")
	if !ok || rest == "" || effect == "" {
		return nil, fmt.Errorf("--taint %q: want key[=value]:Effect, such as dedicated=web:NoSchedule", s)
	}
	key, value, _ := strings.Cut(rest, "=")
	taint := map[string]any{"key": key, "effect": effect}
	if value != "" {
		taint["value"] = value
	}
	return taint, nil
}

// parseValue reads the text of a --set for a field of type field (nil when
// unknown): a string field takes the text as typed (or the string it
// quotes), so that a version 1.30 or a tag 42 stays text; any other field
// takes JSON when the text is JSON, the text otherwise.
func parseValue(s string, field reflect.Type) any {
	if field != nil && field.Kind() == reflect.String {
		var quoted string
		if err := json.Unmarshal([]byte(s), &quoted); err == nil {
			return quoted
		}
		return s
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err == nil {
		return v
	}
	return s
}

// sectionGoType is the Go type of the NodeSet's driver section of that JSON
// name, or nil.
func sectionGoType(section string) reflect.Type {
	return fieldGoType(reflect.TypeFor[nodesetv1alpha1.NodeSetSpec](), []string{section})
}

// fieldGoType follows the JSON field names of path from t (struct fields,
// inlined structs, map values) and returns the type found there, pointers
// removed, or nil when the path leaves the typed fields.
func fieldGoType(t reflect.Type, path []string) reflect.Type {
	for _, name := range path {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t == nil:
			return nil
		case t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			t = structField(t, name)
		default:
			return nil
		}
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// structField is the type of t's field of that JSON name, looking into
// inlined structs, or nil.
func structField(t reflect.Type, name string) reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name {
			return f.Type
		}
		if tag == "" && f.Anonymous && f.Type.Kind() == reflect.Struct {
			if found := structField(f.Type, name); found != nil {
				return found
			}
		}
	}
	return nil
}

// decodeStrict decodes value into a new t as the API server would, strictly.
func decodeStrict(value any, t reflect.Type) error {
	if t == nil {
		return nil
	}
	body, err := json.Marshal(value)
	if err != nil {
		return err
	}
	decoder := json.NewDecoder(bytes.NewReader(body))
	decoder.DisallowUnknownFields()
	return decoder.Decode(reflect.New(t).Interface())
}

func setPath(m map[string]any, path []string, value any) {
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = value
}
