package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"nodeset.dev/nodeset/test/framework"
)

// table prints one column per result under a label column of width label.
type table[R any] struct {
	results []R
	label   int
	column  int
	out     strings.Builder
}

func (t *table[R]) row(name string, cell func(r R) string) {
	fmt.Fprintf(&t.out, "%-*s", t.label, name)
	for _, r := range t.results {
		fmt.Fprintf(&t.out, "%*s", t.column, cell(r))
	}
	t.out.WriteString("\n")
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// cell is m[k], or "-" when m was not measured (nil).
func cell(m map[string]float64, k string) string {
	if m == nil {
		return "-"
	}
	return num(m[k])
}

// sortedKeys are the keys of the maps m gives for each result, sorted.
func sortedKeys[R any](results []R, m ...func(R) map[string]float64) []string {
	seen := map[string]bool{}
	var keys []string
	for _, r := range results {
		for _, f := range m {
			for k := range f(r) {
				if !seen[k] {
					seen[k] = true
					keys = append(keys, k)
				}
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// writeJSON writes payload, with the time, to $env or _output/file.
func writeJSON(b *testing.B, env, file string, payload map[string]any) {
	path := os.Getenv(env)
	if path == "" {
		root, err := framework.RepoRoot()
		if err != nil {
			b.Fatal(err)
		}
		path = filepath.Join(root, "_output", file)
	}
	payload["time"] = time.Now().UTC().Format(time.RFC3339)
	data, err := json.MarshalIndent(payload, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("written to %s\n", path)
}
