package connrelay

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRelayTCPToUnixAndBack pipes a TCP connection to a Unix socket and
// back (the two sides of the Trainer v2.0 relay), both directions, then
// checks that Close ends the relayed connection and the listener.
func TestRelayTCPToUnixAndBack(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "echo.sock")
	echo, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := Start(ln, func() (net.Conn, error) { return net.DialTimeout("unix", sock, time.Second) })
	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("echo through the relay: %q, %v", line, err)
	}

	r.Close()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the relayed connection is still open after Close")
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the relayed connection was not closed by Close (read timed out)")
	}
	if c2, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c2.Close()
		t.Errorf("%s still accepts connections after Close", ln.Addr())
	}
}
