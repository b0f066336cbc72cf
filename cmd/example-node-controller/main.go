// Command example-node-controller is the node controller of the example
// out-of-tree drivers (drivers/example): the built-in node controller with
// two more drivers. The machine driver example-dir makes machines as
// directories under $EXAMPLE_MACHINE_DIR; the group driver example-group
// makes groups as directories under $EXAMPLE_GROUP_DIR, by default
// $EXAMPLE_MACHINE_DIR/groups. Both are served unless --drivers says
// otherwise.
package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"

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
	}, nodecontrollerapp.Driver{
		Name: example.GroupName,
		New: func(context.Context, nodecontrollerapp.Env) (drivers.Driver, error) {
			root := os.Getenv("EXAMPLE_GROUP_DIR")
			if root == "" && os.Getenv("EXAMPLE_MACHINE_DIR") != "" {
				root = filepath.Join(os.Getenv("EXAMPLE_MACHINE_DIR"), "groups")
			}
			if root == "" {
				return nil, errors.New("set EXAMPLE_GROUP_DIR (or EXAMPLE_MACHINE_DIR) to the directory groups are made in")
			}
			return &example.GroupDriver{Root: root}, os.MkdirAll(root, 0o755)
		},
	}))
}
