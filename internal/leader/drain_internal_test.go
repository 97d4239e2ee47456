package leader

import (
	"time"

	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/faults"
	"github.com/allot/allot/internal/natstest"
)

// A drain that stalls (a handler that does not return) ends after the
// grace instead of holding Stop forever.
func TestDrainEndsWhenStalled(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	release := make(chan struct{})
	term, err := Start(t.Context(), nc, Spec{Name: "stall", Version: "0.0.1", Endpoints: []Endpoint{
		{Name: "stuck", Subject: "test.stuck", Handle: func(micro.Request) { <-release }}}})
	if err != nil {
		t.Fatal(err)
	}
	defer close(release)
	cl := natstest.Conn(t, s)
	if err := cl.PublishRequest("test.stuck", nats.NewInbox(), nil); err != nil {
		t.Fatal(err)
	}
	faults.WaitFor(t, 20*time.Second, "the request to be taken up", func() bool { d, _ := term.Counts(); return d == 1 })
	term.drain(10 * time.Millisecond)
	if d, h := term.Counts(); d != 1 || h != 0 {
		t.Fatalf("delivered %d, handled %d", d, h)
	}
}
