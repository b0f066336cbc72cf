package eksmanaged

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestEveryEKSBoundFieldIsCheckedAgainstEKSsLimits: the CRD's schema is
// not the only boundary (the webhook's failurePolicy is Ignore, and a
// NodeClass stored under an older schema keeps its values), so the driver
// refuses, before any call, what EKS would refuse of the class's section,
// naming the field and the rule: labels (keys and values of 1 to 63
// characters, no reserved domain), taints (keys and values of at most 63,
// at most 50, a known effect), updateConfig (exactly one of maxUnavailable,
// 1 to 100, and maxUnavailablePercentage, 1 to 100), diskSize (1 to 16384
// GiB), capacityType, the launch template's name, and tags (keys of 1 to
// 128 characters outside aws: and nodeset.dev/, values of at most 256, at
// most 40).
func TestEveryEKSBoundFieldIsCheckedAgainstEKSsLimits(t *testing.T) {
	d := New(Options{Cluster: "e2e", Clients: func(context.Context, string, map[string][]byte) (API, error) {
		return API{}, errors.New("no call expected")
	}})
	valid := func() *nodesetv1alpha1.EKSManagedNodeGroup {
		return &nodesetv1alpha1.EKSManagedNodeGroup{ClusterName: "prod", Region: region,
			NodeRole: "arn:aws:iam::123456789012:role/node", Subnets: []string{"subnet-1"},
			Labels:   map[string]string{strings.Repeat("k", 63): strings.Repeat("v", 63)},
			Taints:   []nodesetv1alpha1.ManagedTaint{{Key: strings.Repeat("k", 63), Value: strings.Repeat("v", 63), Effect: "NO_EXECUTE"}},
			Tags:     map[string]string{strings.Repeat("k", 128): strings.Repeat("v", 256)},
			DiskSize: aws.Int32(16384), CapacityType: "SPOT",
			UpdateConfig: &nodesetv1alpha1.ManagedUpdateConfig{MaxUnavailable: aws.Int32(100)}}
	}
	class := func(s *nodesetv1alpha1.EKSManagedNodeGroup) drivers.Class {
		return drivers.Class{Spec: nodesetv1alpha1.NodeClassSpec{DriverSections: nodesetv1alpha1.DriverSections{EKSManagedNodeGroup: s}}}
	}
	require.NoError(t, d.Validate(context.Background(), class(valid())), "EKS's limits themselves are allowed")

	tags := map[string]string{}
	for i := range 41 {
		tags[fmt.Sprintf("t%d", i)] = "v"
	}
	for _, tt := range []struct {
		field, rule string
		mutate      func(*nodesetv1alpha1.EKSManagedNodeGroup)
	}{
		{"labels[" + strings.Repeat("k", 64) + "]", "longer than 63", func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.Labels = map[string]string{strings.Repeat("k", 64): "v"}
		}},
		{"labels[tier]", "values longer than 63", func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.Labels = map[string]string{"tier": strings.Repeat("v", 64)}
		}},
		{"labels[tier]", "empty value", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.Labels = map[string]string{"tier": ""} }},
		{"labels[]", "empty key", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.Labels = map[string]string{"": "v"} }},
		{"labels[node-role.kubernetes.io/web]", "kubernetes.io/", func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.Labels = map[string]string{"node-role.kubernetes.io/web": "v"}
		}},
		{"taints[0].key", "longer than 63", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.Taints[0].Key += "k" }},
		{"taints[0].value", "values longer than 63", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.Taints[0].Value += "v" }},
		{"taints[0].key", "is required", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.Taints[0].Key = "" }},
		{"taints[0].effect", "NO_SCHEDULE, NO_EXECUTE or PREFER_NO_SCHEDULE", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.Taints[0].Effect = "NoSchedule" }},
		{"taints", "at most 50 taints", func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			for i := range 50 {
				s.Taints = append(s.Taints, nodesetv1alpha1.ManagedTaint{Key: fmt.Sprintf("t%d", i), Effect: "NO_SCHEDULE"})
			}
		}},
		{"updateConfig.maxUnavailable", "1 to 100", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.UpdateConfig.MaxUnavailable = aws.Int32(101) }},
		{"updateConfig.maxUnavailable", "1 to 100", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.UpdateConfig.MaxUnavailable = aws.Int32(0) }},
		{"updateConfig.maxUnavailablePercentage", "1 to 100 percent", func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.UpdateConfig = &nodesetv1alpha1.ManagedUpdateConfig{MaxUnavailablePercentage: aws.Int32(101)}
		}},
		{"updateConfig", "exactly one", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.UpdateConfig.MaxUnavailablePercentage = aws.Int32(10) }},
		{"updateConfig", "exactly one", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.UpdateConfig = &nodesetv1alpha1.ManagedUpdateConfig{} }},
		{"diskSize", "1 to 16384 GiB", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.DiskSize = aws.Int32(16385) }},
		{"diskSize", "1 to 16384 GiB", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.DiskSize = aws.Int32(0) }},
		{"capacityType", "ON_DEMAND, SPOT or CAPACITY_BLOCK", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.CapacityType = "spot" }},
		{"launchTemplate.name", "3 to 128", func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.DiskSize = nil
			s.LaunchTemplate = &nodesetv1alpha1.LaunchTemplateReference{Name: "lt"}
		}},
		{"launchTemplate.name", "3 to 128", func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.DiskSize = nil
			s.LaunchTemplate = &nodesetv1alpha1.LaunchTemplateReference{Name: "my template"}
		}},
		{"launchTemplate", "exactly one of id and name", func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.DiskSize = nil
			s.LaunchTemplate = &nodesetv1alpha1.LaunchTemplateReference{}
		}},
		{"tags[" + strings.Repeat("k", 129) + "]", "at most 128", func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.Tags = map[string]string{strings.Repeat("k", 129): "v"}
		}},
		{"tags[team]", "at most 256", func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.Tags = map[string]string{"team": strings.Repeat("v", 257)}
		}},
		{"tags[AWS:team]", "aws: prefix is reserved", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.Tags = map[string]string{"AWS:team": "v"} }},
		{"tags", "at most 40", func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.Tags = tags }},
	} {
		s := valid()
		tt.mutate(s)
		err := d.Validate(context.Background(), class(s))
		require.ErrorIs(t, err, drivers.ErrInvalidConfiguration, "%s: %s", tt.field, tt.rule)
		assert.ErrorContains(t, err, "spec.eksManagedNodeGroup."+tt.field)
		assert.ErrorContains(t, err, tt.rule)
	}
}
