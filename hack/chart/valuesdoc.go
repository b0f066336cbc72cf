package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// valueDoc is one row of the values table.
type valueDoc struct {
	key, kind, value, description string
}

// valuesTable renders the Markdown table of every value that values.yaml
// documents with a "# -- description" comment above its key. It fails on a
// value documented neither itself nor by an enclosing key, so that a new
// value cannot go undocumented.
func valuesTable(values []byte) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return "", err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return "", fmt.Errorf("not a mapping")
	}
	var rows []valueDoc
	if err := collectDocs(doc.Content[0], "", &rows); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", r.key, r.kind, strings.ReplaceAll(r.value, "|", `\|`),
			strings.ReplaceAll(r.description, "|", `\|`))
	}
	return b.String(), nil
}

// collectDocs adds a row for each documented key of mapping and descends into
// the undocumented mappings.
func collectDocs(mapping *yaml.Node, prefix string, rows *[]valueDoc) error {
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		key, value := mapping.Content[i], mapping.Content[i+1]
		path := key.Value
		if prefix != "" {
			path = prefix + "." + key.Value
		}
		description, ok := docComment(key.HeadComment)
		if ok {
			shown, err := compactJSON(value)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			*rows = append(*rows, valueDoc{key: path, kind: kindOf(value), value: shown, description: description})
			continue
		}
		if value.Kind == yaml.MappingNode && len(value.Content) > 0 {
			if err := collectDocs(value, path, rows); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("%s has no \"# -- description\" comment", path)
	}
	return nil
}

// docComment returns the text of a "# --" comment: the marker line and the
// comment lines after it.
func docComment(comment string) (string, bool) {
	lines := strings.Split(comment, "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, "# --") {
			continue
		}
		parts := []string{strings.TrimSpace(strings.TrimPrefix(line, "# --"))}
		for _, more := range lines[i+1:] {
			parts = append(parts, strings.TrimSpace(strings.TrimPrefix(more, "#")))
		}
		return strings.Join(parts, " "), true
	}
	return "", false
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "object"
	case yaml.SequenceNode:
		return "list"
	}
	switch n.Tag {
	case "!!int", "!!float":
		return "number"
	case "!!bool":
		return "bool"
	}
	return "string"
}

func compactJSON(n *yaml.Node) (string, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return "", err
	}
	out, err := json.Marshal(v)
	return string(out), err
}
