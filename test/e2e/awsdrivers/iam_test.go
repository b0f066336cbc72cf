package awsdrivers

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/test/framework"
)

// iamStatement is one statement of an IAM policy in the docs.
type iamStatement struct {
	Sid       string
	Effect    string
	Action    any // a string or a list
	Condition map[string]map[string]any
}

func (s iamStatement) actions() []string {
	switch a := s.Action.(type) {
	case string:
		return []string{a}
	case []any:
		var out []string
		for _, v := range a {
			out = append(out, v.(string))
		}
		return out
	}
	return nil
}

var jsonFence = regexp.MustCompile("(?ms)^ *```json *\n(.*?)^ *```")

// docStatements are the Allow statements of every JSON block of a driver's
// doc that is an IAM policy or a statement to add to one.
func docStatements(t *testing.T, doc string) []iamStatement {
	t.Helper()
	data, err := os.ReadFile(doc)
	require.NoError(t, err)
	var out []iamStatement
	// Blocks in list items are indented; JSON does not mind.
	for _, m := range jsonFence.FindAllStringSubmatch(string(data), -1) {
		var policy struct{ Statement []iamStatement }
		if json.Unmarshal([]byte(m[1]), &policy) == nil && len(policy.Statement) > 0 {
			out = append(out, policy.Statement...)
			continue
		}
		var one iamStatement
		if json.Unmarshal([]byte(m[1]), &one) == nil && one.Action != nil {
			out = append(out, one)
		}
	}
	return slices.DeleteFunc(out, func(s iamStatement) bool { return s.Effect != "Allow" })
}

// sdkCalls are the AWS operations (service:Operation, as IAM names them)
// whose inputs the non-test Go files of dirs build: every call a driver
// makes goes through one.
func sdkCalls(t *testing.T, dirs ...string) []string {
	t.Helper()
	services := map[string]string{"autoscaling": "autoscaling", "ec2": "ec2", "eks": "eks", "sqs": "sqs"}
	seen := map[string]bool{}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
			require.NoError(t, err)
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok {
					return true
				}
				sel, ok := lit.Type.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, ok := sel.X.(*ast.Ident)
				if !ok || services[pkg.Name] == "" || !strings.HasSuffix(sel.Sel.Name, "Input") {
					return true
				}
				seen[services[pkg.Name]+":"+strings.TrimSuffix(sel.Sel.Name, "Input")] = true
				return true
			})
		}
	}
	out := make([]string, 0, len(seen))
	for call := range seen {
		out = append(out, call)
	}
	slices.Sort(out)
	return out
}

// iamAction is the IAM action that authorizes an operation.
func iamAction(call string) string {
	if call == "sqs:DeleteMessageBatch" {
		return "sqs:DeleteMessage" // batch deletes are authorized as single ones
	}
	return call
}

// TestIAMPoliciesAllowEveryCallOfTheDriver: the least-privilege policies
// of docs/drivers/eks-asg.md and eks-managed.md allow every AWS operation
// the driver (and the AWS plumbing it shares, drivers/awscloud) makes. A
// call the policy lacks is refused with AccessDenied in production only:
// moto authorizes everything. And the tags the driver writes on a group it
// made already (nodeset.dev/former-regions) carry no nodeset.dev/cluster
// tag, so a statement that allows CreateOrUpdateTags only with that tag in
// the request refuses them: one must allow it on the group's own tag.
func TestIAMPoliciesAllowEveryCallOfTheDriver(t *testing.T) {
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	for doc, dirs := range map[string][]string{
		"eks-asg.md":     {"drivers/eksasg", "drivers/awscloud"},
		"eks-managed.md": {"drivers/eksmanaged", "drivers/awscloud"},
	} {
		statements := docStatements(t, filepath.Join(root, "docs/drivers", doc))
		require.NotEmpty(t, statements, doc)
		var dirPaths []string
		for _, d := range dirs {
			dirPaths = append(dirPaths, filepath.Join(root, d))
		}
		calls := sdkCalls(t, dirPaths...)
		require.Contains(t, calls, "autoscaling:DescribeAutoScalingGroups", "the scan finds the calls")
		for _, call := range calls {
			allowed := slices.ContainsFunc(statements, func(s iamStatement) bool { return slices.Contains(s.actions(), iamAction(call)) })
			assert.True(t, allowed, "%s: the IAM policy does not allow %s, which the driver calls", doc, iamAction(call))
		}
	}

	onOwnTag := slices.ContainsFunc(docStatements(t, filepath.Join(root, "docs/drivers/eks-asg.md")), func(s iamStatement) bool {
		_, requestOnly := s.Condition["StringEquals"]["aws:RequestTag/nodeset.dev/cluster"]
		return slices.Contains(s.actions(), "autoscaling:CreateOrUpdateTags") && !requestOnly
	})
	assert.True(t, onOwnTag, "eks-asg.md: autoscaling:CreateOrUpdateTags is allowed only with nodeset.dev/cluster in the request, "+
		"which the driver's tag of a former region on an existing group does not carry")
}
