package framework

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Faults are the rates (0 to 1) at which a FaultProxy disturbs requests.
type Faults struct {
	// Throttle answers with the API's throttling error.
	Throttle float64
	// ServerError answers 503.
	ServerError float64
	// Slow forwards after SlowDelay.
	Slow      float64
	SlowDelay time.Duration
	// Drop closes the connection without forwarding.
	Drop float64
	// LoseAnswer forwards, then closes the connection instead of answering:
	// the call took effect and the caller does not know.
	LoseAnswer float64
}

// FaultProxy stands between the AWS SDK and moto and injects faults: the
// cloud as it behaves on a bad day.
type FaultProxy struct {
	URL string

	mu       sync.Mutex
	rng      *rand.Rand
	faults   Faults
	injected map[string]int
	failing  map[string]*actionFault
	losing   []*pathFault
	calls    []ProxiedCall
}

// pathFault loses the answers of the requests of one method and path.
type pathFault struct {
	method string
	path   *regexp.Regexp
	times  int
}

// LoseAnswers forwards the next times requests of a REST API (EKS) whose
// method is method and whose URL path path matches, then closes the
// connection instead of answering: the call took effect and the caller
// does not know, as with Faults.LoseAnswer, but for the calls a test
// names. Counted in Injected as "lose-answer <method> <path>".
func (p *FaultProxy) LoseAnswers(method string, path *regexp.Regexp, times int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.losing = append(p.losing, &pathFault{method: method, path: path, times: times})
}

// loseAnswer reports whether the request is one LoseAnswers names.
func (p *FaultProxy) loseAnswer(r *http.Request) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.losing {
		if f.times > 0 && r.Method == f.method && f.path.MatchString(r.URL.Path) {
			f.times--
			p.injected["lose-answer "+f.method+" "+f.path.String()]++
			return true
		}
	}
	return false
}

// ProxiedCall is one request the proxy received.
type ProxiedCall struct {
	// Action is the query-protocol action (Auto Scaling, EC2) or the
	// operation of an X-Amz-Target header (JSON protocols).
	Action    string
	UserAgent string
	Received  time.Time
}

// Calls are the requests received so far, in order.
func (p *FaultProxy) Calls() []ProxiedCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ProxiedCall(nil), p.calls...)
}

// record notes a request.
func (p *FaultProxy) record(r *http.Request, body []byte) {
	action := ""
	if form, err := url.ParseQuery(string(body)); err == nil {
		action = form.Get("Action")
	}
	if target := r.Header.Get("X-Amz-Target"); target != "" {
		action = target[strings.LastIndex(target, ".")+1:]
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, ProxiedCall{Action: action, UserAgent: r.Header.Get("User-Agent"), Received: time.Now()})
}

// actionFault fails the requests of one action.
type actionFault struct {
	times  int
	before func(form url.Values)
}

// FailAction answers the next times requests of the query-protocol action
// (Auto Scaling, EC2: "TerminateInstanceInAutoScalingGroup") with a 500
// without forwarding them; before, when set, runs first with the request's
// form, so a test can make the call fail half way (for example by
// detaching the instance it names).
func (p *FaultProxy) FailAction(action string, times int, before func(form url.Values)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failing[action] = &actionFault{times: times, before: before}
}

// failAction reports whether the request is one FailAction fails.
func (p *FaultProxy) failAction(body []byte) (func(url.Values), url.Values, bool) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.failing[form.Get("Action")]
	if f == nil || f.times <= 0 {
		return nil, nil, false
	}
	f.times--
	p.injected["action-"+form.Get("Action")]++
	return f.before, form, true
}

// StartFaultProxy starts a proxy to upstream on a loopback port, stopped
// with the test, injecting nothing until SetFaults.
func StartFaultProxy(t testing.TB, upstream string, seed uint64) *FaultProxy {
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{rng: rand.New(rand.NewPCG(seed, seed^0x5bd1e995)), injected: map[string]int{}, failing: map[string]*actionFault{}}
	forward := httputil.NewSingleHostReverseProxy(target)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		p.record(r, body)
		if before, form, ok := p.failAction(body); ok {
			if before != nil {
				before(form)
			}
			w.Header().Set("Content-Type", "text/xml")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `<ErrorResponse><Error><Type>Receiver</Type><Code>InternalFailure</Code><Message>injected</Message></Error><RequestId>fault</RequestId></ErrorResponse>`)
			return
		}
		if p.loseAnswer(r) {
			forward.ServeHTTP(&discard{header: http.Header{}}, r)
			hangUp(w)
			return
		}
		switch p.draw() {
		case "throttle":
			throttle(w, r, body)
		case "server-error":
			http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
		case "slow":
			time.Sleep(p.slowDelay())
			forward.ServeHTTP(w, r)
		case "drop":
			hangUp(w)
		case "lose-answer":
			forward.ServeHTTP(&discard{header: http.Header{}}, r)
			hangUp(w)
		default:
			forward.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(server.Close)
	p.URL = server.URL
	return p
}

// SetFaults sets the rates from now on.
func (p *FaultProxy) SetFaults(f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f.SlowDelay == 0 {
		f.SlowDelay = time.Second
	}
	p.faults = f
}

// Injected counts the faults injected so far, by kind.
func (p *FaultProxy) Injected() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.injected {
		out[k] = v
	}
	return out
}

func (p *FaultProxy) slowDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults.SlowDelay
}

func (p *FaultProxy) draw() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	x := p.rng.Float64()
	for _, k := range []struct {
		kind string
		rate float64
	}{{"throttle", p.faults.Throttle}, {"server-error", p.faults.ServerError}, {"slow", p.faults.Slow},
		{"drop", p.faults.Drop}, {"lose-answer", p.faults.LoseAnswer}} {
		if x < k.rate {
			p.injected[k.kind]++
			return k.kind
		}
		x -= k.rate
	}
	return ""
}

// throttle answers with the throttling error of the request's protocol:
// the query protocol's XML for Auto Scaling and EC2, JSON for the REST APIs.
func throttle(w http.ResponseWriter, r *http.Request, body []byte) {
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		form, _ := url.ParseQuery(string(body))
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusBadRequest)
		if form.Get("Version") == "2011-01-01" { // Auto Scaling
			fmt.Fprint(w, `<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>fault</RequestId></ErrorResponse>`)
			return
		}
		fmt.Fprint(w, `<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>fault</RequestID></Response>`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", "ThrottlingException")
	w.WriteHeader(http.StatusTooManyRequests)
	fmt.Fprint(w, `{"message":"Rate exceeded"}`)
}

// hangUp closes the client's connection without an answer.
func hangUp(w http.ResponseWriter) {
	hijacker, ok := w.(http.Hijacker)
	if !ok {
		panic("the fault proxy's server does not support hijacking")
	}
	conn, _, err := hijacker.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// discard is a ResponseWriter that drops the answer.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
