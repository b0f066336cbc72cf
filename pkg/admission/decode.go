package admission

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// decode unmarshals an object's JSON into obj. When it does not decode, the
// error names the field whose value the Go type refuses (for example
// spec.simulated.bootDelay), found by decoding the object's parts one by one.
func decode(raw []byte, obj any) error {
	err := json.Unmarshal(raw, obj)
	if err == nil {
		return nil
	}
	if path, cause := undecodable(nil, raw, reflect.TypeOf(obj).Elem()); path != nil {
		return fmt.Errorf("%s: %w", path, cause)
	}
	return err
}

// undecodable returns the deepest path below path whose value in raw does not
// decode into its Go type t, with the decoding error; nil when raw decodes.
func undecodable(path *field.Path, raw []byte, t reflect.Type) (*field.Path, error) {
	err := json.Unmarshal(raw, reflect.New(t).Interface())
	if err == nil {
		return nil, nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return path, err // a value with its own syntax: a duration, a quantity, a time
	}
	switch t.Kind() {
	case reflect.Struct:
		var fields map[string]json.RawMessage
		if json.Unmarshal(raw, &fields) != nil {
			return path, err
		}
		types := jsonFields(t)
		for _, name := range sortedKeys(fields) {
			if ft, ok := types[name]; ok {
				if p, e := undecodable(child(path, name), fields[name], ft); p != nil {
					return p, e
				}
			}
		}
	case reflect.Map:
		var entries map[string]json.RawMessage
		if path == nil || json.Unmarshal(raw, &entries) != nil {
			return path, err
		}
		for _, key := range sortedKeys(entries) {
			if p, e := undecodable(path.Key(key), entries[key], t.Elem()); p != nil {
				return p, e
			}
		}
	case reflect.Slice:
		var items []json.RawMessage
		if path == nil || json.Unmarshal(raw, &items) != nil {
			return path, err
		}
		for i, item := range items {
			if p, e := undecodable(path.Index(i), item, t.Elem()); p != nil {
				return p, e
			}
		}
	}
	return path, err
}

// jsonFields maps the JSON names of a struct's fields to their types,
// including the fields of embedded structs that encoding/json promotes.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || (!f.IsExported() && !f.Anonymous):
		case name == "" && f.Anonymous && f.Type.Kind() == reflect.Struct:
			for promoted, ft := range jsonFields(f.Type) {
				fields[promoted] = ft
			}
		case name == "":
			fields[f.Name] = f.Type
		default:
			fields[name] = f.Type
		}
	}
	return fields
}

func child(path *field.Path, name string) *field.Path {
	if path == nil {
		return field.NewPath(name)
	}
	return path.Child(name)
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
