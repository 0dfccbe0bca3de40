package bindingserver

import "sync"

// maxOutstandingCommands bounds the command ids a session remembers; the
// server sends one command at a time, so a few cover any resend.
const maxOutstandingCommands = 8

// sentCommands is the set of command ids a session was sent and has not yet
// answered. A commandAck is only acted on (an API read and write) when its
// id is in it, so a worker cannot turn acks into API calls: an ack for a
// command this session was not sent, or a second ack of one, is dropped.
type sentCommands struct {
	mu  sync.Mutex
	ids []string
}

// sent records that id was pushed on this session.
func (c *sentCommands) sent(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.ids {
		if x == id {
			return
		}
	}
	if len(c.ids) == maxOutstandingCommands {
		c.ids = c.ids[1:]
	}
	c.ids = append(c.ids, id)
}

// take reports whether id was sent and not yet answered, and forgets it.
func (c *sentCommands) take(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.ids {
		if x == id {
			c.ids = append(c.ids[:i], c.ids[i+1:]...)
			return true
		}
	}
	return false
}
