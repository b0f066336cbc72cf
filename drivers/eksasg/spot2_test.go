package eksasg

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/test/framework"
)

// TestTextOfANoticeIsBoundedAndPrintable: a queue message is text from
// outside (anyone allowed to send to the queue writes it, and SQS takes up
// to 1 MiB). What of it reaches the Node's Events, its interruption record
// or a log line is short and printable, whatever the message holds; a
// notice that is AWS's in every other respect still drains its Node.
func TestTextOfANoticeIsBoundedAndPrintable(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	long := "\x1b[2J\x1b[31mFAKE\nkubectl delete node --all\r" + strings.Repeat("A", 300<<10)
	with := func(e framework.AWSEvent, key, value string) string {
		e.Detail.(map[string]string)[key] = value
		return e.JSON()
	}
	health := func(code, entity string) string {
		e := framework.ScheduledInstanceRetirement(region, "i-0ddd", at, at.Add(time.Hour))
		e.Detail.(map[string]any)["eventTypeCode"] = code
		e.Detail.(map[string]any)["affectedEntities"] = []map[string]string{{"entityValue": "i-0ddd"}, {"entityValue": entity}}
		return e.JSON()
	}
	event := func(id string) string {
		e := framework.SpotInterruptionWarning(region, "i-0aaa", at)
		raw, _ := json.Marshal(map[string]any{"version": "0", "id": id, "detail-type": e.DetailType, "source": e.Source,
			"time": e.Time, "region": e.Region, "detail": e.Detail})
		return string(raw)
	}
	for _, tc := range []struct {
		name     string
		body     string
		kind     drivers.InterruptionKind
		machines []string
	}{
		{"a spot warning with a long instance-action", with(framework.SpotInterruptionWarning(region, "i-0aaa", at), "instance-action", long),
			drivers.InterruptionSpot, []string{"i-0aaa"}},
		{"a spot warning with a long id", event(long), drivers.InterruptionSpot, []string{"i-0aaa"}},
		{"a spot warning for a long instance id", with(framework.SpotInterruptionWarning(region, "i-0aaa", at), "instance-id", "i-"+long),
			drivers.InterruptionUnparseable, nil},
		{"a scheduled change with a long event type and entity", health(long, "i-"+long),
			drivers.InterruptionScheduled, []string{"i-0ddd"}},
		{"a lifecycle action of another hook with a long name",
			framework.TerminateLifecycleAction(region, "g", long, "i-0eee", "tok", at).JSON(),
			drivers.InterruptionTermination, []string{"i-0eee"}},
		{"a lifecycle action of our hook with a long token",
			framework.TerminateLifecycleAction(region, "g", HookName, "i-0eee", long, at).JSON(),
			drivers.InterruptionUnparseable, nil},
		{"a lifecycle action of our hook with a long group name",
			framework.TerminateLifecycleAction(region, long, HookName, "i-0eee", "tok", at).JSON(),
			drivers.InterruptionUnparseable, nil},
		{"an unknown detail-type from a long source", `{"id":"` + strings.Repeat("x", 300<<10) + `","detail-type":"` + strings.Repeat("y", 300<<10) +
			`","source":"\u001b[2J","time":"` + strings.Repeat("z", 300<<10) + `","detail":{}}`, drivers.InterruptionUnparseable, nil},
		{"a long time", `{"id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","time":"` + strings.Repeat("\n", 300<<10) +
			`","detail":{"instance-id":"i-0aaa"}}`, drivers.InterruptionUnparseable, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := ParseEvent([]byte(tc.body), 15*time.Minute)
			assert.Equal(t, tc.kind, n.Kind)
			assert.Equal(t, tc.machines, n.MachineIDs)
			texts := map[string]string{"detail": n.Detail, "id": n.ID}
			for i, id := range n.MachineIDs {
				texts["machine "+string(rune('0'+i))] = id
			}
			if a := n.Lifecycle; a != nil {
				texts["group"], texts["hook"], texts["token"], texts["lifecycle machine"] = a.Group, a.Hook, a.Token, a.MachineID
			}
			for what, s := range texts {
				assert.LessOrEqual(t, len(s), 512, "%s is %d bytes long", what, len(s))
				assert.True(t, strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0, "%s has characters that are not printable: %.80q", what, s)
			}
		})
	}
}

// TestTheRegionOfAnEventIsAnAWSRegion: a lifecycle action's hook is looked
// up in the event's region, with AWS clients made for that region and
// kept. A region the SDK does not know, however it is named, is not used
// unless it is the class's own.
func TestTheRegionOfAnEventIsAnAWSRegion(t *testing.T) {
	for _, tc := range []struct{ region, want string }{
		{"us-east-1", "us-east-1"},
		{"us-gov-west-1", "us-gov-west-1"},
		{"eu-isoe-west-1", "eu-isoe-west-1"},
		{"", "eu-west-1"},
		{"zz-forged-1", "eu-west-1"},
		{"us-east-99", "eu-west-1"},
		{"xx-newest-1", "xx-newest-1"}, // the class's own, known or not
		{"evil.example.com/x#", "eu-west-1"},
		{"us-east-1-" + strings.Repeat("a", 300<<10), "eu-west-1"},
	} {
		raw, _ := json.Marshal(map[string]string{"region": tc.region})
		fallback := "eu-west-1"
		if tc.region == "xx-newest-1" {
			fallback = tc.region
		}
		assert.Equal(t, tc.want, eventRegion(raw, fallback), "%.40q", tc.region)
	}
}
