package eksmanaged

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// longKey is a valid Kubernetes label and taint key (a prefix of up to 253
// characters) longer than the 63 characters EKS allows a node group's.
var longKey = strings.Repeat("a", 50) + ".example.com/gpu"

// TestLabelsAndTaintsBeyondEKSsLimitsStayOffTheNodeGroup: EKS refuses a
// node group label with an empty value or a key longer than 63 characters
// (prefix included), and a taint key longer than 63, though Kubernetes
// allows each on a Node. In the class's section they are its verdict; of
// the Nodes' labels and taints, they go on the Nodes nodeset makes, not to
// EKS, which would refuse the whole node group.
func TestLabelsAndTaintsBeyondEKSsLimitsStayOffTheNodeGroup(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver()
	for field, mutate := range map[string]func(*nodesetv1alpha1.EKSManagedNodeGroup){
		"spec.eksManagedNodeGroup.labels[example.com/gpu]": func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.Labels = map[string]string{"example.com/gpu": ""}
		},
		"spec.eksManagedNodeGroup.labels[" + longKey + "]": func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.Labels = map[string]string{longKey: "yes"}
		},
		"spec.eksManagedNodeGroup.taints[1].key": func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.Taints = append(s.Taints, nodesetv1alpha1.ManagedTaint{Key: longKey, Effect: "NO_SCHEDULE"})
		},
	} {
		class := w.class()
		section := *class.Spec.EKSManagedNodeGroup
		mutate(&section)
		class.Spec.EKSManagedNodeGroup = &section
		err := d.Validate(ctx, class)
		assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration, field)
		assert.ErrorContains(t, err, field)
	}

	owner := drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "gpu", UID: "uid-gpu"}
	name := d.GroupName(owner)
	_, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: w.class(), Replicas: 1, MaxReplicas: 2, TemplateHash: "h1",
		Labels: map[string]string{"tier": "web", "example.com/gpu": "", longKey: "yes"},
		Taints: []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}, {Key: longKey, Effect: corev1.TaintEffectNoExecute}}})
	require.NoError(t, err)
	ng := nodegroup(t, w.api.EKS, name)
	assert.Equal(t, map[string]string{"pool": "general", "tier": "web"}, ng.Labels)
	assert.Equal(t, []string{"dedicated=gpu:NO_SCHEDULE", "pool=general:PREFER_NO_SCHEDULE"}, taintStrings(ng.Taints))
}

// TestMoreTaintsThanEKSAllowsAreRefusedBeforeAnyCall: EKS allows a node
// group 50 taints. The class's section may have 50, and the NodeSet's Node
// taints add to them: more is a clear verdict before any call, not EKS's
// refusal of the node group.
func TestMoreTaintsThanEKSAllowsAreRefusedBeforeAnyCall(t *testing.T) {
	d := New(Options{Cluster: "e2e", Clients: func(context.Context, string, map[string][]byte) (API, error) {
		return API{}, errors.New("no call expected")
	}})
	section := &nodesetv1alpha1.EKSManagedNodeGroup{ClusterName: "prod", Region: region,
		NodeRole: "arn:aws:iam::123456789012:role/node", Subnets: []string{"subnet-1"}}
	for i := range 50 {
		section.Taints = append(section.Taints, nodesetv1alpha1.ManagedTaint{Key: fmt.Sprintf("class-%d", i), Effect: "NO_SCHEDULE"})
	}
	class := drivers.Class{Spec: nodesetv1alpha1.NodeClassSpec{DriverSections: nodesetv1alpha1.DriverSections{EKSManagedNodeGroup: section}}}
	require.NoError(t, d.Validate(context.Background(), class))
	_, err := d.EnsureGroup(context.Background(), drivers.Group{Name: "g", Class: class, Replicas: 1,
		Taints: []corev1.Taint{{Key: "class-0", Effect: corev1.TaintEffectNoSchedule}, {Key: "set", Effect: corev1.TaintEffectNoSchedule}}})
	assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.ErrorContains(t, err, "at most 50 taints")
	assert.ErrorContains(t, err, "make 51")
}
