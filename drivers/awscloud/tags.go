package awscloud

import (
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
