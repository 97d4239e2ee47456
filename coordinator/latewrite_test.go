package coordinator_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/poll"
)

// A lease-record write whose reply comes after the writer's time-out
// (2 s) may still land. The writer then reads back a record it did not
// expect, but it is its own: it is written again (the ledger took the
// write for failed, so the record stored may be below what it grants),
// and it is not counted or logged as someone else's.
func TestLateWriteIsNotForeign(t *testing.T) {
	nc, link := startBehindLink(t, 10*time.Second, 5*time.Second, slog.Default())
	get := func(client string) {
		t.Helper()
		if _, err := nc.RequestMsg(dbRequest(client), 20*time.Second); err != nil {
			t.Fatalf("%s: %v", client, err)
		}
	}
	get("first")
	poll.Until(t, time.Minute, "the first record written", func() bool { return coordtest.Stats(t, nc).RecordWrites >= 1 })

	// A newcomer's grant needs a record; its write reaches the server
	// only after the writer stopped waiting for it.
	link.SetDelay(3 * time.Second)
	get("second")
	poll.Until(t, time.Minute, "a record write that timed out", func() bool { return coordtest.Stats(t, nc).HorizonErrors >= 1 })
	link.SetDelay(0)
	st0 := coordtest.Stats(t, nc)
	poll.Until(t, time.Minute, "the record written again", func() bool {
		return coordtest.Stats(t, nc).RecordWrites > st0.RecordWrites
	})
	if st := coordtest.Stats(t, nc); st.ForeignRecords != 0 {
		t.Fatalf("STATS foreign_records = %d after our own late write landed; want 0", st.ForeignRecords)
	}
}
