package eksasg

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestWhatANodeSetOverridesIsCheckedBeforeAnyCall: the class is checked
// when it is written (Validate), but a NodeSet's overrides (tags, when the
// class lists them in tenantOverrides) reach the driver only in the
// effective configuration EnsureGroup gets. What Validate refuses there is
// refused before any AWS call, naming the field, as for the class: a tag
// AWS refuses on every resource, or one of the driver's own keys, which
// would otherwise reach the group and, propagated, its instances.
func TestWhatANodeSetOverridesIsCheckedBeforeAnyCall(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	for key, field := range map[string]string{
		"aws:cloudformation:stack-name": "spec.eksAutoscalingGroup.tags[aws:cloudformation:stack-name]",
		awscloud.TagTemplateHash:        "spec.eksAutoscalingGroup.tags[" + awscloud.TagTemplateHash + "]",
	} {
		t.Run(key, func(t *testing.T) {
			d := w.driver("prod")
			class := w.class()
			require.NoError(t, d.Validate(ctx, class), "the class itself is fine")
			section := *class.Spec.EKSAutoscalingGroup
			section.Tags = map[string]string{"team": "a", key: "tenant"} // the class's tags and the NodeSet's
			class.Spec.EKSAutoscalingGroup = &section
			name := GroupName("prod", "team-a", "tagged")
			_, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "tagged", UID: "uid-1"},
				Class: class, Replicas: 1, MaxReplicas: 1, TemplateHash: "h1"})
			require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
			assert.ErrorContains(t, err, field)
			_, err = awscloud.FindGroup(ctx, w.asg, name)
			assert.True(t, errors.Is(err, drivers.ErrNotFound), "no group is made: %v", err)
		})
	}

	// The class's 40 tags and a NodeSet's 40 more: AWS takes 50 on the
	// group, its launch template and its instances, nodeset's own among
	// them.
	d := w.driver("prod")
	class := w.class()
	section := *class.Spec.EKSAutoscalingGroup
	section.Tags = map[string]string{}
	for i := range 80 {
		section.Tags[fmt.Sprintf("tag-%02d", i)] = "v"
	}
	class.Spec.EKSAutoscalingGroup = &section
	name := GroupName("prod", "team-a", "many")
	_, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "many", UID: "uid-1"},
		Class: class, Replicas: 1, MaxReplicas: 1, TemplateHash: "h1"})
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.ErrorContains(t, err, "spec.eksAutoscalingGroup.tags: has 80 tags")
	_, err = awscloud.FindGroup(ctx, w.asg, name)
	assert.True(t, errors.Is(err, drivers.ErrNotFound), "no group is made: %v", err)
}
