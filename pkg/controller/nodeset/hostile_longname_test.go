package nodeset

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestRefusedCreateOfALongNamedSetSaysTheSameEachTime: a NodeSet name of
// 58 to 63 characters (valid, the schema allows 63) is cut to 57 in its
// Nodes' names; the refused Node's random name must still be hidden, or
// every retry rewrites the set's status and makes a new Event.
func TestRefusedCreateOfALongNamedSetSaysTheSameEachTime(t *testing.T) {
	long := strings.Repeat("a", 63)
	set := newSet(1)
	set.Name = long
	f := newFixture(t, validClass("sim"), set)
	f.kube.PrependReactor("create", "nodes", func(a core.Action) (bool, runtime.Object, error) {
		name := a.(core.CreateAction).GetObject().(*corev1.Node).Name
		return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
			Reason: metav1.StatusReasonInvalid, Message: fmt.Sprintf("Node %q is invalid: metadata.labels: Invalid value", name)}}
	})
	var messages []string
	for range 2 {
		err := f.controller.syncNodeSet(context.Background(), "team-a/"+long)
		require.Error(t, err)
		got, err := f.nodesets.NodesetV1alpha1().NodeSets("team-a").Get(context.Background(), long, metav1.GetOptions{})
		require.NoError(t, err)
		failure := findCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetReplicaFailure)
		require.NotNil(t, failure)
		messages = append(messages, failure.Message)
	}
	assert.Equal(t, messages[0], messages[1], "the ReplicaFailure message changes on every retry")
	assert.Contains(t, messages[0], "<random>")
}
