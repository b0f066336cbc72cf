package awscloud

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"k8s.io/apimachinery/pkg/types"

	"nodeset.dev/nodeset/drivers"
)

// Tags the drivers put on every group, node group, launch template and
// instance: the owning cluster and NodeSet, and the template hash.
const (
	TagCluster      = "nodeset.dev/cluster"
	TagNamespace    = "nodeset.dev/nodeset-namespace"
	TagNodeSet      = "nodeset.dev/nodeset"
	TagNodeSetUID   = "nodeset.dev/nodeset-uid"
	TagTemplateHash = "nodeset.dev/template-hash"
	// TagFormerRegions, on a NodeSet's group (or node group), lists the
	// regions, space-separated, where the NodeSet's group of an earlier
	// region of its class may still be: recorded when an instance there is
	// terminated, and removed once that group is gone.
	TagFormerRegions = "nodeset.dev/former-regions"
)

// OwnerFromTags is the NodeSet that Auto Scaling group tags name.
func OwnerFromTags(tags []asgtypes.TagDescription) drivers.Owner {
	byKey := make(map[string]string, len(tags))
	for _, t := range tags {
		byKey[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return OwnerFromTagMap(byKey)
}

// OwnerFromTagMap is the NodeSet that owner tags, by key, name.
func OwnerFromTagMap(tags map[string]string) drivers.Owner {
	return drivers.Owner{Cluster: tags[TagCluster], Namespace: tags[TagNamespace], Name: tags[TagNodeSet],
		UID: types.UID(tags[TagNodeSetUID])}
}

// CheckOwner refuses a group whose owner tags (have) name another cluster,
// another NodeSet or another UID of the NodeSet than want, or no owner at
// all. A group's name comes from the cluster, namespace and name alone, so
// the name the controller chose can be another's group: a NodeSet made
// again under its old name (the orphan collection deletes the old UID's
// group with whatever runs in it), two names cut to one prefix whose hashes
// collide, a group made by hand. Acting on it would resize it, give it
// another launch template and report its instances as want's. The error
// names the other owner only when it is of want's own namespace
// (Owner.NamedTo): want's tenant reads it.
func CheckOwner(kind, name string, have, want drivers.Owner) error {
	if have.Matches(want) {
		return nil
	}
	if have.Cluster == "" || have.Namespace == "" || have.Name == "" {
		return fmt.Errorf("%s %s exists but nodeset did not make it (it has no %s, %s and %s tags): it is left alone, and NodeSet %s/%s gets no group while it exists",
			kind, name, TagCluster, TagNamespace, TagNodeSet, want.Namespace, want.Name)
	}
	return fmt.Errorf("%s %s belongs to %s, not to %s: it is left alone "+
		"(once its own NodeSet is gone, the orphan collection deletes it)",
		kind, name, have.NamedTo(want), want.NamedTo(want))
}

// MaxTags is how many tags a class (with its NodeSet's) may add: AWS allows
// 50 on a group, node group, launch template or instance, and the drivers
// put up to 10 of their own beside them.
const MaxTags = 40

// ValidateTags refuses the tags AWS would refuse on every group, launch
// template, node group or instance the class makes: more than MaxTags, a
// key with the aws: prefix (reserved for AWS, in any case), a key under
// nodeset.dev/ (the driver's own tags), an empty key, a key longer than
// 128 characters or a value longer than 256. field is the map's path.
func ValidateTags(field string, tags map[string]string) error {
	if len(tags) > MaxTags {
		return drivers.InvalidConfiguration(field, "has %d tags, and at most %d fit beside nodeset's own within the 50 AWS allows on a resource", len(tags), MaxTags)
	}
	for _, key := range slices.Sorted(maps.Keys(tags)) {
		switch keyField := field + "[" + key + "]"; {
		case key == "":
			return drivers.InvalidConfiguration(field, "a tag key cannot be empty")
		case strings.HasPrefix(strings.ToLower(key), "aws:"):
			return drivers.InvalidConfiguration(keyField, "the aws: prefix is reserved for AWS")
		case strings.HasPrefix(strings.ToLower(key), "nodeset.dev/"):
			// Ownership, the template hash, former regions: what the
			// driver reads back to decide what is whose.
			return drivers.InvalidConfiguration(keyField, "keys under nodeset.dev/ are the driver's own")
		case utf8.RuneCountInString(key) > 128:
			return drivers.InvalidConfiguration(keyField, "a tag key has at most 128 characters")
		case utf8.RuneCountInString(tags[key]) > 256:
			return drivers.InvalidConfiguration(keyField, "a tag value has at most 256 characters")
		}
	}
	return nil
}

// GroupTag is the value of an Auto Scaling group's tag key, "" without it.
func GroupTag(g *asgtypes.AutoScalingGroup, key string) string {
	for _, t := range g.Tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// FormerRegions are the regions a TagFormerRegions value lists, sorted,
// without except.
func FormerRegions(value, except string) []string {
	var out []string
	for _, region := range strings.Fields(value) {
		if region != except && !slices.Contains(out, region) {
			out = append(out, region)
		}
	}
	slices.Sort(out)
	return out
}

// FormerRegionsValue is the TagFormerRegions value that lists regions.
func FormerRegionsValue(regions []string) string {
	return strings.Join(FormerRegions(strings.Join(regions, " "), ""), " ")
}

// RemoveFormerGroups calls remove for each region that value (the
// TagFormerRegions of the group in region) lists, and for each region a
// group it removes had recorded in turn (a region changed twice), once
// each. remove reports the regions its group had recorded and whether
// nothing of the NodeSet's is left there. left is the regions that still
// hold something, the tag's next value.
func RemoveFormerGroups(value, region string, remove func(former string) (more []string, gone bool, err error)) (left []string, err error) {
	pending := FormerRegions(value, region)
	var errs []error
	for len(pending) > 0 {
		former := pending[0]
		pending = pending[1:]
		more, gone, err := remove(former)
		for _, r := range more {
			if r != region && r != former && !slices.Contains(pending, r) && !slices.Contains(left, r) {
				pending = append(pending, r)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
		if !gone {
			left = append(left, former)
		}
	}
	return left, errors.Join(errs...)
}
