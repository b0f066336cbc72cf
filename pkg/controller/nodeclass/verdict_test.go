package nodeclass

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/simulated"
)

// cloudGroup is a group driver whose cloud check answers cloudErr.
type cloudGroup struct {
	group
	cloudErr error
}

func (g cloudGroup) ValidateCloud(context.Context, drivers.Class) error { return g.cloudErr }

func TestEveryClassGetsAVerdictInOneSync(t *testing.T) {
	for _, tt := range []struct {
		name       string
		cloudErr   error
		previous   *metav1.Condition
		wantStatus metav1.ConditionStatus
		wantReason string
		wantErr    bool
	}{
		{name: "the cloud refuses", cloudErr: drivers.InvalidConfiguration("spec.x.instanceType", "%q is not an EC2 instance type", "t9.huge"),
			wantStatus: metav1.ConditionFalse, wantReason: ReasonInvalidConfiguration},
		{name: "the cloud does not answer, never judged", cloudErr: errors.New("connection refused"),
			wantStatus: metav1.ConditionUnknown, wantReason: ReasonValidationFailed, wantErr: true},
		{name: "the cloud does not answer, a new generation", cloudErr: errors.New("connection refused"),
			previous:   &metav1.Condition{Type: nodesetv1alpha1.NodeClassValid, Status: metav1.ConditionTrue, Reason: ReasonValid, ObservedGeneration: 1},
			wantStatus: metav1.ConditionUnknown, wantReason: ReasonValidationFailed, wantErr: true},
		{name: "the cloud does not answer, this generation judged", cloudErr: errors.New("connection refused"),
			previous:   &metav1.Condition{Type: nodesetv1alpha1.NodeClassValid, Status: metav1.ConditionTrue, Reason: ReasonValid, ObservedGeneration: 2},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonValid, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			class := simClass("cloud-group")
			class.Generation = 2
			if tt.previous != nil {
				class.Status.Conditions = []metav1.Condition{*tt.previous}
			}
			f := newFixture(t, class)
			f.controller.registry["cloud-group"] = cloudGroup{group: group{Driver: simulated.New(nil)}, cloudErr: tt.cloudErr}
			err := f.controller.sync(context.Background(), "sim")
			if tt.wantErr {
				require.Error(t, err, "retried")
			} else {
				require.NoError(t, err)
			}
			got, getErr := f.client.NodesetV1alpha1().NodeClasses().Get(context.Background(), "sim", metav1.GetOptions{})
			require.NoError(t, getErr)
			valid := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeClassValid)
			require.NotNil(t, valid, "a verdict after one sync")
			assert.Equal(t, tt.wantStatus, valid.Status)
			assert.Equal(t, tt.wantReason, valid.Reason)
			if tt.cloudErr != nil && tt.wantStatus != metav1.ConditionTrue {
				assert.Contains(t, valid.Message, tt.cloudErr.Error())
			}
		})
	}
}

func TestMissingSecretNamesTheFieldAndItsCreationRequeues(t *testing.T) {
	class := simClass("cloud-group")
	class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "aws-credentials"}
	f := newFixture(t, class)
	f.controller.credentials = func(context.Context, *nodesetv1alpha1.NodeClass) (map[string][]byte, error) {
		return nil, errors.New(`secrets "aws-credentials" not found`)
	}
	require.Error(t, f.controller.sync(context.Background(), "sim"))
	got, err := f.client.NodesetV1alpha1().NodeClasses().Get(context.Background(), "sim", metav1.GetOptions{})
	require.NoError(t, err)
	valid := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeClassValid)
	require.NotNil(t, valid)
	assert.Equal(t, metav1.ConditionFalse, valid.Status)
	assert.Contains(t, valid.Message, "spec.credentialsSecretRef: ")

	f.controller.EnqueueClassesOfSecret("nodeset-system", "other")
	assert.Zero(t, f.controller.queue.Len())
	f.controller.EnqueueClassesOfSecret("nodeset-system", "aws-credentials")
	assert.Equal(t, 1, f.controller.queue.Len(), "the class naming the Secret is validated again")
}
