package framework

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// AuditEvent is what the tests read from the API server's audit log
// (Options.AuditLog).
type AuditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	ResponseStatus  *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// Succeeded reports whether the API server carried the request out.
func (e AuditEvent) Succeeded() bool {
	return e.ResponseStatus != nil && e.ResponseStatus.Code >= 200 && e.ResponseStatus.Code < 300
}

// IsWrite reports whether the request changes something.
func (e AuditEvent) IsWrite() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// IsLeaderElection reports whether the request is on a controller's
// leader-election Lease.
func (e AuditEvent) IsLeaderElection() bool {
	return e.ObjectRef != nil && e.ObjectRef.Resource == "leases" && e.ObjectRef.Namespace == "nodeset-system"
}

// AuditLogFlush is how long readers wait for the last requests' events (the
// log is written in blocking mode, so this is only a margin).
const AuditLogFlush = time.Second

// AuditEvents reads the completed requests the API server received in
// [from, to) (to zero: no end), in the order it received them.
func (cp *ControlPlane) AuditEvents(from, to time.Time) ([]AuditEvent, error) {
	f, err := os.Open(filepath.Join(cp.Dir, "audit.log"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue
		}
		if e.Stage != "ResponseComplete" || e.RequestReceived.Before(from) || (!to.IsZero() && !e.RequestReceived.Before(to)) {
			continue
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].RequestReceived.Before(out[j].RequestReceived) })
	return out, nil
}
