package eksmanaged

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// A configuration update (UpdateNodegroupConfig: labels, taints, scaling,
// updateConfig) that EKS reports Failed or Cancelled is asked again, but
// not on every look: asked again at once it would most likely fail the
// same way, each attempt a new failed update. The failure is recorded on
// the node group, in failedConfigTag, so that a restarted node controller
// keeps the backoff: the update's id, how many times in a row the same
// spec failed, when the last failure was seen, and the hash of the spec
// that asked it. The same spec is asked again after configRetryBase,
// doubled with each failure up to configRetryMax; a spec that differs (a
// class or NodeSet edit, other replicas) is asked at once.

// failedConfigTag, on a node group, records the configuration update of it
// that last failed: "<update id> <attempts> <unix seconds> <spec hash>".
const failedConfigTag = "nodeset.dev/failed-config-update"

const (
	configRetryBase = time.Minute
	configRetryMax  = 30 * time.Minute
)

// configAsk is a configuration update asked and the hash of the spec that
// asked it.
type configAsk struct{ id, hash string }

// failedConfig is what failedConfigTag records.
type failedConfig struct {
	id       string
	attempts int
	at       time.Time
	hash     string
}

func (f failedConfig) String() string {
	return fmt.Sprintf("%s %d %d %s", f.id, f.attempts, f.at.Unix(), f.hash)
}

// parseFailedConfig reads a failedConfigTag value; false for "" or one
// that is not of the driver's making.
func parseFailedConfig(value string) (failedConfig, bool) {
	fields := strings.Fields(value)
	if len(fields) != 4 {
		return failedConfig{}, false
	}
	attempts, err := strconv.Atoi(fields[1])
	if err != nil || attempts < 1 {
		return failedConfig{}, false
	}
	at, err := strconv.ParseInt(fields[2], 10, 64)
	if err != nil {
		return failedConfig{}, false
	}
	return failedConfig{id: fields[0], attempts: attempts, at: time.Unix(at, 0), hash: fields[3]}, true
}

// configBackoff is how long the same spec waits after its attempts-th
// failure in a row: configRetryBase, doubled each time, at most
// configRetryMax.
func configBackoff(attempts int) time.Duration {
	wait := configRetryBase
	for i := 1; i < attempts && wait < configRetryMax; i++ {
		wait *= 2
	}
	return min(wait, configRetryMax)
}

func (f failedConfig) retryAt() time.Time { return f.at.Add(configBackoff(f.attempts)) }

func (f failedConfig) retryMessage() string {
	return fmt.Sprintf("the configuration change failed %d time(s) in a row; it is asked again after %s (at %s), "+
		"or at once when the NodeClass or the NodeSet changes it", f.attempts, configBackoff(f.attempts), f.retryAt().UTC().Format(time.RFC3339))
}

// configSpecHash is a hash of what the configuration of the group is asked
// to be: labels, taints, updateConfig and sizes.
func configSpecHash(s *nodesetv1alpha1.EKSManagedNodeGroup, group drivers.Group) string {
	h := sha256.New()
	want := labels(s, group)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		fmt.Fprintf(h, "label %q=%q\n", k, want[k])
	}
	for _, t := range taints(s, group) {
		fmt.Fprintf(h, "taint %q=%q:%s\n", aws.ToString(t.Key), aws.ToString(t.Value), t.Effect)
	}
	if u := updateConfig(s.UpdateConfig); u != nil {
		fmt.Fprintf(h, "maxUnavailable %d %d\n", aws.ToInt32(u.MaxUnavailable), aws.ToInt32(u.MaxUnavailablePercentage))
	}
	fmt.Fprintf(h, "size %d %d %d\n", group.Replicas, group.MinReplicas, group.MaxReplicas)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// remember records the configuration update just asked for key.
func (d *Driver) remember(key string, ask configAsk) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked[key] = ask
}

// askedHash is the hash of the spec that asked update id of key, or
// current when this driver did not ask it (it was asked before a restart).
func (d *Driver) askedHash(key, id, current string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ask, ok := d.asked[key]; ok && ask.id == id {
		return ask.hash
	}
	return current
}

// recordFailedConfig records the failed configuration update on the node
// group (once per update), one more failure in a row of the same spec, or
// the first of another.
func (d *Driver) recordFailedConfig(ctx context.Context, api API, ng *ekstypes.Nodegroup, update *ekstypes.Update, hash string) (failedConfig, error) {
	id := aws.ToString(update.Id)
	last, ok := parseFailedConfig(ng.Tags[failedConfigTag])
	if ok && last.id == id {
		return last, nil
	}
	record := failedConfig{id: id, attempts: 1, at: d.opts.Now(), hash: hash}
	if ok && last.hash == hash {
		record.attempts = last.attempts + 1
	}
	name := aws.ToString(ng.NodegroupName)
	if _, err := api.EKS.TagResource(ctx, &eks.TagResourceInput{ResourceArn: ng.NodegroupArn, Tags: map[string]string{failedConfigTag: record.String()}}); err != nil {
		return failedConfig{}, classify("recording the failed configuration update "+id+" of node group "+name, err)
	}
	if ng.Tags == nil {
		ng.Tags = map[string]string{}
	}
	ng.Tags[failedConfigTag] = record.String()
	return record, nil
}

// forgetFailedConfig removes failedConfigTag from a node group whose
// configuration is in step.
func (d *Driver) forgetFailedConfig(ctx context.Context, api API, ng *ekstypes.Nodegroup) error {
	if _, ok := ng.Tags[failedConfigTag]; !ok {
		return nil
	}
	_, err := api.EKS.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: ng.NodegroupArn, TagKeys: []string{failedConfigTag}})
	if err != nil {
		return classify("forgetting the failed configuration update of node group "+aws.ToString(ng.NodegroupName), err)
	}
	delete(ng.Tags, failedConfigTag)
	return nil
}
