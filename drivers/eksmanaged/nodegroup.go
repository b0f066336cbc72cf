package eksmanaged

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// failedUpdateTag, on a node group, is the id of the version update of it
// that last failed or was cancelled: it is not started again by itself.
const failedUpdateTag = "nodeset.dev/failed-update"

// How a NodeSet's group is written as an EKS node group: its tags, labels,
// taints and settings, the idempotency token of its creation, and the
// updates that bring a node group in step with the class.

func (d *Driver) tags(owner drivers.Owner, hash string, extra map[string]string) map[string]string {
	tags := maps.Clone(extra)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[awscloud.TagCluster] = d.opts.Cluster
	tags[awscloud.TagNamespace] = owner.Namespace
	tags[awscloud.TagNodeSet] = owner.Name
	tags[awscloud.TagNodeSetUID] = string(owner.UID)
	if hash != "" {
		tags[awscloud.TagTemplateHash] = hash // the hash the configuration was last brought in step with
	}
	return tags
}

// labels are the node group's Kubernetes labels: the section's, then the
// NodeSet's Nodes', but those EKS refuses (eksRefusesLabel), which nodeset
// puts on the Nodes it makes itself.
func labels(s *nodesetv1alpha1.EKSManagedNodeGroup, group drivers.Group) map[string]string {
	out := maps.Clone(s.Labels)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range group.Labels {
		out[k] = v
	}
	maps.DeleteFunc(out, func(k, v string) bool { return eksRefusesLabel(k, v) != "" })
	return out
}

// EKS's limits of a node group's Kubernetes labels and taints (API
// reference, CreateNodegroup, UpdateLabelsPayload and Taint): a label's
// key and value are 1 to 63 characters, the key counted whole, prefix
// included (Kubernetes allows a 253-character prefix, and an empty
// value); a taint's key is 1 to 63 characters; a node group has at most 50
// taints.
const (
	eksMaxLabelKey   = 63
	eksMaxLabelValue = 63
	eksMaxTaintKey   = 63
	eksMaxTaintValue = 63
	eksMaxTaints     = 50
)

// EKS's other limits of a node group's settings: updateConfig's
// maxUnavailable is 1 to 100 ("the maximum number is 100") and
// maxUnavailablePercentage a percentage, 1 to 100, exactly one of them
// set; diskSize is the size of a gp2 or gp3 EBS volume, 1 to 16384 GiB; a
// launch template's name is EC2's, 3 to 128 letters, digits and ( ) . - / _.
const (
	eksMaxUnavailable  = 100
	eksMaxDiskSize     = 16384
	ec2MinTemplateName = 3
	ec2MaxTemplateName = 128
)

// eksRefusesLabel says why EKS refuses a node group label, or "".
func eksRefusesLabel(key, value string) string {
	if prefix := eksReserved(key); prefix != "" {
		return "EKS refuses node group labels containing " + prefix
	}
	switch {
	case key == "":
		return "EKS refuses node group labels with an empty key"
	case len(key) > eksMaxLabelKey:
		return fmt.Sprintf("EKS refuses node group label keys longer than %d characters, prefix included", eksMaxLabelKey)
	case value == "":
		return "EKS refuses node group labels with an empty value"
	case len(value) > eksMaxLabelValue:
		return fmt.Sprintf("EKS refuses node group label values longer than %d characters", eksMaxLabelValue)
	}
	return ""
}

// eksReservedPrefixes are what EKS refuses in a node group label's key
// ("Label cannot contain reserved prefixes"): the kubelet's and EKS's own
// domains, subdomains (node-role.kubernetes.io) included.
var eksReservedPrefixes = []string{"kubernetes.io/", "k8s.io/", "eks.amazonaws.com/"}

// eksReserved is the reserved prefix a label key contains, or "".
func eksReserved(key string) string {
	for _, p := range eksReservedPrefixes {
		if strings.Contains(key, p) {
			return p
		}
	}
	return ""
}

// taints are the node group's taints: the section's, then the NodeSet's
// Nodes' (a later one replaces an earlier one with the same key and
// effect), but those of the Nodes' with a key EKS refuses (longer than
// eksMaxTaintKey), which nodeset puts on the Nodes it makes itself.
func taints(s *nodesetv1alpha1.EKSManagedNodeGroup, group drivers.Group) []ekstypes.Taint {
	var out []ekstypes.Taint
	add := func(key, value string, effect ekstypes.TaintEffect) {
		for i := range out {
			if aws.ToString(out[i].Key) == key && out[i].Effect == effect {
				out[i].Value = optional(value)
				return
			}
		}
		out = append(out, ekstypes.Taint{Key: aws.String(key), Value: optional(value), Effect: effect})
	}
	for _, t := range s.Taints {
		add(t.Key, t.Value, ekstypes.TaintEffect(t.Effect))
	}
	for _, t := range group.Taints {
		if len(t.Key) <= eksMaxTaintKey {
			add(t.Key, t.Value, eksEffect(t.Effect))
		}
	}
	return out
}

