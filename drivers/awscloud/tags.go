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
	var o drivers.Owner
	for _, t := range tags {
		switch aws.ToString(t.Key) {
		case TagCluster:
			o.Cluster = aws.ToString(t.Value)
		case TagNamespace:
			o.Namespace = aws.ToString(t.Value)
		case TagNodeSet:
			o.Name = aws.ToString(t.Value)
		case TagNodeSetUID:
			o.UID = types.UID(aws.ToString(t.Value))
		}
	}
	return o
}
