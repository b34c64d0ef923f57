package control

import "slices"

// Notice records something the operator must act on that fulcrumd worked around at
// start (a damaged profile store moved aside): an event of kind k, and a line in
// Status.Notices (the control API's status) until fulcrumd restarts.
func (c *Controller) Notice(k Kind, msg string) {
	c.mu.Lock()
	c.notices = append(c.notices, msg)
	c.mu.Unlock()
	c.log.Warn("notice", "kind", string(k), "msg", msg)
	c.events.Add(Event{Kind: k, Reason: msg})
}

// notes returns the notices recorded so far; c.mu must be held.
func (c *Controller) notes() []string { return slices.Clone(c.notices) }
