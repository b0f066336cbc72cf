package eksmanaged

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
)

// TestEKSErrorsAreClassedAsTheAPIReferenceMeansThem: each error of the EKS
// API is classed as its reference means it. InvalidRequestException is
// "invalid given the state of the cluster" (a node group not ACTIVE, an
// operation in progress), which passes: no configuration error, which the
// node controller would record as a refused template. ClientException, a
// client action (permissions, an identifier not valid), needs a human.
func TestEKSErrorsAreClassedAsTheAPIReferenceMeansThem(t *testing.T) {
	classes := map[error]string{drivers.ErrInvalidConfiguration: "configuration", drivers.ErrOutOfCapacity: "capacity", drivers.ErrThrottled: "throttled"}
	for code, want := range map[string]string{
		"InvalidRequestException":        "transient",
		"ServerException":                "transient",
		"ClientException":                "configuration",
		"InvalidParameterException":      "configuration",
		"AccessDeniedException":          "configuration",
		"ResourceNotFoundException":      "configuration",
		"ResourceLimitExceededException": "capacity",
		"ThrottlingException":            "throttled",
	} {
		err := classify("updating node group ng", &smithy.GenericAPIError{Code: code, Message: "said"})
		got := "transient"
		for class, name := range classes {
			if errors.Is(err, class) {
				got = name
			}
		}
		assert.Equal(t, want, got, code)
		assert.Contains(t, err.Error(), code, "the code is said")
	}
}

// TestAnUpdateEKSRefusesForTheNodeGroupsStateIsTriedAgain: EKS answers
// UpdateNodegroupConfig with InvalidRequestException when the node group
// does not take updates in its state at that moment (changed since it was
// described). The change is no refused configuration: the error is a
// transient one, and the change is made once EKS takes it.
func TestAnUpdateEKSRefusesForTheNodeGroupsStateIsTriedAgain(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 2, MaxReplicas: 5,
		Labels: map[string]string{"tier": "web"}}
	fake.invalidRequest = "Nodegroup cannot be updated as it is currently not in Active State"
	_, err := d.EnsureGroup(ctx, group)
	require.Error(t, err)
	assert.NotErrorIs(t, err, drivers.ErrInvalidConfiguration, "no refusal of the NodeSet's template")
	assert.Contains(t, err.Error(), "not in Active State")

	fake.invalidRequest = ""
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, "web", fake.groups["ng"].Labels["tier"])
}
