package nodeset

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
)

// TestAPanicFailsTheSetsSyncAlone: a panic in a NodeSet's sync, in the
// sync itself or in one of the goroutines that write its Nodes, fails that
// sync with an error (retried with backoff) and is told on the set, instead
// of taking down the process that serves every tenant's NodeSets.
func TestAPanicFailsTheSetsSyncAlone(t *testing.T) {
	t.Run("in a Node write", func(t *testing.T) {
		f := newFixture(t, validClass("sim"), newSet(3))
		f.kube.PrependReactor("create", "nodes", func(core.Action) (bool, runtime.Object, error) {
			panic("a Node it did not expect")
		})
		err := f.sync()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "a Node write panicked: a Node it did not expect")
	})
	t.Run("in the sync", func(t *testing.T) {
		f := newFixture(t, validClass("sim"), newSet(3))
		f.nodesets.PrependReactor("update", "nodesets", func(core.Action) (bool, runtime.Object, error) {
			panic("a NodeSet it did not expect")
		})
		err := f.sync()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "sync of NodeSet team-a/web panicked: a NodeSet it did not expect")
		var events []string
		for len(f.recorder.Events) > 0 {
			events = append(events, <-f.recorder.Events)
		}
		assert.True(t, strings.Contains(strings.Join(events, "\n"), "Warning SyncPanicked sync of NodeSet team-a/web panicked"), "%v", events)
	})
}
