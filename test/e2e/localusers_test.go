package e2e

import (
	"cmp"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/test/framework"
)

// TestLocalUsersBoundAsServiceAccounts: on the local control plane (make
// demo) the controllers run as token users, and hack/demo/local-users.yaml
// binds each user to every role deploy/rbac binds its ServiceAccount in a
// cluster: no fewer (a missing one, such as the credentials Role, makes the
// demo differ from an install) and no more.
func TestLocalUsersBoundAsServiceAccounts(t *testing.T) {
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	// A binding, as "<namespace>/<kind>/<role>" for subject.
	type grant struct{ subject, binding string }
	grants := func(files []string, subjectKind string) []grant {
		var out []grant
		for _, file := range files {
			objs, err := framework.ReadObjects(file)
			require.NoError(t, err, file)
			for _, obj := range objs {
				if obj.GetKind() != "RoleBinding" && obj.GetKind() != "ClusterRoleBinding" {
					continue
				}
				ref := obj.Object["roleRef"].(map[string]any)
				subjects, _ := obj.Object["subjects"].([]any)
				for _, s := range subjects {
					subject := s.(map[string]any)
					if subject["kind"] != subjectKind {
						continue
					}
					if subjectKind == "ServiceAccount" && subject["namespace"] != "nodeset-system" {
						continue
					}
					out = append(out, grant{subject["name"].(string), obj.GetNamespace() + "/" + ref["kind"].(string) + "/" + ref["name"].(string)})
				}
			}
		}
		slices.SortFunc(out, func(a, b grant) int {
			return cmp.Or(strings.Compare(a.subject, b.subject), strings.Compare(a.binding, b.binding))
		})
		return out
	}
	rbac, err := filepath.Glob(filepath.Join(root, "deploy", "rbac", "*-*.yaml"))
	require.NoError(t, err)
	install := grants(rbac, "ServiceAccount")
	require.NotEmpty(t, install, "deploy/rbac binds the controllers' ServiceAccounts")
	local := grants([]string{filepath.Join(root, "hack", "demo", "local-users.yaml")}, "User")
	assert.Equal(t, install, local, "hack/demo/local-users.yaml binds the local users as deploy/rbac binds the ServiceAccounts")
}
