package eksmanaged

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"nodeset.dev/nodeset/drivers"
)

// cutName32 is how node groups were named before a name cut to EKS's 63
// characters ended in a hash of the UID: cut to 54, then 32 bits of a hash
// of cluster, namespace and name.
func cutName32(owner drivers.Owner) string {
	sum := sha256.Sum256([]byte(owner.Cluster + "/" + owner.Namespace + "/" + owner.Name))
	base := fmt.Sprintf("nodeset-%s-%s-%s", owner.Cluster, owner.Namespace, owner.Name)
	if len(base) > 54 {
		base = base[:54]
	}
	return base + "-" + hex.EncodeToString(sum[:])[:8]
}

// collidingOwners searches, as a tenant of namespace ml could, for a
// NodeSet name of its own whose node group name, cut to 63 characters, is
// that of a NodeSet of namespace ml-research: both cut to one text, and
// 32 bits of hash are a search of seconds. It returns the first pair whose
// cutName32 names are equal (found in well under 2^18 tries each).
func collidingOwners(t *testing.T) (attacker, victim drivers.Owner) {
	t.Helper()
	const tries = 1 << 18
	victims := make(map[string]drivers.Owner, tries)
	for i := range tries {
		v := drivers.Owner{Cluster: "e2e", Namespace: "ml-research", Name: fmt.Sprintf("training-pipeline-gpu-workers-%d", i),
			UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))}
		victims[cutName32(v)] = v
	}
	for j := range tries {
		a := drivers.Owner{Cluster: "e2e", Namespace: "ml", Name: fmt.Sprintf("research-training-pipeline-gpu-workers-x%d", j),
			UID: types.UID(fmt.Sprintf("11111111-0000-4000-8000-%012d", j))}
		if v, ok := victims[cutName32(a)]; ok {
			return a, v
		}
	}
	t.Fatal("no two names cut to one text share 32 bits of hash in 2^18 tries of each")
	return
}

// TestNoTenantCanSearchForAnotherTenantsNodeGroupName: the 63 characters
// of a node group name are a cut of "nodeset-<cluster>-<namespace>-<name>"
// and a hash; namespaces ml and ml-research cut to one text, so the hash
// is all that tells their node groups apart. Its 32 bits took a tenant of
// ml a search of moments to find a NodeSet name whose node group is the
// one a NodeSet of ml-research will have; made first, it left the other
// tenant's NodeSet with no node group for as long as it stood (the owner
// check refuses a node group of another's). A cut name ends in 64 bits of
// a hash that covers the UID, which no one knows before its NodeSet exists.
func TestNoTenantCanSearchForAnotherTenantsNodeGroupName(t *testing.T) {
	d := New(Options{Cluster: "e2e"})
	attacker, victim := collidingOwners(t)
	require.Len(t, d.GroupName(victim), 63, "the victim's name is cut to fit")
	assert.NotEqual(t, d.GroupName(attacker), d.GroupName(victim),
		"NodeSet %s/%s and NodeSet %s/%s share node group name %s", attacker.Namespace, attacker.Name, victim.Namespace, victim.Name, d.GroupName(victim))

	again := victim
	again.UID = "22222222-0000-4000-8000-000000000000"
	assert.NotEqual(t, d.GroupName(victim), d.GroupName(again),
		"a cut name must depend on the NodeSet's UID, or another tenant can compute it before the NodeSet exists")
	assert.Len(t, d.GroupName(again), 63)

	short := drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "web", UID: "uid-1"}
	assert.Equal(t, cutName32(short), d.GroupName(short), "a name that fits whole keeps the name it always had")
}

// TestATenantsNodeGroupNameTakenFirstLeavesItsOwnToCome: the whole path
// against the cloud. The tenant of ml makes its node group first under the
// name found by search; the NodeSet of ml-research still gets its own.
func TestATenantsNodeGroupNameTakenFirstLeavesItsOwnToCome(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver()
	class := w.class()
	attacker, victim := collidingOwners(t)
	_, err := d.EnsureGroup(ctx, drivers.Group{Name: d.GroupName(attacker), Owner: attacker, Class: class, Replicas: 1, MaxReplicas: 1, TemplateHash: "h1"})
	require.NoError(t, err)
	_, err = d.EnsureGroup(ctx, drivers.Group{Name: d.GroupName(victim), Owner: victim, Class: class, Replicas: 1, MaxReplicas: 1, TemplateHash: "h1"})
	require.NoError(t, err, "NodeSet %s/%s must get a node group of its own although NodeSet %s/%s came first", victim.Namespace, victim.Name,
		attacker.Namespace, attacker.Name)
	assert.Equal(t, string(victim.UID), nodegroup(t, w.api.EKS, d.GroupName(victim)).Tags["nodeset.dev/nodeset-uid"])
}

// TestANodeGroupMadeUnderItsFormerNameKeepsIt: a node group made before cut
// names covered the UID is found under the name its NodeSet recorded
// (status.group.name); a recorded name that is not the NodeSet's own former
// name (another's, made up) is never used.
func TestANodeGroupMadeUnderItsFormerNameKeepsIt(t *testing.T) {
	d := New(Options{Cluster: "e2e"})
	attacker, victim := collidingOwners(t)
	former := cutName32(victim)
	tests := []struct {
		name     string
		owner    drivers.Owner
		recorded string
		want     string
	}{
		{name: "nothing recorded", owner: victim, recorded: "", want: d.GroupName(victim)},
		{name: "its former name", owner: victim, recorded: former, want: former},
		{name: "its current name", owner: victim, recorded: d.GroupName(victim), want: d.GroupName(victim)},
		{name: "another's name", owner: victim, recorded: d.GroupName(attacker), want: d.GroupName(victim)},
		{name: "a made-up name", owner: victim, recorded: "nodeset-e2e-ml-research-other", want: d.GroupName(victim)},
		{name: "a whole name", owner: drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "web", UID: "u"}, recorded: "nodeset-e2e-team-a-web-00000000",
			want: cutName32(drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "web"})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, drivers.KeepGroupName(d, tc.owner, tc.recorded))
		})
	}
	// The attacker's own former name is the victim's former name: recorded
	// for the attacker, it is the attacker's group, made before the upgrade.
	assert.Equal(t, former, drivers.KeepGroupName(d, attacker, former))
}
