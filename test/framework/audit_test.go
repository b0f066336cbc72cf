package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func auditLine(verb string, at time.Time) string {
	return fmt.Sprintf(`{"stage":"ResponseComplete","verb":%q,"requestReceivedTimestamp":%q}`, verb, at.Format(time.RFC3339Nano))
}

// TestAuditEventsReadRotatedFiles: a long run's requests are spread over
// the live audit log and the files it was rotated into; all are counted, in
// the order they were received, and a damaged line is an error.
func TestAuditEventsReadRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	write := func(name string, lines ...string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	}
	write("audit-2026-11-01T12-00-01.000.log", auditLine("create", t0), auditLine("update", t0.Add(time.Second)))
	write("audit-2026-11-01T12-00-03.000.log", auditLine("delete", t0.Add(2*time.Second)))
	write("audit.log", auditLine("patch", t0.Add(3*time.Second)), `{"stage":"ResponseCompl`) // the live file, mid-write
	cp := &ControlPlane{Dir: dir}

	events, err := cp.AuditEvents(t0, time.Time{})
	require.NoError(t, err)
	var verbs []string
	for _, e := range events {
		verbs = append(verbs, e.Verb)
	}
	assert.Equal(t, []string{"create", "update", "delete", "patch"}, verbs, "every file, in the order received")

	write("audit-2026-11-01T12-00-03.000.log", `not json`, auditLine("delete", t0.Add(2*time.Second)))
	_, err = cp.AuditEvents(t0, time.Time{})
	assert.ErrorContains(t, err, "is not an event", "a damaged rotated file is not counted as if whole")
}

// TestAuditLossIsAnError: fewer events in the files than the API server
// counted, or any event it failed to write, is a loss.
func TestAuditLossIsAnError(t *testing.T) {
	assert.NoError(t, auditLoss(map[string]float64{"apiserver_audit_event_total": 10}, 10))
	assert.NoError(t, auditLoss(map[string]float64{"apiserver_audit_event_total": 10}, 12), "events after the scrape")
	assert.ErrorContains(t, auditLoss(map[string]float64{"apiserver_audit_event_total": 10}, 9), "counted 10, the files hold 9")
	assert.ErrorContains(t, auditLoss(map[string]float64{"apiserver_audit_event_total": 10, "apiserver_audit_error_total": 1}, 10), "failed to write 1")
}
