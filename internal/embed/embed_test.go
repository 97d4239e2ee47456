package embed

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// TestStartMappings: Options.Mappings are in force for clients, with
// nats-server's mapping functions, and an invalid one fails Start.
func TestStartMappings(t *testing.T) {
	s, err := Start(Options{StoreDir: t.TempDir(), Mappings: map[string]string{"in.*": "out.{{partition(2,1)}}.{{wildcard(1)}}"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("out.*.x")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("in.x", nil); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || !strings.HasPrefix(m.Subject, "out.") {
		t.Fatalf("mapped message: %v %v", m, err)
	}
	if s, err := Start(Options{StoreDir: t.TempDir(), Mappings: map[string]string{"in.*": "out.{{nope(1)}}"}}); err == nil {
		s.Shutdown()
		t.Fatal("Start with an invalid mapping succeeded")
	}
}
