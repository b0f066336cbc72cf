package framework

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
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
	RequestURI      string    `json:"requestURI"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	// Completed is when the response was complete (the stage's time).
	Completed      time.Time `json:"stageTimestamp"`
	ResponseStatus *struct {
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

// SyncAuditLog returns once the audit log holds the events of the requests
// that completed before it was called. It sends a marker request (a GET of a
// ConfigMap nobody has, named at random) and waits for the marker's event:
// the log is written in blocking mode, one event after another, so an
// earlier request's event is in the log before the marker's.
func (cp *ControlPlane) SyncAuditLog(ctx context.Context) error {
	path := filepath.Join(cp.Dir, "audit.log")
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	offset := info.Size() // the marker's event comes after what is there
	kube, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	var random [8]byte
	_, _ = rand.Read(random[:])
	marker := "audit-marker-" + hex.EncodeToString(random[:])
	_, _ = kube.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, marker, metav1.GetOptions{})
	needle := []byte(`"name":"` + marker + `"`)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		f, err := os.Open(path)
		if err != nil {
			return false, err
		}
		defer f.Close()
		if info, err := f.Stat(); err == nil && info.Size() < offset {
			offset = 0 // rotated
		}
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return false, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if bytes.Contains(sc.Bytes(), needle) && bytes.Contains(sc.Bytes(), []byte(`"stage":"ResponseComplete"`)) {
				return true, nil
			}
		}
		return false, sc.Err()
	})
	if err != nil {
		return fmt.Errorf("framework: the audit log has no event of marker request %s: %w", marker, err)
	}
	return nil
}

// AuditEvents reads the completed requests the API server received in
// [from, to) (to zero: no end), in the order it received them, from the
// audit log and every file it was rotated into. A line that is not an event
// (other than the last line of the live file, which may be half written) is
// an error: a count from a damaged log would be wrong without saying so.
func (cp *ControlPlane) AuditEvents(from, to time.Time) ([]AuditEvent, error) {
	rotated, err := filepath.Glob(filepath.Join(cp.Dir, "audit-*.log"))
	if err != nil {
		return nil, err
	}
	var out []AuditEvent
	for _, file := range append(rotated, filepath.Join(cp.Dir, "audit.log")) {
		events, err := readAuditFile(file, file == filepath.Join(cp.Dir, "audit.log"), from, to)
		if err != nil {
			return nil, err
		}
		out = append(out, events...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].RequestReceived.Before(out[j].RequestReceived) })
	return out, nil
}

func readAuditFile(path string, live bool, from, to time.Time) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var damaged error
	for line := 1; sc.Scan(); line++ {
		if damaged != nil {
			return nil, damaged // a bad line that was not the last one
		}
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			damaged = fmt.Errorf("framework: audit log %s line %d is not an event: %w", path, line, err)
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
	if damaged != nil && !live {
		return nil, damaged
	}
	return out, nil
}

var auditMetricRE = regexp.MustCompile(`(?m)^(apiserver_audit_event_total|apiserver_audit_error_total)(?:\{[^}]*\})? ([0-9.e+]+)$`)

// AuditComplete returns an error when the audit log lost events: when the
// API server counted errors writing them, or counted more events than the
// log and every file it was rotated into hold. A count of requests from a
// log that lost some would be wrong without saying so.
func (cp *ControlPlane) AuditComplete(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("framework: reading the API server's audit metrics: %w", err)
	}
	counted := map[string]float64{}
	for _, m := range auditMetricRE.FindAllStringSubmatch(string(raw), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return err
		}
		counted[m[1]] += v
	}
	if _, ok := counted["apiserver_audit_event_total"]; !ok {
		return fmt.Errorf("framework: the API server exposes no apiserver_audit_event_total")
	}
	// Every event counted before the scrape is in the files once the log
	// has caught up with a request made after it.
	if err := cp.SyncAuditLog(ctx); err != nil {
		return err
	}
	held, err := cp.auditLines()
	if err != nil {
		return err
	}
	return auditLoss(counted, held)
}

// auditLoss compares the API server's audit counters with the events the
// files hold.
func auditLoss(counted map[string]float64, held int) error {
	if errs := counted["apiserver_audit_error_total"]; errs > 0 {
		return fmt.Errorf("framework: the audit log lost events: the API server failed to write %.0f of them", errs)
	}
	if float64(held) < counted["apiserver_audit_event_total"] {
		return fmt.Errorf("framework: the audit log lost events: the API server counted %.0f, the files hold %d", counted["apiserver_audit_event_total"], held)
	}
	return nil
}

// auditLines counts the events in the audit log and its rotated files.
func (cp *ControlPlane) auditLines() (int, error) {
	files, err := filepath.Glob(filepath.Join(cp.Dir, "audit-*.log"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, file := range append(files, filepath.Join(cp.Dir, "audit.log")) {
		f, err := os.Open(file)
		if err != nil {
			return 0, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) > 0 {
				n++
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}
