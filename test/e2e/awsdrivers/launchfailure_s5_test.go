package awsdrivers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/test/framework"
)

// noCapacity stands between the node controller and moto for what moto
// does not model: a zone out of capacity for the instance type. As on AWS,
// a desired capacity above what can be launched is taken, the group
// reports it and runs fewer instances, and the failure is only in the
// group's scaling activities (moto launches everything at once and records
// none).
type noCapacity struct {
	mu       sync.Mutex
	upstream string
	capacity int
	wanted   map[string]int // desired capacity asked for, by group
}

var desiredRE = regexp.MustCompile(`<AutoScalingGroupName>([^<]+)</AutoScalingGroupName>|<DesiredCapacity>(\d+)</DesiredCapacity>`)

func (n *noCapacity) start(t *testing.T, upstream string) string {
	n.upstream = upstream
	return framework.StartInterceptor(t, upstream, func(w http.ResponseWriter, r *http.Request, body []byte, form url.Values) bool {
		switch form.Get("Action") {
		case "CreateAutoScalingGroup", "SetDesiredCapacity":
			desired, err := strconv.Atoi(form.Get("DesiredCapacity"))
			if err != nil {
				return false
			}
			n.mu.Lock()
			n.wanted[form.Get("AutoScalingGroupName")] = desired
			form.Set("DesiredCapacity", strconv.Itoa(min(desired, n.capacity)))
			n.mu.Unlock()
			capped := []byte(form.Encode())
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(capped)), int64(len(capped))
			r.Header.Set("Content-Length", strconv.Itoa(len(capped)))
			return false
		case "DescribeAutoScalingGroups":
			return n.describeGroups(w, r, body)
		case "DescribeScalingActivities":
			n.mu.Lock()
			short := n.wanted[form.Get("AutoScalingGroupName")] > n.capacity
			n.mu.Unlock()
			if !short {
				return false
			}
			w.Header().Set("Content-Type", "text/xml")
			fmt.Fprintf(w, `<DescribeScalingActivitiesResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><DescribeScalingActivitiesResult><Activities><member>`+
				`<ActivityId>5e3a1b2c</ActivityId><AutoScalingGroupName>%s</AutoScalingGroupName>`+
				`<Description>Launching a new EC2 instance.  Status Reason: We currently do not have sufficient t3.large capacity in the Availability Zone you requested (us-east-1a). Launching EC2 instance failed.</Description>`+
				`<Cause>At 2026-11-26T10:00:00Z an instance was started in response to a difference between desired and actual capacity.</Cause>`+
				`<StartTime>2026-11-26T10:00:00Z</StartTime><EndTime>2026-11-26T10:00:01Z</EndTime><StatusCode>Failed</StatusCode>`+
				`<StatusMessage>We currently do not have sufficient t3.large capacity in the Availability Zone you requested (us-east-1a). Launching EC2 instance failed.</StatusMessage>`+
				`<Progress>100</Progress></member></Activities></DescribeScalingActivitiesResult><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></DescribeScalingActivitiesResponse>`,
				form.Get("AutoScalingGroupName"))
			return true
		}
		return false
	})
}

// describeGroups passes the call to moto and answers with each group's
// desired capacity as asked for, not as moto could launch it.
func (n *noCapacity) describeGroups(w http.ResponseWriter, r *http.Request, body []byte) bool {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, n.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header = r.Header.Clone()
	req.Header.Del("Accept-Encoding")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return true
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return true
	}
	n.mu.Lock()
	group := ""
	answer = desiredRE.ReplaceAllFunc(answer, func(m []byte) []byte {
		sub := desiredRE.FindSubmatch(m)
		if len(sub[1]) > 0 {
			group = string(sub[1])
			return m
		}
		have, _ := strconv.Atoi(string(sub[2]))
		if wanted, ok := n.wanted[group]; ok && wanted > have {
			return []byte(fmt.Sprintf("<DesiredCapacity>%d</DesiredCapacity>", wanted))
		}
		return m
	})
	n.mu.Unlock()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
	return true
}

// release gives the zone its capacity back: every group launches what it
// was asked for.
func (n *noCapacity) release(t *testing.T, asg *autoscaling.Client) {
	n.mu.Lock()
	n.capacity = 100
	wanted := map[string]int{}
	for g, d := range n.wanted {
		wanted[g] = d
	}
	n.mu.Unlock()
	for g, d := range wanted {
		_, err := asg.SetDesiredCapacity(context.Background(), &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(g), DesiredCapacity: aws.Int32(int32(d))})
		require.NoError(t, err)
	}
}

// TestAGroupAWSCannotFillIsAReplicaFailure: a NodeSet of 3 whose zone has
// capacity for one instance. Auto Scaling takes the desired capacity
// without an error and fails each launch in its scaling activities; the
// NodeSet says so (ReplicaFailure, reason GroupFailure, with AWS's words
// in status.group.message) instead of waiting in silence, and the
// condition goes once the capacity is back and the group has its three.
func TestAGroupAWSCannotFillIsAReplicaFailure(t *testing.T) {
	ctx := context.Background()
	ns := "team-nocapacity"
	e, zone, group, failure := startShortSet(t, ns)

	zone.release(t, e.asg)
	e.converged(ns, "web", group, 3, 90*time.Second)
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		c, set := failure()
		last = fmt.Sprintf("ReplicaFailure %+v, group %+v", c, set.Status.Group)
		return c == nil && set.Status.Group != nil && set.Status.Group.Message == "", nil
	})
	require.NoError(t, err, "the failure goes once the group has its instances: %s", last)
}

// shortSet reads a NodeSet's ReplicaFailure condition, and the set.
type shortSet func() (*metav1.Condition, *nodesetv1alpha1.NodeSet)

// startShortSet starts NodeSet web of 3 in namespace ns, in a zone with
// capacity for one instance, and waits until the set says so: Auto
// Scaling takes the desired capacity without an error and fails each
// launch in its scaling activities, and the NodeSet is a ReplicaFailure
// (reason GroupFailure) with AWS's words.
func startShortSet(t *testing.T, ns string) (*env, *noCapacity, string, shortSet) {
	t.Helper()
	zone := &noCapacity{capacity: 1, wanted: map[string]int{}}
	e := newEnvWith(t, func(endpoint string) string { return zone.start(t, endpoint) })
	group := e.startSet(strings.TrimPrefix(ns, "team-"), ns, "web")
	e.update(ns, "web", func(s *nodesetv1alpha1.NodeSet) { s.Spec.Replicas = ptr.To[int32](3) })
	failure := func() (*metav1.Condition, *nodesetv1alpha1.NodeSet) {
		set, err := e.nodesets.NodesetV1alpha1().NodeSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
		require.NoError(t, err)
		return meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetReplicaFailure), set
	}
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		c, set := failure()
		last = fmt.Sprintf("ReplicaFailure %+v, group %+v, %d Nodes", c, set.Status.Group, len(e.setNodes(ns, "web")))
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "GroupFailure" &&
			regexp.MustCompile(`1 of 3 instances run.*sufficient t3\.large capacity`).MatchString(c.Message), nil
	})
	require.NoError(t, err, "the NodeSet tells why its group is short: %s", last)
	t.Logf("while short: %s", last)
	return e, zone, group, failure
}
