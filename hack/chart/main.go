// Command nodeset-chart keeps the Helm chart deploy/charts/nodeset in step
// with the kustomize manifests of deploy/:
//
//	nodeset-chart generate [--check]   CRDs, the admission policy template, Chart.yaml's
//	                                   versions and README.md's values table
//	nodeset-chart drift                renders the chart and each overlay for the same
//	                                   configuration and fails when they differ
//
// Both take --root (the repository) and generate takes --version (the
// project's VERSION, e.g. v0.1.0).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nodeset-chart generate|drift [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	root := fs.String("root", ".", "Root of the repository.")
	version := fs.String("version", "", "The project's version (generate), e.g. v0.1.0.")
	check := fs.Bool("check", false, "Report what generate would change instead of writing it (generate).")
	_ = fs.Parse(os.Args[2:])
	paths := layout{
		chart:  filepath.Join(*root, "deploy", "charts", "nodeset"),
		deploy: filepath.Join(*root, "deploy"),
		pairs:  filepath.Join(*root, "hack", "chart", "overlays"),
	}

	var err error
	switch os.Args[1] {
	case "generate":
		err = generate(paths, *version, *check)
	case "drift":
		err = drift(paths)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeset-chart "+os.Args[1]+":", err)
		os.Exit(1)
	}
}

// layout is where the chart, the kustomize manifests and the values files
// equivalent to the overlays are.
type layout struct {
	chart, deploy, pairs string
}
