// Command docker-machine-driver-amazonec2 is rancher/machine's own amazonec2
// driver (EC2 instances) as a plugin binary, made the usual way, at the
// rancher/machine release go.mod pins: the end-to-end tests put it on the
// node controller's PATH and aim it at moto to show that nodeset works with
// real drivers.
package main

import (
	"github.com/rancher/machine/drivers/amazonec2"
	"github.com/rancher/machine/libmachine/drivers/plugin"
)

func main() {
	plugin.RegisterDriver(amazonec2.NewDriver("", ""))
}