func eksEffect(e corev1.TaintEffect) ekstypes.TaintEffect {
	switch e {
	case corev1.TaintEffectNoExecute:
		return ekstypes.TaintEffectNoExecute
	case corev1.TaintEffectPreferNoSchedule:
		return ekstypes.TaintEffectPreferNoSchedule
	}
	return ekstypes.TaintEffectNoSchedule
}

func kubeEffect(e string) corev1.TaintEffect {
	switch ekstypes.TaintEffect(e) {
	case ekstypes.TaintEffectNoExecute:
		return corev1.TaintEffectNoExecute
	case ekstypes.TaintEffectPreferNoSchedule:
		return corev1.TaintEffectPreferNoSchedule
	}
	return corev1.TaintEffectNoSchedule
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

func launchTemplate(l *nodesetv1alpha1.LaunchTemplateReference) *ekstypes.LaunchTemplateSpecification {
	if l == nil {
		return nil
	}
	return &ekstypes.LaunchTemplateSpecification{Id: optional(l.ID), Name: optional(l.Name), Version: optional(l.Version)}
}

func updateConfig(u *nodesetv1alpha1.ManagedUpdateConfig) *ekstypes.NodegroupUpdateConfig {
	if u == nil {
		return nil
	}
	return &ekstypes.NodegroupUpdateConfig{MaxUnavailable: u.MaxUnavailable, MaxUnavailablePercentage: u.MaxUnavailablePercentage}
}

// bounds are the node group's min and max: EKS wants max ≥ 1 and ≥ desired.
func bounds(group drivers.Group, desired int32) (int32, int32) {
	return min(group.MinReplicas, desired), max(group.MaxReplicas, group.Replicas, desired, 1)
}

// token is the idempotency token of a create or version update of the
// group at a template hash: a retry after a lost answer makes nothing
// twice. It names the NodeSet's UID too (kept whole when the token is cut
// to EKS's 64 characters), so that a NodeSet made again under the same
// name and template never gets its predecessor's answer back.
func token(group drivers.Group) string {
	t := group.Name + "-" + group.TemplateHash + "-" + string(group.Owner.UID)
	if len(t) > 64 {
		t = t[len(t)-64:]
	}
	return t
}

// versionToken is the idempotency token of a version update of ng: the
// group's token at its template hash and ng's last modification. A retry
// after a lost answer, while EKS does not show the update yet, is the same
// request; a new attempt after an update ended (EKS modified the node
// group) is a new one, and does not get the ended update's answer back.
// EKS refuses a second update while one runs in any case.
func versionToken(group drivers.Group, ng *ekstypes.Nodegroup) string {
	if ng.ModifiedAt != nil {
		group.TemplateHash += "-" + strconv.FormatInt(ng.ModifiedAt.Unix(), 36)
	}
	return token(group)
}

// configChanges is the UpdateNodegroupConfig that brings ng in step, or nil.
func configChanges(ng *ekstypes.Nodegroup, s *nodesetv1alpha1.EKSManagedNodeGroup, group drivers.Group) *eks.UpdateNodegroupConfigInput {
	input := &eks.UpdateNodegroupConfigInput{}
	changed := false
	var desired int32
	if sc := ng.ScalingConfig; sc != nil {
		desired = aws.ToInt32(sc.DesiredSize)
	}
	newDesired := max(desired, group.Replicas)
	minSize, maxSize := bounds(group, newDesired)
	if sc := ng.ScalingConfig; sc == nil || newDesired != desired || aws.ToInt32(sc.MinSize) != minSize || aws.ToInt32(sc.MaxSize) < maxSize {
		input.ScalingConfig = &ekstypes.NodegroupScalingConfig{MinSize: aws.Int32(minSize), MaxSize: aws.Int32(maxSize), DesiredSize: aws.Int32(newDesired)}
		if sc != nil {
			input.ScalingConfig.MaxSize = aws.Int32(max(maxSize, aws.ToInt32(sc.MaxSize)))
		}
		changed = true
	}
	want := labels(s, group)
	payload := &ekstypes.UpdateLabelsPayload{AddOrUpdateLabels: map[string]string{}}
	for k, v := range want {
		if ng.Labels[k] != v {
			payload.AddOrUpdateLabels[k] = v
		}
	}
	for k := range ng.Labels {
		if _, ok := want[k]; !ok {
			payload.RemoveLabels = append(payload.RemoveLabels, k)
		}
	}
	sort.Strings(payload.RemoveLabels)
	if len(payload.AddOrUpdateLabels) > 0 || len(payload.RemoveLabels) > 0 {
		input.Labels = payload
		changed = true
	}
	wantTaints := taints(s, group)
	same := func(a, b ekstypes.Taint) bool {
		return aws.ToString(a.Key) == aws.ToString(b.Key) && a.Effect == b.Effect && aws.ToString(a.Value) == aws.ToString(b.Value)
	}
	taintPayload := &ekstypes.UpdateTaintsPayload{}
	for _, t := range wantTaints {
		if !slices.ContainsFunc(ng.Taints, func(have ekstypes.Taint) bool { return same(have, t) }) {
			taintPayload.AddOrUpdateTaints = append(taintPayload.AddOrUpdateTaints, t)
		}
	}
	for _, t := range ng.Taints {
		if !slices.ContainsFunc(wantTaints, func(w ekstypes.Taint) bool {
			return aws.ToString(w.Key) == aws.ToString(t.Key) && w.Effect == t.Effect
		}) {
			taintPayload.RemoveTaints = append(taintPayload.RemoveTaints, t)
		}
	}
	if len(taintPayload.AddOrUpdateTaints) > 0 || len(taintPayload.RemoveTaints) > 0 {
		input.Taints = taintPayload
		changed = true
	}
	if u := updateConfig(s.UpdateConfig); u != nil {
		have := ng.UpdateConfig
		if have == nil || aws.ToInt32(have.MaxUnavailable) != aws.ToInt32(u.MaxUnavailable) ||
			aws.ToInt32(have.MaxUnavailablePercentage) != aws.ToInt32(u.MaxUnavailablePercentage) {
			input.UpdateConfig = u
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return input
}

// versionChanges is the UpdateNodegroupVersion that brings ng to the
// section's version, release version and launch template version, or nil.
func versionChanges(ng *ekstypes.Nodegroup, s *nodesetv1alpha1.EKSManagedNodeGroup) *eks.UpdateNodegroupVersionInput {
	input := &eks.UpdateNodegroupVersionInput{}
	changed := false
	if s.Version != "" && s.Version != aws.ToString(ng.Version) {
		input.Version, changed = aws.String(s.Version), true
	}
	if s.ReleaseVersion != "" && s.ReleaseVersion != aws.ToString(ng.ReleaseVersion) {
		input.ReleaseVersion, input.Version, changed = aws.String(s.ReleaseVersion), aws.String(s.Version), true
	}
	if lt := s.LaunchTemplate; lt != nil && lt.Version != "" && ng.LaunchTemplate != nil && lt.Version != aws.ToString(ng.LaunchTemplate.Version) {
		input.LaunchTemplate, changed = launchTemplate(lt), true
	}
	if !changed {
		return nil
	}
	return input
}

// failedBefore reports whether update is a version update that failed or
// was cancelled, and that asked for what version would ask for now.
func failedBefore(update *ekstypes.Update, version *eks.UpdateNodegroupVersionInput) bool {
	if update == nil || update.Type != ekstypes.UpdateTypeVersionUpdate ||
		(update.Status != ekstypes.UpdateStatusFailed && update.Status != ekstypes.UpdateStatusCancelled) {
		return false
	}
	asked := map[ekstypes.UpdateParamType]string{}
	for _, p := range update.Params {
		asked[p.Type] = aws.ToString(p.Value)
	}
	same := func(t ekstypes.UpdateParamType, want *string) bool {
		have, ok := asked[t]
		return want == nil || (ok && have == *want)
	}
	var templateVersion *string
	if version.LaunchTemplate != nil {
		templateVersion = version.LaunchTemplate.Version
	}
	return same(ekstypes.UpdateParamTypeVersion, version.Version) && same(ekstypes.UpdateParamTypeReleaseVersion, version.ReleaseVersion) &&
		same(ekstypes.UpdateParamTypeLaunchTemplateVersion, templateVersion)
}

// recordFailedUpdate writes id as the node group's failedUpdateTag, or
// removes the tag when id is empty, so that a failed version update is
// known after the NodeSet's status stopped naming it and after a restart.
func (d *Driver) recordFailedUpdate(ctx context.Context, api API, ng *ekstypes.Nodegroup, id string) error {
	name := aws.ToString(ng.NodegroupName)
	switch have := ng.Tags[failedUpdateTag]; {
	case have == id:
		return nil
	case id == "":
		_, err := api.EKS.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: ng.NodegroupArn, TagKeys: []string{failedUpdateTag}})
		if err == nil {
			delete(ng.Tags, failedUpdateTag)
		}
		return classify("forgetting the failed update of node group "+name, err)
	}
	_, err := api.EKS.TagResource(ctx, &eks.TagResourceInput{ResourceArn: ng.NodegroupArn, Tags: map[string]string{failedUpdateTag: id}})
	if err != nil {
		return classify("recording the failed update "+id+" of node group "+name, err)
	}
	if ng.Tags == nil {
		ng.Tags = map[string]string{}
	}
	ng.Tags[failedUpdateTag] = id
	return nil
}
