package nodeclass

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/simulated"
	"nodeset.dev/nodeset/pkg/component"
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
			f := newFixture(t, secondGeneration(tt.previous))
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

// panickingGroup is a group driver that panics where a driver with a bug
// may: in Validate, or in its cloud check, quoting the credentials it got.
type panickingGroup struct {
	group
	inValidate bool
}

func (g panickingGroup) Validate(_ context.Context, class drivers.Class) error {
	if g.inValidate {
		panic("driver bug: no machine type for class " + class.Name)
	}
	return nil
}

func (g panickingGroup) ValidateCloud(_ context.Context, class drivers.Class) error {
	panic("driver bug: cannot use key " + string(class.Credentials["secretAccessKey"]))
}

// TestADriverThatPanicsIsContainedAndTold: a driver's panic while judging a
// class fails that class's sync alone, retried with backoff: a class with
// no verdict for its generation is Valid=Unknown, reason
// ValidationPanicked, with the panic's message (without the credentials);
// a verdict of the same generation is kept; the worker goes on to the other
// classes.
func TestADriverThatPanicsIsContainedAndTold(t *testing.T) {
	const planted = "planted-secret-value-0123456789"
	for _, tt := range []struct {
		name        string
		inValidate  bool
		previous    *metav1.Condition
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		{name: "in Validate, never judged", inValidate: true,
			wantStatus: metav1.ConditionUnknown, wantReason: ReasonValidationPanicked,
			wantMessage: "driver cloud-group panicked validating NodeClass sim: driver bug: no machine type for class sim"},
		{name: "in the cloud check, with the credentials, a new generation",
			previous:   &metav1.Condition{Type: nodesetv1alpha1.NodeClassValid, Status: metav1.ConditionTrue, Reason: ReasonValid, ObservedGeneration: 1},
			wantStatus: metav1.ConditionUnknown, wantReason: ReasonValidationPanicked, wantMessage: "driver bug: cannot use key "},
		{name: "this generation judged", inValidate: true,
			previous:   &metav1.Condition{Type: nodesetv1alpha1.NodeClassValid, Status: metav1.ConditionTrue, Reason: ReasonValid, ObservedGeneration: 2},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonValid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, secondGeneration(tt.previous))
			f.controller.registry["cloud-group"] = panickingGroup{group: group{Driver: simulated.New(nil)}, inValidate: tt.inValidate}
			f.controller.credentials = func(context.Context, *nodesetv1alpha1.NodeClass) (map[string][]byte, error) {
				return map[string][]byte{"secretAccessKey": []byte(planted)}, nil
			}
			var err error
			require.NotPanics(t, func() { err = f.controller.sync(context.Background(), "sim") })
			require.Error(t, err, "retried with backoff")
			assert.Contains(t, err.Error(), "panicked")
			assert.NotContains(t, err.Error(), planted)
			got, getErr := f.client.NodesetV1alpha1().NodeClasses().Get(context.Background(), "sim", metav1.GetOptions{})
			require.NoError(t, getErr)
			valid := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeClassValid)
			require.NotNil(t, valid)
			assert.Equal(t, tt.wantStatus, valid.Status)
			assert.Equal(t, tt.wantReason, valid.Reason)
			assert.Contains(t, valid.Message, tt.wantMessage)
			assert.NotContains(t, valid.Message, planted)
		})
	}

	t.Run("on the controller's workers", func(t *testing.T) {
		f := newFixture(t, simClass("cloud-group"))
		f.controller.registry["cloud-group"] = panickingGroup{group: group{Driver: simulated.New(nil)}, inValidate: true}
		fine := simClass(nodesetv1alpha1.DriverSimulated)
		fine.Name = "fine"
		_, err := f.client.NodesetV1alpha1().NodeClasses().Create(context.Background(), fine, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, f.classes.Add(fine))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f.controller.queue.Add("sim")
		f.controller.queue.Add("fine")
		component.StartWorkers(ctx, f.controller.queue, 2, "nodeclass", f.controller.sync)
		require.Eventually(t, func() bool {
			got, err := f.client.NodesetV1alpha1().NodeClasses().Get(ctx, "fine", metav1.GetOptions{})
			return err == nil && meta.IsStatusConditionTrue(got.Status.Conditions, nodesetv1alpha1.NodeClassValid) &&
				f.controller.queue.NumRequeues("sim") >= 2
		}, 10*time.Second, 10*time.Millisecond, "the panicking class retried with backoff, the other judged")
	})
}

// capacityPanics is the simulated driver panicking in Capacity.
type capacityPanics struct{ *simulated.Driver }

func (capacityPanics) Capacity(context.Context, drivers.Class) (drivers.Capacity, error) {
	panic("driver bug: no capacity table")
}

// TestADriverPanickingOverASetsCapacityFailsThatSetAlone: the template
// capacity of a NodeSet whose driver panics is an error of that set,
// retried with backoff.
func TestADriverPanickingOverASetsCapacityFailsThatSetAlone(t *testing.T) {
	class := validated(simClass(nodesetv1alpha1.DriverSimulated))
	set, _ := overridingSet(class)
	f := newFixture(t, class, set)
	f.controller.registry[nodesetv1alpha1.DriverSimulated] = capacityPanics{simulated.New(nil)}
	var err error
	require.NotPanics(t, func() { err = f.controller.syncSetCapacity(context.Background(), "team-a/big") })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "panicked: driver bug: no capacity table")
}

