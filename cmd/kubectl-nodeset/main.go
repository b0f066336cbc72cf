// Command kubectl-nodeset is the kubectl plugin for nodeset: put it on your
// PATH and run kubectl nodeset.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"nodeset.dev/nodeset/pkg/kubectlplugin"
)

func main() {
	cmd := kubectlplugin.Command(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, kubectlplugin.ErrorText(err))
		os.Exit(1)
	}
}
