package eksasg

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// partialDeletes is an SQS queue whose DeleteMessageBatch fails the
// entries of the receipts in failed with their answer, and deletes the
// others.
type partialDeletes struct {
	failed  map[string]sqstypes.BatchResultErrorEntry
	deleted []string
}

func (q *partialDeletes) ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return &sqs.ReceiveMessageOutput{}, nil
}

func (q *partialDeletes) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		if f, ok := q.failed[aws.ToString(e.ReceiptHandle)]; ok {
			f.Id = e.Id
			out.Failed = append(out.Failed, f)
			continue
		}
		q.deleted = append(q.deleted, aws.ToString(e.ReceiptHandle))
		out.Successful = append(out.Successful, sqstypes.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func (q *partialDeletes) ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

// TestAnExpiredReceiptIsNoDeleteError: SQS answers a receipt handle whose
// visibility timeout ran out (a handling that took longer, a message
// received again meanwhile) with InvalidParameterValue, "The receipt
// handle has expired", in the batch's failed entries. Its message comes
// again and is handled again, so, as an invalid receipt, it is no error;
// a failure of another kind is one.
func TestAnExpiredReceiptIsNoDeleteError(t *testing.T) {
	ctx := context.Background()
	expired := sqstypes.BatchResultErrorEntry{Code: aws.String("InvalidParameterValue"), SenderFault: true,
		Message: aws.String("Value r-2 for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.")}
	invalid := sqstypes.BatchResultErrorEntry{Code: aws.String("ReceiptHandleIsInvalid"), SenderFault: true,
		Message: aws.String("The input receipt handle r-3 is not a valid receipt handle.")}
	internal := sqstypes.BatchResultErrorEntry{Code: aws.String("InternalError"), SenderFault: false, Message: aws.String("We encountered an internal error.")}
	for _, tc := range []struct {
		name    string
		failed  map[string]sqstypes.BatchResultErrorEntry
		wantErr bool
	}{
		{name: "expired and invalid receipts", failed: map[string]sqstypes.BatchResultErrorEntry{"r-2": expired, "r-3": invalid}},
		{name: "an internal error", failed: map[string]sqstypes.BatchResultErrorEntry{"r-2": internal}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &partialDeletes{failed: tc.failed}
			d := New(Options{Cluster: "prod", Queues: func(context.Context, string, map[string][]byte) (Queues, error) { return q, nil }})
			class := drivers.Class{Name: "spot", Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverEKSASG,
				DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Region: region,
					Interruptions: &nodesetv1alpha1.EKSInterruptions{QueueURL: "https://sqs." + region + ".amazonaws.com/111122223333/nodeset-interruptions"}}}}}
			err := d.AckInterruptions(ctx, class, []string{"r-1", "r-2", "r-3", "r-4"})
			if tc.wantErr {
				assert.ErrorContains(t, err, "InternalError")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []string{"r-1", "r-4"}, q.deleted)
		})
	}
}
