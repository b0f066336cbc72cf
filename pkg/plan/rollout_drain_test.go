package plan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestAllUnavailableDrainsEveryOutdatedNodeButSurgesByMaxSurge: with
// maxUnavailable 100% every outdated Node goes at once, as every old pod
// of a Deployment does, but Nodes being drained keep their machines and
// count toward maxSurge: new Nodes come maxSurge at a time until the
// drains are over (a Deployment makes all its new pods at once).
func TestAllUnavailableDrainsEveryOutdatedNodeButSurgesByMaxSurge(t *testing.T) {
	set := rollingSet(4, intstr.FromInt32(1), intstr.FromString("100%"))
	f := &fleet{}
	for range 4 {
		f.add("old", true)
	}
	p := Decide(set, "new", f.nodes, testNow)
	assert.Len(t, p.Remove, 4, "every outdated Node goes at once")
	assert.Equal(t, 1, p.Create, "4 Nodes exist: maxSurge 1 allows one more")
	f.apply(p, "new")
	assert.Zero(t, Decide(set, "new", f.nodes, testNow).Create, "4 Nodes draining and 1 new: no room until a drain is over")
	f.nodes = f.nodes[2:] // two drains over
	assert.Equal(t, 2, Decide(set, "new", f.nodes, testNow).Create)
}
