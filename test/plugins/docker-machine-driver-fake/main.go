// Command docker-machine-driver-fake is the fake docker-machine plugin of
// drivers/dockermachine/fakeplugin, for the node controller in end-to-end
// tests: its machines are files in the directory given by --fake-dir.
package main

import (
	"github.com/rancher/machine/libmachine/drivers/plugin"

	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

func main() {
	plugin.RegisterDriver(fakeplugin.New())
}
