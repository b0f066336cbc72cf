package dockermachine

import "strings"

// capacityMarkers are the words in which the clouds behind docker-machine
// drivers say they have no room for a machine, or that the account's quota
// is used up: their own error codes, which the drivers quote as they get
// them. cluster-autoscaler's cloud providers count the same answers as out
// of resources (quota too), and back the group off.
var capacityMarkers = []string{
	// Amazon EC2 (amazonec2): RunInstances' error codes.
	"InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientReservedInstanceCapacity",
	"InsufficientCapacity", "InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded",
	// Google Compute Engine (google): the operation's error codes.
	"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "RESOURCE_POOL_EXHAUSTED", "INSUFFICIENT_CAPACITY", "QUOTA_EXCEEDED",
	// Azure (azure): the deployment's error codes.
	"AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest", "SkuNotAvailable", "QuotaExceeded",
	// OpenStack (openstack): Nova's scheduler found no host.
	"No valid host was found",
	// Oracle Cloud: the message of its InternalError.
	"Out of host capacity",
}

// outOfCapacity reports whether a plugin's error says its cloud has no
// room: a marker as a word of its own (not inside a longer identifier).
func outOfCapacity(text string) bool {
	for _, marker := range capacityMarkers {
		for rest := text; ; {
			i := strings.Index(rest, marker)
			if i < 0 {
				break
			}
			end := i + len(marker)
			if (i == 0 || !identifierByte(rest[i-1])) && (end == len(rest) || !identifierByte(rest[end])) {
				return true
			}
			rest = rest[end:]
		}
	}
	return false
}

func identifierByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}
