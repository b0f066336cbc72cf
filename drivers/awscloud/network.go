package awscloud

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"nodeset.dev/nodeset/drivers"
)

// ValidateNetwork checks that the subnets and security groups exist; the
// fields name them in the messages.
func ValidateNetwork(ctx context.Context, ec2c EC2, region, subnetsField string, subnets []string, groupsField string, securityGroups []string) error {
	if len(subnets) > 0 {
		out, err := ec2c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: subnets})
		if err != nil {
			return Classify(subnetsField+" "+strings.Join(subnets, ","), err)
		}
		if len(out.Subnets) != len(subnets) {
			return drivers.InvalidConfiguration(subnetsField, "%d of %d subnets exist in %s", len(out.Subnets), len(subnets), region)
		}
	}
	if len(securityGroups) > 0 {
		out, err := ec2c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: securityGroups})
		if err != nil {
			return Classify(groupsField+" "+strings.Join(securityGroups, ","), err)
		}
		if len(out.SecurityGroups) != len(securityGroups) {
			return drivers.InvalidConfiguration(groupsField, "%d of %d security groups exist in %s", len(out.SecurityGroups), len(securityGroups), region)
		}
	}
	return nil
}
