package client

import (
	"testing"

	"github.com/tether-dev/tether/pkg/binding"
	bindingserver "github.com/tether-dev/tether/pkg/binding/server"
)

// The client repeats the server's wire names so it needs none of the
// server's dependencies; they must not drift apart.
func TestWireNamesMatchTheServer(t *testing.T) {
	for _, c := range []struct{ client, server string }{
		{readPrefix, bindingserver.ReadPathPrefix},
		{CommandAnnotation, bindingserver.CommandAnnotation},
		{CommandSent, bindingserver.CommandSent},
		{CommandAcknowledged, bindingserver.CommandAcknowledged},
		{CommandFailed, bindingserver.CommandFailed},
		{Flush, binding.CommandFlush},
		{Drain, binding.CommandDrain},
		{Cancel, binding.CommandCancel},
	} {
		if c.client != c.server {
			t.Errorf("client %q, server %q", c.client, c.server)
		}
	}
}
