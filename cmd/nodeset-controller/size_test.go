package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The controllers are built with the grpcnotrace tag (Makefile, Dockerfile,
// hack/demo.sh, the tests' framework). Without it gRPC links
// golang.org/x/net/trace, whose html/template keeps the linker from dropping
// any exported method of any type in the binary: the nodeset-controller was
// 87 MB instead of 47 MB, and its resident size followed.
func TestBuildTagKeepsTemplatesOut(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "grpcnotrace", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, pkg := range []string{"golang.org/x/net/trace", "text/template", "html/template"} {
		if slices.Contains(deps, pkg) {
			t.Errorf("the nodeset-controller links %s with -tags grpcnotrace", pkg)
		}
	}
	if !slices.Contains(deps, "google.golang.org/grpc") {
		t.Error("the nodeset-controller no longer links gRPC: this test checks nothing")
	}
}
