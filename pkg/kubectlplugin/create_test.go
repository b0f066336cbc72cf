package kubectlplugin

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestLocalRefusals: input no NodeSet can have is refused before anything is
// sent or printed, the same way by every command, with exit status 1 (an
// error from Execute). No API server answers at the address given.
func TestLocalRefusals(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "create with negative replicas", args: []string{"create", "web", "--class", "c", "--replicas", "-1"},
			want: "--replicas must be 0 or more"},
		{name: "create with negative replicas, printed only", args: []string{"create", "web", "--class", "c", "--replicas", "-1",
			"--dry-run=client", "-o", "yaml"}, want: "--replicas must be 0 or more"},
		{name: "scale with negative replicas", args: []string{"scale", "web", "--replicas", "-1"},
			want: "--replicas must be 0 or more"},
		{name: "create with replicas not a number", args: []string{"create", "web", "--class", "c", "--replicas", "abc"},
			want: `invalid argument "abc" for "--replicas"`},
		{name: "scale without replicas", args: []string{"scale", "web"}, want: `required flag(s) "replicas" not set`},
		{name: "create without a class", args: []string{"create", "web"}, want: `required flag(s) "class" not set`},
		{name: "create with a label without a value", args: []string{"create", "web", "--class", "c", "--label", "tier", "--dry-run=client"},
			want: `--label "tier": want key=value`},
		{name: "status with a negative number of events", args: []string{"status", "web", "--events=-1"},
			want: "--events must be 0 or more"},
		{name: "rollout status with a negative timeout", args: []string{"rollout", "status", "web", "--timeout=-1s"},
			want: "--timeout must be 0 (wait for ever) or more, not -1s"},
		{name: "an unknown output", args: []string{"create", "web", "--class", "c", "--dry-run=client", "-o", "wide"},
			want: `--output must be "yaml" or "json"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := Command(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
			cmd.SetArgs(append([]string{"--server=https://127.0.0.1:1", "--namespace=team-a"}, tc.args...))
			err := cmd.ExecuteContext(context.Background())
			require.Error(t, err, "printed:\n%s", out.String())
			assert.Contains(t, ErrorText(err), tc.want)
			assert.Empty(t, out.String(), "nothing is printed")
		})
	}
}

// TestCreateClientDryRunPrintsTheManifest: kubectl nodeset create
// --dry-run=client -o yaml|json prints the NodeSet it would send, ready to
// keep in Git and apply: no status (a set of no nodes it would claim to
// be) and none of the type's empty fields (strategy: {}), which an applier
// would otherwise own. No API server answers at the address given.
func TestCreateClientDryRunPrintsTheManifest(t *testing.T) {
	args := []string{"create", "web", "--class", "sim-small", "--replicas", "2", "--label", "tier=web",
		"--taint", "dedicated=web:NoSchedule", "--dry-run=client"}
	tests := []struct {
		output string
		want   string
	}{
		{output: "yaml", want: `apiVersion: nodeset.dev/v1alpha1
kind: NodeSet
metadata:
  name: web
  namespace: team-a
spec:
  nodeClassName: sim-small
  replicas: 2
  template:
    labels:
      tier: web
    taints:
    - effect: NoSchedule
      key: dedicated
      value: web
`},
		{output: "json", want: `{
    "apiVersion": "nodeset.dev/v1alpha1",
    "kind": "NodeSet",
    "metadata": {
        "name": "web",
        "namespace": "team-a"
    },
    "spec": {
        "nodeClassName": "sim-small",
        "replicas": 2,
        "template": {
            "labels": {
                "tier": "web"
            },
            "taints": [
                {
                    "effect": "NoSchedule",
                    "key": "dedicated",
                    "value": "web"
                }
            ]
        }
    }
}
`},
	}
	for _, tc := range tests {
		t.Run(tc.output, func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := Command(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
			cmd.SetArgs(append([]string{"--server=https://127.0.0.1:1", "--namespace=team-a"}, append(args, "-o", tc.output)...))
			require.NoError(t, cmd.ExecuteContext(context.Background()))
			assert.Equal(t, tc.want, out.String())
		})
	}
}
