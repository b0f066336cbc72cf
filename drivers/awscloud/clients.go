// Package awscloud is the AWS plumbing the eks-asg and eks-managed drivers
// share: API clients and their configuration, error classification, owner
// tags, network and instance-type lookups, and Auto Scaling group instances.
package awscloud

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// AutoScaling is the part of the Auto Scaling API the drivers use.
type AutoScaling interface {
	CreateAutoScalingGroup(context.Context, *autoscaling.CreateAutoScalingGroupInput, ...func(*autoscaling.Options)) (*autoscaling.CreateAutoScalingGroupOutput, error)
	UpdateAutoScalingGroup(context.Context, *autoscaling.UpdateAutoScalingGroupInput, ...func(*autoscaling.Options)) (*autoscaling.UpdateAutoScalingGroupOutput, error)
	DescribeAutoScalingGroups(context.Context, *autoscaling.DescribeAutoScalingGroupsInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error)
	SetDesiredCapacity(context.Context, *autoscaling.SetDesiredCapacityInput, ...func(*autoscaling.Options)) (*autoscaling.SetDesiredCapacityOutput, error)
	TerminateInstanceInAutoScalingGroup(context.Context, *autoscaling.TerminateInstanceInAutoScalingGroupInput, ...func(*autoscaling.Options)) (*autoscaling.TerminateInstanceInAutoScalingGroupOutput, error)
	DescribeAutoScalingInstances(context.Context, *autoscaling.DescribeAutoScalingInstancesInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingInstancesOutput, error)
	DeleteAutoScalingGroup(context.Context, *autoscaling.DeleteAutoScalingGroupInput, ...func(*autoscaling.Options)) (*autoscaling.DeleteAutoScalingGroupOutput, error)
	SuspendProcesses(context.Context, *autoscaling.SuspendProcessesInput, ...func(*autoscaling.Options)) (*autoscaling.SuspendProcessesOutput, error)
	CreateOrUpdateTags(context.Context, *autoscaling.CreateOrUpdateTagsInput, ...func(*autoscaling.Options)) (*autoscaling.CreateOrUpdateTagsOutput, error)
	DeleteTags(context.Context, *autoscaling.DeleteTagsInput, ...func(*autoscaling.Options)) (*autoscaling.DeleteTagsOutput, error)
	DescribeScalingActivities(context.Context, *autoscaling.DescribeScalingActivitiesInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeScalingActivitiesOutput, error)
	SetInstanceProtection(context.Context, *autoscaling.SetInstanceProtectionInput, ...func(*autoscaling.Options)) (*autoscaling.SetInstanceProtectionOutput, error)
}

// EC2 is the part of the EC2 API the drivers use.
type EC2 interface {
	CreateLaunchTemplate(context.Context, *ec2.CreateLaunchTemplateInput, ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateOutput, error)
	CreateLaunchTemplateVersion(context.Context, *ec2.CreateLaunchTemplateVersionInput, ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateVersionOutput, error)
	DescribeLaunchTemplateVersions(context.Context, *ec2.DescribeLaunchTemplateVersionsInput, ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplateVersionsOutput, error)
	DescribeLaunchTemplates(context.Context, *ec2.DescribeLaunchTemplatesInput, ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplatesOutput, error)
	DeleteLaunchTemplate(context.Context, *ec2.DeleteLaunchTemplateInput, ...func(*ec2.Options)) (*ec2.DeleteLaunchTemplateOutput, error)
	DescribeInstances(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	TerminateInstances(context.Context, *ec2.TerminateInstancesInput, ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
	DescribeInstanceTypes(context.Context, *ec2.DescribeInstanceTypesInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
	DescribeImages(context.Context, *ec2.DescribeImagesInput, ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
	DescribeSubnets(context.Context, *ec2.DescribeSubnetsInput, ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error)
	DescribeSecurityGroups(context.Context, *ec2.DescribeSecurityGroupsInput, ...func(*ec2.Options)) (*ec2.DescribeSecurityGroupsOutput, error)
}

// Clients gives the Auto Scaling and EC2 clients for a region and a class's
// credentials.
type Clients func(ctx context.Context, region string, credentials map[string][]byte) (AutoScaling, EC2, error)

// SDKClients makes real API clients sending every call to endpoint (all
// of AWS when empty).
func SDKClients(endpoint string) Clients { return NewSDKClients(SDKConfig{Endpoint: endpoint}) }

// NewSDKClients makes real API clients, one pair per region and set of
// credentials, kept for the life of the process.
func NewSDKClients(c SDKConfig) Clients { return ClientsFrom(NewAWSConfigs(c)) }

// ClientsFrom makes API clients from shared configurations (NewAWSConfigs),
// one pair per configuration.
func ClientsFrom(configs func(ctx context.Context, region string, creds map[string][]byte) (*aws.Config, error)) Clients {
	type pair struct {
		asg *autoscaling.Client
		ec2 *ec2.Client
	}
	var (
		mu    sync.Mutex
		cache = map[*aws.Config]pair{}
	)
	return func(ctx context.Context, region string, creds map[string][]byte) (AutoScaling, EC2, error) {
		cfg, err := configs(ctx, region, creds)
		if err != nil {
			return nil, nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		p, ok := cache[cfg]
		if !ok {
			p = pair{autoscaling.NewFromConfig(*cfg), ec2.NewFromConfig(*cfg)}
			cache[cfg] = p
		}
		return p.asg, p.ec2, nil
	}
}
