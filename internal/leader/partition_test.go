package leader_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/replica"
)

func TestFillClockSkew(t *testing.T) {
	for _, c := range []struct {
		in, want time.Duration
		err      string
	}{
		{0, 2 * time.Second, ""},
		{-1, 0, ""},
		{time.Second, time.Second, ""},
		{-2, -2, "svc: clock skew -2ns is negative"},
	} {
		got := c.in
		err := leader.FillClockSkew("svc", &got, 2*time.Second)
		if (err == nil) != (c.err == "") || err != nil && err.Error() != c.err || got != c.want {
			t.Errorf("FillClockSkew(%v) = %v, %v; want %v, %q", c.in, got, err, c.want, c.err)
		}
	}
}

// TestFillElection: a bad election option is refused naming the service,
// and a good one comes back with its defaults.
func TestFillElection(t *testing.T) {
	e := replica.Election{TTL: 1500 * time.Millisecond}
	if err := leader.FillElection("svc", &e); err == nil || !strings.HasPrefix(err.Error(), "svc: election TTL") {
		t.Errorf("FillElection(TTL 1.5s) = %v, want an svc: election TTL error", err)
	}
	e = replica.Election{Replicas: 3}
	if err := leader.FillElection("svc", &e); err != nil || e.Bucket != replica.DefaultBucket || e.TTL != replica.DefaultTTL || e.Replicas != 3 {
		t.Errorf("FillElection(Replicas 3) = %+v, %v", e, err)
	}
}

func TestFillTerm(t *testing.T) {
	var term uint64
	var log *slog.Logger
	var now func() time.Time
	leader.FillTerm(&term, &log, &now)
	if term != 1 || log != slog.Default() || now == nil {
		t.Errorf("FillTerm of zeros: term %d, logger %v, clock set %v", term, log, now != nil)
	}
	at := time.Unix(7, 0)
	quiet := slog.New(slog.DiscardHandler)
	term, log, now = 5, quiet, func() time.Time { return at }
	leader.FillTerm(&term, &log, &now)
	if term != 5 || log != quiet || !now().Equal(at) {
		t.Errorf("FillTerm changed what was set: term %d, logger %v, now %v", term, log, now())
	}
}
