// Command docker-machine-driver-generic is rancher/machine's own generic
// driver (existing hosts, over SSH) as a plugin binary, made the usual way,
// at the rancher/machine release go.mod pins: the end-to-end tests put it on
// the node controller's PATH to show that nodeset works with real drivers.
package main

import (
	"github.com/rancher/machine/drivers/generic"
	"github.com/rancher/machine/libmachine/drivers/plugin"
)

func main() {
	plugin.RegisterDriver(generic.NewDriver("", ""))
}
