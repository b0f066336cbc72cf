package eksasg

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// ClusterInfo is what the user data needs to join a node to its cluster.
type ClusterInfo struct {
	Endpoint, CertificateAuthority, ServiceCIDR string
}

// ClusterLookup returns the ClusterInfo of an EKS cluster.
type ClusterLookup func(ctx context.Context, region string, credentials map[string][]byte, cluster string) (ClusterInfo, error)

// NewClusterLookup looks EKS clusters up with DescribeCluster, through the
// shared configurations of awscloud.NewAWSConfigs.
func NewClusterLookup(configs func(ctx context.Context, region string, creds map[string][]byte) (*aws.Config, error)) ClusterLookup {
	return func(ctx context.Context, region string, creds map[string][]byte, cluster string) (ClusterInfo, error) {
		cfg, err := configs(ctx, region, creds)
		if err != nil {
			return ClusterInfo{}, err
		}
		out, err := eks.NewFromConfig(*cfg).DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(cluster)})
		if awscloud.IsCode(err, "ResourceNotFoundException") {
			return ClusterInfo{}, drivers.InvalidConfiguration("spec.eksAutoscalingGroup.clusterName", "EKS cluster %s does not exist in %s", cluster, region)
		}
		if err != nil {
			return ClusterInfo{}, awscloud.Classify("describing EKS cluster "+cluster, err)
		}
		c := out.Cluster
		info := ClusterInfo{Endpoint: aws.ToString(c.Endpoint)}
		if c.CertificateAuthority != nil {
			info.CertificateAuthority = aws.ToString(c.CertificateAuthority.Data)
		}
		if n := c.KubernetesNetworkConfig; n != nil {
			info.ServiceCIDR = aws.ToString(n.ServiceIpv4Cidr)
		}
		if info.Endpoint == "" || info.CertificateAuthority == "" {
			return ClusterInfo{}, fmt.Errorf("EKS cluster %s has no endpoint or CA yet (status %s)", cluster, c.Status)
		}
		return info, nil
	}
}

// withCluster returns s with the bootstrap endpoint, CA and service CIDR it
// leaves out looked up from EKS (once per cluster).
func (d *Driver) withCluster(ctx context.Context, credentials map[string][]byte, s *nodesetv1alpha1.EKSAutoscalingGroup) (*nodesetv1alpha1.EKSAutoscalingGroup, error) {
	b := s.Bootstrap
	if d.opts.Clusters == nil || (b != nil && b.APIServerEndpoint != "" && b.CertificateAuthority != "") {
		return s, nil
	}
	key := s.Region + "/" + s.ClusterName
	d.mu.Lock()
	info, ok := d.clusters[key]
	d.mu.Unlock()
	if !ok {
		var err error
		if info, err = d.opts.Clusters(ctx, s.Region, credentials, s.ClusterName); err != nil {
			return nil, err
		}
		d.mu.Lock()
		d.clusters[key] = info
		d.mu.Unlock()
	}
	out := *s
	filled := nodesetv1alpha1.EKSBootstrap{}
	if b != nil {
		filled = *b
	}
	if filled.APIServerEndpoint == "" {
		filled.APIServerEndpoint = info.Endpoint
	}
	if filled.CertificateAuthority == "" {
		filled.CertificateAuthority = info.CertificateAuthority
	}
	if filled.ServiceCIDR == "" {
		filled.ServiceCIDR = info.ServiceCIDR
	}
	out.Bootstrap = &filled
	return &out, nil
}
