package embed

import (
	"net"
	"strings"
	"testing"
)

// TestStartBusyPort: a port another listener holds fails Start with the
// listen error rather than a 20 s wait for readiness that hides it.
func TestStartBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	s, err := Start(Options{Port: port, StoreDir: t.TempDir()})
	if err == nil {
		s.Shutdown()
		t.Fatalf("Start on busy port %d succeeded", port)
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start on busy port %d: %v; want the listen error", port, err)
	}
}

func TestStartServes(t *testing.T) {
	s, err := Start(Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if !s.JetStreamEnabled() {
		t.Fatal("JetStream not enabled")
	}
}