// TestAVerdictNeverShowsACredential: a driver whose cloud check quotes a
// credential of the class (as a cloud's error may echo a key) has it
// removed from the Valid condition and from the error that is logged.
func TestAVerdictNeverShowsACredential(t *testing.T) {
	const planted = "planted-secret-value-9876543210"
	for _, tt := range []struct {
		name       string
		cloudErr   error
		wantStatus metav1.ConditionStatus
	}{
		{name: "refused", cloudErr: drivers.InvalidConfiguration("spec.credentialsSecretRef", "the key %s is not valid", planted),
			wantStatus: metav1.ConditionFalse},
		{name: "no answer", cloudErr: errors.New("dial tcp: key " + planted + ": connection refused"), wantStatus: metav1.ConditionUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, simClass("cloud-group"))
			f.controller.registry["cloud-group"] = cloudGroup{group: group{Driver: simulated.New(nil)}, cloudErr: tt.cloudErr}
			f.controller.credentials = func(context.Context, *nodesetv1alpha1.NodeClass) (map[string][]byte, error) {
				return map[string][]byte{"secretAccessKey": []byte(planted)}, nil
			}
			if err := f.controller.sync(context.Background(), "sim"); err != nil {
				assert.NotContains(t, err.Error(), planted)
			}
			got, err := f.client.NodesetV1alpha1().NodeClasses().Get(context.Background(), "sim", metav1.GetOptions{})
			require.NoError(t, err)
			valid := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeClassValid)
			require.NotNil(t, valid)
			assert.Equal(t, tt.wantStatus, valid.Status)
			assert.NotContains(t, valid.Message, planted)
		})
	}
}

// secondGeneration is a class of driver cloud-group at generation 2, with
// the Valid condition previous when it is not nil.
func secondGeneration(previous *metav1.Condition) *nodesetv1alpha1.NodeClass {
	class := simClass("cloud-group")
	class.Generation = 2
	if previous != nil {
		class.Status.Conditions = []metav1.Condition{*previous}
	}
	return class
}

// validateGroup is a group driver whose Validate answers validateErr.
type validateGroup struct {
	group
	validateErr error
}

func (g validateGroup) Validate(context.Context, drivers.Class) error { return g.validateErr }

// TestADriverThatCannotAnswerNowGivesNoVerdict: a driver whose Validate
// could not ask (a plugin that timed out or crashed listing its options,
// a throttled call) has said nothing about the class. Taken as its
// verdict, the class would be Valid=False, its NodeSets frozen, until
// something else made the class be looked at again. It is Unknown and
// retried; a refusal is still the verdict.
func TestADriverThatCannotAnswerNowGivesNoVerdict(t *testing.T) {
	for _, tt := range []struct {
		name       string
		err        error
		wantStatus metav1.ConditionStatus
		wantReason string
		wantErr    bool
	}{
		{"timed out", fmt.Errorf("asking plugin docker-machine-driver-x for its flags: %w", context.DeadlineExceeded),
			metav1.ConditionUnknown, ReasonValidationFailed, true},
		{"unavailable", fmt.Errorf("asking plugin docker-machine-driver-x for its flags: unexpected EOF: %w", drivers.ErrUnavailable),
			metav1.ConditionUnknown, ReasonValidationFailed, true},
		{"throttled", fmt.Errorf("describing: %w", drivers.ErrThrottled), metav1.ConditionUnknown, ReasonValidationFailed, true},
		{"refused", drivers.InvalidConfiguration("spec.x.y", "is required"), metav1.ConditionFalse, ReasonInvalidConfiguration, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, secondGeneration(nil))
			f.controller.registry["cloud-group"] = validateGroup{group: group{Driver: simulated.New(nil)}, validateErr: tt.err}
			err := f.controller.sync(context.Background(), "sim")
			if tt.wantErr {
				require.Error(t, err, "retried")
			} else {
				require.NoError(t, err)
			}
			got, getErr := f.client.NodesetV1alpha1().NodeClasses().Get(context.Background(), "sim", metav1.GetOptions{})
			require.NoError(t, getErr)
			valid := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeClassValid)
			require.NotNil(t, valid)
			assert.Equal(t, tt.wantStatus, valid.Status)
			assert.Equal(t, tt.wantReason, valid.Reason)
		})
	}
}

// TestAVerdictOfAnyLengthIsStored: a driver's or a cloud's error may be of
// any length (a proxy's HTML error page, a plugin's whole output). The Valid
// condition keeps its beginning, within the schema's maxLength of a
// condition's message (32768), which would otherwise refuse the status
// update and leave the class with no verdict.
func TestAVerdictOfAnyLengthIsStored(t *testing.T) {
	page := strings.Repeat("<p>upstream error</p>", 5000) // about 100 kB
	for _, tt := range []struct {
		name       string
		err        error
		wantStatus metav1.ConditionStatus
	}{
		{"refused", drivers.InvalidConfiguration("spec.parameters.image", "%s", page), metav1.ConditionFalse},
		{"could not answer", fmt.Errorf("asking the plugin: %s: %w", page, drivers.ErrUnavailable), metav1.ConditionUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, secondGeneration(nil))
			f.controller.registry["cloud-group"] = validateGroup{group: group{Driver: simulated.New(nil)}, validateErr: tt.err}
			_ = f.controller.sync(context.Background(), "sim")
			got, err := f.client.NodesetV1alpha1().NodeClasses().Get(context.Background(), "sim", metav1.GetOptions{})
			require.NoError(t, err)
			valid := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeClassValid)
			require.NotNil(t, valid)
			assert.Equal(t, tt.wantStatus, valid.Status)
			assert.LessOrEqual(t, len(valid.Message), 32768, "within the schema's maxLength")
			assert.Contains(t, valid.Message, "upstream error", "its beginning is told")
			assert.True(t, strings.HasSuffix(valid.Message, "(cut)"), "and that it is cut")
		})
	}
}
