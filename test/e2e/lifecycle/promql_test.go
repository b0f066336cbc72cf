package lifecycle

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A small PromQL evaluator, enough for the shipped alert rules and dashboard
// queries, so that tests can evaluate them against scraped metrics
// (promtool is not available here).

// promQL evaluates, at one instant, the part of PromQL the shipped alerts
// are written in: selectors with = and != matchers, sum/min/max/count with
// by or without, comparisons (with bool, on and ignoring), and, or, unless;
// increase and rate of a counter are its value, the increase since the
// process started (the window covers the controllers' whole life). Vector
// matching follows Prometheus: a one-to-one match with two series on either
// side for one group is an evaluation error, and a rule that errors never
// fires.
type promQL struct {
	tokens []string
	pos    int
	data   []sample
}

var promTokens = regexp.MustCompile(`\s*(==|!=|>=|<=|=~|[(){}\[\],<>=]|"(?:[^"\\]|\\.)*"|[A-Za-z_:][A-Za-z0-9_:]*|[0-9.]+[smhd]?)`)

func evalPromQL(expr string, data []sample) (out []sample, err error) {
	q := &promQL{data: data}
	rest := strings.TrimSpace(expr)
	for rest != "" {
		m := promTokens.FindStringSubmatchIndex(rest)
		if m == nil || m[0] != 0 {
			return nil, fmt.Errorf("cannot read %q", rest)
		}
		q.tokens = append(q.tokens, rest[m[2]:m[3]])
		rest = strings.TrimSpace(rest[m[1]:])
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%v", r)
		}
	}()
	out = q.orExpr()
	if q.pos != len(q.tokens) {
		return nil, fmt.Errorf("unexpected %q", q.tokens[q.pos])
	}
	return out, nil
}

func (q *promQL) peek() string {
	if q.pos < len(q.tokens) {
		return q.tokens[q.pos]
	}
	return ""
}

func (q *promQL) next() string {
	tok := q.peek()
	q.pos++
	return tok
}

func (q *promQL) expect(tok string) {
	if got := q.next(); got != tok {
		panic(fmt.Sprintf("want %q, got %q", tok, got))
	}
}

// labelList reads `(a, b)`.
func (q *promQL) labelList() []string {
	q.expect("(")
	var out []string
	for q.peek() != ")" {
		out = append(out, q.next())
		if q.peek() == "," {
			q.next()
		}
	}
	q.expect(")")
	return out
}

// matching is `on (...)` or `ignoring (...)` after a binary operator.
type matching struct {
	on     bool
	labels []string
}

func (q *promQL) matching() matching {
	switch q.peek() {
	case "on":
		q.next()
		return matching{on: true, labels: q.labelList()}
	case "ignoring":
		q.next()
		return matching{labels: q.labelList()}
	}
	return matching{}
}

