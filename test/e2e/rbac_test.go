package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"nodeset.dev/nodeset/test/framework"
)

// TestShippedControllerRBACIsLeastPrivilege applies deploy/rbac to the real
// API server and asks it (SubjectAccessReviews, as `kubectl auth can-i
// --as=system:serviceaccount:nodeset-system:<controller>` does) what each
// controller's ServiceAccount may do: everything its code does, and none of
// what it never does. Leases above all: the node controller writes node
// Leases in kube-node-lease (simulated kubelets) and its leader-election and
// driver-claim Leases in nodeset-system, so it must not reach
// kube-controller-manager's and kube-scheduler's leader Leases in
// kube-system, or any tenant's.
func TestShippedControllerRBACIsLeastPrivilege(t *testing.T) {
	cp := framework.Shared(t)
	ctx := context.Background()
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	ensureNamespace(t, "nodeset-system")
	require.NoError(t, framework.Apply(ctx, cp.AdminConfig(), filepath.Join(root, "deploy", "rbac")))

	type access struct {
		ns, group, resource, subresource, verb string
		allowed                                bool
		name                                   string // the object's, or any
	}
	may := func(ns, group, resource, subresource string, verbs ...string) []access {
		var out []access
		for _, v := range verbs {
			out = append(out, access{ns: ns, group: group, resource: resource, subresource: subresource, verb: v, allowed: true})
		}
		return out
	}
	mayNot := func(ns, group, resource, subresource string, verbs ...string) []access {
		out := may(ns, group, resource, subresource, verbs...)
		for i := range out {
			out[i].allowed = false
		}
		return out
	}
	named := func(name string, list []access) []access {
		for i := range list {
			list[i].name = name
		}
		return list
	}
	join := func(lists ...[]access) []access {
		var out []access
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	const coordination, nodeset, admission = "coordination.k8s.io", "nodeset.dev", "admissionregistration.k8s.io"
	tests := []struct {
		serviceAccount string
		checks         []access
	}{
		{serviceAccount: "node-controller", checks: join(
			// Leases: the simulated kubelets' node Leases; leader election
			// and the driver claims nodeset-driver-<driver>.
			may("kube-node-lease", coordination, "leases", "", "get", "create", "update", "delete"),
			may("nodeset-system", coordination, "leases", "", "get", "create", "update"),
			mayNot("kube-system", coordination, "leases", "", "get", "create", "update", "patch", "delete"),
			mayNot("team-a", coordination, "leases", "", "get", "create", "update", "delete"),
			mayNot("", coordination, "leases", "", "list", "watch"),
			mayNot("kube-node-lease", coordination, "leases", "", "list", "watch", "patch"),
			mayNot("nodeset-system", coordination, "leases", "", "delete", "patch"),
			// What it does with Nodes, pods and NodeSets.
			may("", "", "nodes", "", "get", "list", "watch", "create", "update", "patch", "delete"),
			may("", "", "nodes", "status", "patch"),
			mayNot("", "", "nodes", "status", "update"),
			may("team-a", "", "pods", "", "get", "list", "watch", "delete"),
			may("team-a", "", "pods", "eviction", "create"),
			may("", "", "namespaces", "", "get", "create"),
			may("", nodeset, "nodeclasses", "", "get", "list", "watch"),
			may("", nodeset, "nodeclasses", "status", "update"),
			mayNot("", nodeset, "nodeclasses", "status", "patch"),
			may("team-a", nodeset, "nodesets", "", "get", "list", "watch", "patch"),
			mayNot("team-a", nodeset, "nodesets", "", "update"),
			may("team-a", nodeset, "nodesets", "status", "update", "patch"),
			may("team-a", "", "events", "", "create", "patch"),
			// Its drain evicts through the Eviction API, which judges
			// PodDisruptionBudgets itself; it reads no workloads.
			mayNot("team-a", "policy", "poddisruptionbudgets", "", "get", "list", "watch"),
			mayNot("team-a", "apps", "daemonsets", "", "get"),
			mayNot("team-a", "apps", "replicasets", "", "get"),
			mayNot("team-a", "apps", "statefulsets", "", "get"),
			// Events go through the core API, by create and patch only.
			mayNot("team-a", "", "events", "", "update"),
			mayNot("team-a", "events.k8s.io", "events", "", "create", "patch", "update"),
			// Secrets: the credentials in nodeset-system, bootstrap tokens
			// made and deleted by name in kube-system.
			may("nodeset-system", "", "secrets", "", "get", "list", "watch", "create", "update", "delete"),
			may("kube-system", "", "secrets", "", "create", "delete"),
			mayNot("kube-system", "", "secrets", "", "get", "list"),
			mayNot("team-a", "", "secrets", "", "get", "list"),
			// Whether the kubelet-node-claims policy guarded a lone Node:
			// that policy and its binding, by name, read only.
			named("kubelet-node-claims.nodeset.dev", may("", admission, "validatingadmissionpolicies", "", "get")),
			named("kubelet-node-claims.nodeset.dev", may("", admission, "validatingadmissionpolicybindings", "", "get")),
			named("kubelet-node-claims.nodeset.dev", mayNot("", admission, "validatingadmissionpolicies", "", "update", "patch", "delete")),
			named("dedicated-tenancy.nodeset.dev", mayNot("", admission, "validatingadmissionpolicies", "", "get")),
			mayNot("", admission, "validatingadmissionpolicies", "", "list", "watch"),
		)},
		{serviceAccount: "nodeset-controller", checks: join(
			may("nodeset-system", coordination, "leases", "", "get", "list", "watch", "create", "update"),
			mayNot("kube-system", coordination, "leases", "", "get", "create", "update"),
			mayNot("kube-node-lease", coordination, "leases", "", "create", "update"),
			mayNot("", coordination, "leases", "", "list"),
			may("team-a", nodeset, "nodesets", "", "get", "list", "watch", "patch"),
			mayNot("team-a", nodeset, "nodesets", "", "update", "create", "delete"),
			may("team-a", nodeset, "nodesets", "status", "update"),
			mayNot("team-a", nodeset, "nodesets", "status", "patch"),
			may("", nodeset, "nodeclasses", "", "get", "list", "watch", "patch"),
			mayNot("", nodeset, "nodeclasses", "", "update", "delete"),
			may("", "", "nodes", "", "get", "list", "watch", "create", "delete"),
			// It makes and deletes Node objects; labels, taints and
			// finalizers of existing Nodes are the node controller's.
			mayNot("", "", "nodes", "", "patch", "update"),
			may("", "", "namespaces", "", "get", "list", "watch"),
			may("team-a", "", "events", "", "create", "patch"),
			mayNot("team-a", "", "events", "", "update"),
			mayNot("team-a", "events.k8s.io", "events", "", "create"),
			mayNot("nodeset-system", "", "secrets", "", "get", "list"),
		)},
	}
	kube := kubeClient(t)
	for _, tc := range tests {
		t.Run(tc.serviceAccount, func(t *testing.T) {
			user := "system:serviceaccount:nodeset-system:" + tc.serviceAccount
			groups := []string{"system:serviceaccounts", "system:serviceaccounts:nodeset-system", "system:authenticated"}
			// The authorizer sees new rules through its informers: wait
			// until it answers as the shipped RBAC says, and name each
			// answer of the last whole round that still differs when it
			// does not.
			var wrong []string
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				var differ []string
				for _, c := range tc.checks {
					review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
						Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
							ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: c.ns, Verb: c.verb,
								Group: c.group, Resource: c.resource, Subresource: c.subresource, Name: c.name}}}, metav1.CreateOptions{})
					if err != nil {
						return false, err
					}
					if review.Status.Allowed != c.allowed {
						what := strings.Trim(c.group+"/"+c.resource+"/"+c.subresource, "/")
						if c.name != "" {
							what += " " + c.name
						}
						differ = append(differ, fmt.Sprintf("%s %s in %q: allowed=%v, want %v", c.verb, what, c.ns, review.Status.Allowed, c.allowed))
					}
				}
				wrong = differ
				return len(differ) == 0, nil
			})
			require.NoError(t, err, "%s:\n%s", user, strings.Join(wrong, "\n"))
		})
	}
}
