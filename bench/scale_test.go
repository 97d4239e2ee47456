package bench

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/intake"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/wire"
)

// TestFillLeasesAsksAgainAfter503: the scale benchmark's filler keeps
// more newcomers' requests in flight than the coordinator's intake takes
// (here 8, 2 of them kept for holders): the refused ones are asked again,
// as agents do, and every client gets its lease. It once counted each 503
// as a failure, so allot bench scale stopped at its first size.
func TestFillLeasesAsksAgainAfter503(t *testing.T) {
	s := natstest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := startCoordinator(ctx, natstest.Conn(t, s), coordOptions{node: "fill", tmpl: benchTemplate(1000, 10*time.Second, time.Second),
		intake: intake.Limits{MaxInFlight: 8}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := fillLeases(ctx, &Env{Short: true}, s.ClientURL(), coordinator.Subject("fill", "capacity.get"), 300, 64, wire.Protobuf); err != nil {
		t.Fatal(err)
	}
	if st := coordtest.Stats(t, natstest.Conn(t, s)); st.Intake.Refused == 0 {
		t.Fatalf("the intake refused nothing (%+v): the test did not exercise a 503", st.Intake)
	}
}