func (m matching) signature(labels map[string]string) string {
	keys := slices.Clone(m.labels)
	if !m.on {
		keys = nil
		for k := range labels {
			if k != "__name__" && !slices.Contains(m.labels, k) {
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q,", k, labels[k])
	}
	return b.String()
}

func (q *promQL) orExpr() []sample {
	lhs := q.andExpr()
	for q.peek() == "or" {
		q.next()
		m := q.matching()
		rhs := q.andExpr()
		seen := map[string]bool{}
		for _, s := range lhs {
			seen[m.signature(s.labels)] = true
		}
		for _, s := range rhs {
			if !seen[m.signature(s.labels)] {
				lhs = append(lhs, s)
			}
		}
	}
	return lhs
}

func (q *promQL) andExpr() []sample {
	lhs := q.comparison()
	for q.peek() == "and" || q.peek() == "unless" {
		op := q.next()
		m := q.matching()
		rhs := q.comparison()
		in := map[string]bool{}
		for _, s := range rhs {
			in[m.signature(s.labels)] = true
		}
		var out []sample
		for _, s := range lhs {
			if in[m.signature(s.labels)] == (op == "and") {
				out = append(out, s)
			}
		}
		lhs = out
	}
	return lhs
}

func compare(op string, a, b float64) bool {
	switch op {
	case "==":
		return a == b
	case "!=":
		return a != b
	case "<":
		return a < b
	case ">":
		return a > b
	case "<=":
		return a <= b
	case ">=":
		return a >= b
	}
	panic("unknown operator " + op)
}

func (q *promQL) comparison() []sample {
	lhs, lhsScalar, lhsIsScalar := q.operand()
	op := q.peek()
	if !slices.Contains([]string{"==", "!=", "<", ">", "<=", ">="}, op) {
		if lhsIsScalar {
			panic("a scalar alone")
		}
		return lhs
	}
	q.next()
	boolMode := q.peek() == "bool"
	if boolMode {
		q.next()
	}
	m := q.matching()
	rhs, rhsScalar, rhsIsScalar := q.operand()
	result := func(s sample, ok bool, drop bool) (sample, bool) {
		out := sample{labels: map[string]string{}, value: s.value}
		for k, v := range s.labels {
			if !(drop && k == "__name__") {
				out.labels[k] = v
			}
		}
		if boolMode {
			out.value = map[bool]float64{true: 1, false: 0}[ok]
			delete(out.labels, "__name__")
			return out, true
		}
		return out, ok
	}
	var out []sample
	switch {
	case lhsIsScalar && rhsIsScalar:
		panic("comparing two scalars")
	case rhsIsScalar:
		for _, s := range lhs {
			if r, keep := result(s, compare(op, s.value, rhsScalar), false); keep {
				out = append(out, r)
			}
		}
	case lhsIsScalar:
		for _, s := range rhs {
			if r, keep := result(s, compare(op, lhsScalar, s.value), false); keep {
				out = append(out, r)
			}
		}
	default:
		// One-to-one vector matching, as Prometheus does it.
		right := map[string]sample{}
		for _, s := range rhs {
			sig := m.signature(s.labels)
			if _, dup := right[sig]; dup {
				panic(fmt.Sprintf("found duplicate series for the match group {%s} on the right hand-side of the operation; many-to-many matching not allowed", sig))
			}
			right[sig] = s
		}
		matched := map[string]bool{}
		for _, s := range lhs {
			sig := m.signature(s.labels)
			r, ok := right[sig]
			if !ok {
				continue
			}
			if matched[sig] {
				panic(fmt.Sprintf("multiple matches for labels {%s}: many-to-one matching must be explicit (group_left/group_right)", sig))
			}
			matched[sig] = true
			res, keep := result(s, compare(op, s.value, r.value), false)
			if !keep {
				continue
			}
			if m.on {
				kept := map[string]string{}
				for _, k := range m.labels {
					if v, ok := res.labels[k]; ok {
						kept[k] = v
					}
				}
				res.labels = kept
			}
			out = append(out, res)
		}
	}
	return out
}

// operand is a vector, or a number (isScalar).
func (q *promQL) operand() (vector []sample, scalar float64, isScalar bool) {
	tok := q.peek()
	if v, err := strconv.ParseFloat(tok, 64); err == nil {
		q.next()
		return nil, v, true
	}
	switch tok {
	case "(":
		q.next()
		out := q.orExpr()
		q.expect(")")
		return out, 0, false
	case "sum", "min", "max", "count":
		return q.aggregation(), 0, false
	case "increase", "rate":
		q.next()
		q.expect("(")
		out := q.selector()
		q.expect("[")
		q.next()
		q.expect("]")
		q.expect(")")
		for i := range out {
			delete(out[i].labels, "__name__")
		}
		return out, 0, false
	}
	return q.selector(), 0, false
}

func (q *promQL) aggregation() []sample {
	op := q.next()
	var grouping matching
	readGrouping := func() {
		switch q.peek() {
		case "by":
			q.next()
			grouping = matching{on: true, labels: q.labelList()}
		case "without":
			q.next()
			grouping = matching{labels: append(q.labelList(), "__name__")}
		}
	}
	readGrouping()
	q.expect("(")
	in := q.orExpr()
	q.expect(")")
	readGrouping()
	if !grouping.on && grouping.labels == nil {
		grouping = matching{on: true}
	}
	groups := map[string]*sample{}
	var order []string
	for _, s := range in {
		sig := grouping.signature(s.labels)
		g, ok := groups[sig]
		if !ok {
			g = &sample{labels: map[string]string{}, value: s.value}
			for k, v := range s.labels {
				if k != "__name__" && (grouping.on == slices.Contains(grouping.labels, k)) {
					g.labels[k] = v
				}
			}
			if op == "count" {
				g.value = 1
			}
			groups[sig] = g
			order = append(order, sig)
			continue
		}
		switch op {
		case "sum":
			g.value += s.value
		case "count":
			g.value++
		case "min":
			g.value = min(g.value, s.value)
		case "max":
			g.value = max(g.value, s.value)
		}
	}
	out := make([]sample, 0, len(order))
	for _, sig := range order {
		out = append(out, *groups[sig])
	}
	return out
}

// selector reads `name{a="x",b!="y"}` and returns the matching series.
func (q *promQL) selector() []sample {
	name := q.next()
	type matcher struct{ label, op, value string }
	var matchers []matcher
	if q.peek() == "{" {
		q.next()
		for q.peek() != "}" {
			label, op := q.next(), q.next()
			value, err := strconv.Unquote(q.next())
			if err != nil || (op != "=" && op != "!=") {
				panic(fmt.Sprintf("unsupported matcher %s%s", label, op))
			}
			matchers = append(matchers, matcher{label, op, value})
			if q.peek() == "," {
				q.next()
			}
		}
		q.expect("}")
	}
	var out []sample
next:
	for _, s := range q.data {
		if s.name() != name {
			continue
		}
		for _, m := range matchers {
			if (s.labels[m.label] == m.value) != (m.op == "=") {
				continue next
			}
		}
		c := sample{labels: map[string]string{}, value: s.value}
		for k, v := range s.labels {
			c.labels[k] = v
		}
		out = append(out, c)
	}
	return out
}

// TestPromQLSubset: the evaluator the alert tests use agrees with
// Prometheus on the cases they depend on.
func TestPromQLSubset(t *testing.T) {
	series := func(name string, value float64, kv ...string) sample {
		s := sample{labels: map[string]string{"__name__": name}, value: value}
		for i := 0; i < len(kv); i += 2 {
			s.labels[kv[i]] = kv[i+1]
		}
		return s
	}
	data := []sample{
		series("r", 3, "set", "a", "type", "desired", "instance", "1"),
		series("r", 1, "set", "a", "type", "available", "instance", "1"),
		series("r", 2, "set", "b", "type", "desired", "instance", "1"),
		series("r", 2, "set", "b", "type", "available", "instance", "1"),
		series("c", 0, "outcome", "completed", "instance", "1"),
		series("c", 4, "outcome", "list-failed", "instance", "1"),
	}
	tests := []struct {
		name, expr string
		want       []string // signatures of the result, sorted
		err        string
	}{
		{name: "one-to-one on", expr: `r{type="available"} < on (set) r{type="desired"}`, want: []string{`set="a",`}},
		{name: "by then compare", expr: `max by (set) (r{type="available"}) < on (set) max by (set) (r{type="desired"})`, want: []string{`set="a",`}},
		{name: "scalar", expr: `sum(c) > 3`, want: []string{``}},
		{name: "unless", expr: `sum without (outcome) (increase(c{outcome!="completed"}[1h])) > 0 unless sum without (outcome) (increase(c{outcome="completed"}[1h])) > 0`,
			want: []string{`instance="1",`}},
		{name: "duplicates on the right", expr: `r{type="available"} < on (set) r`, err: "duplicate series"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := evalPromQL(tt.expr, data)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			var got []string
			for _, s := range out {
				got = append(got, matching{}.signature(s.labels))
			}
			sort.Strings(got)
			assert.Equal(t, tt.want, got)
		})
	}
}
