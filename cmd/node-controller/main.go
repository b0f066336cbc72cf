// Command node-controller provisions, drains and deprovisions the machines
// behind Nodes through the drivers it serves, and validates their NodeClasses.
package main

import (
	"os"

	"nodeset.dev/nodeset/pkg/nodecontrollerapp"
)

func main() {
	os.Exit(nodecontrollerapp.Main("node-controller"))
}
