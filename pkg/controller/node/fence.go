package node

import "fmt"

// mayAct is nil when this replica may make a driver call with a side
// effect: a replica not sure it leads must not create, delete, resize or
// terminate anything, or two replicas act on the same cloud at once.
func (c *Controller) mayAct(what string) error {
	if c.opts.MayAct == nil {
		return nil
	}
	if err := c.opts.MayAct(); err != nil {
		c.metrics.fencedCall(what)
		return fmt.Errorf("not calling the driver to %s: %w", what, err)
	}
	return nil
}
