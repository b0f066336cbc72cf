package awscloud

import (
	"errors"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"

	"nodeset.dev/nodeset/drivers"
)

// knownRegions are the regions the SDK release in go.mod has endpoints for.
// A region not listed here may be newer than the release; it is refused only
// when its API does not answer either.
var knownRegions = []string{
	"af-south-1", "ap-east-1", "ap-east-2", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1", "ap-south-2",
	"ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4", "ap-southeast-5", "ap-southeast-6", "ap-southeast-7",
	"ca-central-1", "ca-west-1", "cn-north-1", "cn-northwest-1", "eu-central-1", "eu-central-2", "eu-isoe-west-1", "eu-north-1",
	"eu-south-1", "eu-south-2", "eu-west-1", "eu-west-2", "eu-west-3", "eusc-de-east-1", "il-central-1", "me-central-1",
	"me-south-1", "mx-central-1", "sa-east-1", "us-east-1", "us-east-2", "us-gov-east-1", "us-gov-west-1", "us-iso-east-1",
	"us-iso-west-1", "us-isob-east-1", "us-isob-west-1", "us-isof-east-1", "us-isof-south-1", "us-west-1", "us-west-2",
}

// KnownRegion reports whether region is one the SDK knows.
func KnownRegion(region string) bool { return slices.Contains(knownRegions, region) }

// RegionError is the verdict on the first call made in a region that
// failed with err: an invalid configuration of field when the region's API
// cannot be found (no DNS name) or when the region is not a known one and
// its API did not answer as AWS does; nil when err says nothing about the
// region (AWS answered with an error of its own).
func RegionError(field, region string, err error) error {
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return drivers.InvalidConfiguration(field, "%q is not an AWS region: its API has no DNS name", region)
	}
	var apiErr smithy.APIError
	if KnownRegion(region) || (errors.As(err, &apiErr) && apiErr.ErrorCode() != "" && apiErr.ErrorFault() != smithy.FaultServer) {
		return nil
	}
	return drivers.InvalidConfiguration(field, "%q is not an AWS region this node controller knows, and its API did not answer", region)
}

// zoneRegionRE is the region part of a zone name: us-east-1 of us-east-1a,
// of the Local Zone us-west-2-lax-1a's us-west-2, of the Wavelength Zone
// us-east-1-wl1-bos-wlz-1's us-east-1.
var zoneRegionRE = regexp.MustCompile(`^[a-z]+(-[a-z]+)+-[0-9]+`)

// InstanceRegion is the region of the instance of an aws:///<zone>/<id>
// providerID, from its zone; fallback when the providerID names no zone.
// An instance stays in the region it was launched in whatever its class
// says now (a class's region may be changed under a running group).
func InstanceRegion(providerID, fallback string) string {
	rest, ok := strings.CutPrefix(providerID, "aws:///")
	if !ok {
		return fallback
	}
	zone, _, _ := strings.Cut(rest, "/")
	if region := zoneRegionRE.FindString(zone); region != "" {
		return region
	}
	return fallback
}

// InstanceLabels are the labels of an instance's Node that AWS's cloud
// controller manager would have set (it sets them only on Nodes it
// initializes, and nodeset makes the Node itself): its instance type, zone
// and region, and the EBS CSI driver's zone.
func InstanceLabels(zone, instanceType string) map[string]string {
	labels := map[string]string{}
	if instanceType != "" {
		labels[corev1.LabelInstanceTypeStable] = instanceType
	}
	if zone != "" {
		labels[corev1.LabelTopologyZone] = zone
		labels[LabelEBSCSIZone] = zone
		if region := zoneRegionRE.FindString(zone); region != "" {
			labels[corev1.LabelTopologyRegion] = region
		}
	}
	return labels
}
