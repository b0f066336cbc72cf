// Command example-node-controller is the node controller of the example
// out-of-tree driver (drivers/example): the built-in node controller with
// one more driver. Its machines are directories under $EXAMPLE_MACHINE_DIR.
package main

import (
	"context"
	"errors"
	"os"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/example"
	"nodeset.dev/nodeset/pkg/nodecontrollerapp"
)

func main() {
	os.Exit(nodecontrollerapp.Main("example-node-controller", nodecontrollerapp.Driver{
		Name: example.Name,
		New: func(context.Context, nodecontrollerapp.Env) (drivers.Driver, error) {
			root := os.Getenv("EXAMPLE_MACHINE_DIR")
			if root == "" {
				return nil, errors.New("set EXAMPLE_MACHINE_DIR to the directory machines are made in")
			}
			return &example.Driver{Root: root}, os.MkdirAll(root, 0o755)
		},
	}))
}
