package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"nodeset.dev/nodeset/drivers/awscloud"
)

// Intercept answers an AWS query-protocol request itself and returns true,
// or returns false to let it go on upstream. body is the request's body
// (already read; the request's Body reads it again) and form its parsed
// query parameters (Action, and the operation's own).
type Intercept func(w http.ResponseWriter, r *http.Request, body []byte, form url.Values) bool

// StartInterceptor starts a proxy to upstream (moto) on a loopback port,
// stopped with the test, that hands each request to intercept first. It
// returns the proxy's URL.
func StartInterceptor(t testing.TB, upstream string, intercept Intercept) string {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		if !intercept(w, r, body, form) {
			forward.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(server.Close)
	return server.URL
}

// MotoEC2 is moto behind an interceptor, for a program under test that
// talks to EC2 by itself (a docker-machine plugin): Endpoint is the
// interceptor's, for the program; EC2 talks to moto directly, for the test;
// Network is what to launch into, in region us-east-1.
type MotoEC2 struct {
	Endpoint string
	EC2      *ec2.Client
	Network  MotoNetwork
}

// StartMotoEC2 starts moto and an interceptor in front of it (StartMoto,
// StartInterceptor) and makes a MotoNetwork, for the test.
func StartMotoEC2(t testing.TB, intercept Intercept) MotoEC2 {
	t.Helper()
	moto := StartMoto(t)
	_, client, err := awscloud.SDKClients(moto)(context.Background(), "us-east-1", MotoCredentials)
	if err != nil {
		t.Fatal(err)
	}
	ec2c := client.(*ec2.Client)
	return MotoEC2{Endpoint: StartInterceptor(t, moto, intercept), EC2: ec2c, Network: NewMotoNetwork(t, ec2c, "us-east-1")}
}

// AnswerNoCapacity answers an EC2 request as EC2 does when a zone has no
// room for an instance type: InsufficientInstanceCapacity, with EC2's words.
func AnswerNoCapacity(w http.ResponseWriter, instanceType, zone string) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(http.StatusInternalServerError)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>InsufficientInstanceCapacity</Code><Message>We currently do not have sufficient %[1]s capacity in the Availability Zone you requested (%[2]s). Our system will be working on provisioning additional capacity. You can currently get %[1]s capacity by not specifying an Availability Zone in your request or choosing another zone.</Message></Error></Errors><RequestID>8f7e0c55-1d3c-4c4e-9a57-2f0d8b1c6a11</RequestID></Response>`,
		instanceType, zone)
}

// AmazonEC2Options are the options of rancher/machine's amazonec2 driver
// that launch a t3.medium from m's image into m's network, in us-east-1a,
// through m's interceptor.
func (m MotoEC2) AmazonEC2Options() map[string]string {
	return map[string]string{
		"amazonec2-endpoint":      m.Endpoint,
		"amazonec2-region":        "us-east-1",
		"amazonec2-zone":          "us-east-1a", // with an endpoint, amazonec2 takes the zone's whole name
		"amazonec2-vpc-id":        m.Network.VPC,
		"amazonec2-subnet-id":     m.Network.Subnet,
		"amazonec2-ami":           m.Network.Image,
		"amazonec2-instance-type": "t3.medium",
	}
}
