// Package e2e tests nodeset against a real kube-apiserver and etcd, started
// once for the package by test/framework.
package e2e

import (
	"os"
	"testing"

	"nodeset.dev/nodeset/test/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{}))
}
