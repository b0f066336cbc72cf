package eksmanaged

import (
	"context"
	"errors"

	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// A managed node group is an Auto Scaling group underneath, and EKS has no
// standby of its own: an operator puts one of its instances on standby
// with EnterStandby on that group, to look at it and put it back with
// ExitStandby. Auto Scaling neither health-checks it nor picks it on
// scale-in, and it does not count toward the desired capacity, which
// EnterStandby lowers and EKS reports as the node group's desired size.
// nodeset keeps it, as eks-asg does: its Node stays and counts as one of
// the NodeSet's replicas, and the node group is not raised for it, which
// would launch a replacement.

// standbyCount is how many instances of the node group's Auto Scaling
// group are on standby; 0 for a node group without one yet.
func standbyCount(ctx context.Context, api API, ng *ekstypes.Nodegroup) (int32, error) {
	asg := autoScalingGroup(ng)
	if asg == "" {
		return 0, nil
	}
	g, err := awscloud.FindGroup(ctx, api.AutoScaling, asg)
	if errors.Is(err, drivers.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return int32(len(awscloud.OnStandby(g))), nil
}
