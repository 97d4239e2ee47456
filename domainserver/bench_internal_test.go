package domainserver

import (
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/sources"
)

// fakeRequest is a micro.Request that keeps the reply: the handler's cost
// without NATS.
type fakeRequest struct {
	subject string
	data    []byte
	out     []byte
}

func (r *fakeRequest) Respond(b []byte, _ ...micro.RespondOpt) error { r.out = b; return nil }
func (r *fakeRequest) RespondJSON(any, ...micro.RespondOpt) error    { return nil }
func (r *fakeRequest) Error(_, _ string, b []byte, _ ...micro.RespondOpt) error {
	r.out = b
	return nil
}
func (r *fakeRequest) Data() []byte           { return r.data }
func (r *fakeRequest) Headers() micro.Headers { return nil }
func (r *fakeRequest) Subject() string        { return r.subject }
func (r *fakeRequest) Reply() string          { return "_INBOX.x" }

// benchServer is a server, not subscribed, over a rate resource with three
// unreachable tiers and a copy resource without limits.
func benchServer(b *testing.B) *Server {
	nss := map[string]*domainlimit.Namespace{"cb": {Name: "cb", Resources: map[string]domainlimit.Resource{
		"api": {Name: "api", Kind: domainlimit.KindRate, Rate: domainlimit.RateSpec{Hard: domainlimit.Unlimited, Global: domainlimit.Unlimited,
			Tiers: []domainlimit.Tier{{Limit: 1e9, Window: time.Second, Active: time.Hour, Cooldown: time.Second},
				{Limit: 1e9, Window: time.Second, Active: time.Hour, Cooldown: time.Second},
				{Limit: 1e9, Window: time.Second, Active: time.Hour, Cooldown: time.Second}}}},
		"pool": {Name: "pool", Kind: domainlimit.KindCopies, Copies: domainlimit.PermissiveCopies()},
	}}}
	o := Options{Config: sources.DomainsFunc(func() map[string]*domainlimit.Namespace { return nss }), Logger: slog.New(slog.DiscardHandler)}
	s, err := New(&nats.Conn{}, o)
	if err != nil {
		b.Fatal(err)
	}
	s.sealKey = newSealKey()
	return s
}

// BenchmarkHandle measures one decision's handling: decode, decide,
// encode (what the domain server spends beside NATS).
func BenchmarkHandle(b *testing.B) {
	for _, op := range []string{domainwire.OpRequest, domainwire.OpReserve} {
		b.Run(op, func(b *testing.B) {
			s := benchServer(b)
			reqs := make([]*fakeRequest, 64)
			for i := range reqs {
				res, body := "api", `{"domain":"d`+strconv.Itoa(i)+`","copies":1}`
				if op == domainwire.OpReserve {
					res, body = "pool", `{"domain":"d`+strconv.Itoa(i)+`","copies":1,"client_id":"bench-`+strconv.Itoa(i)+`"}`
				}
				reqs[i] = &fakeRequest{subject: domainwire.Subject("root", op, "cb", res), data: []byte(body)}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r := reqs[i%len(reqs)]
				s.handle(r)
				if i%1024 == 0 {
					s.expire(time.Now().Add(time.Hour)) // holds do not pile up
				}
			}
		})
	}
}

// BenchmarkReserveLive is a reserve with as many live holds as the charon
// benchmark keeps (a reserve every 17 µs of the server's clock, holds of
// 2 s swept every half second: about 120,000): the cost of a hold with a
// large map, and of its expiry, with the caches as they are then.
func BenchmarkReserveLive(b *testing.B) {
	s := benchServer(b)
	now := time.Now()
	s.opts.Now, s.opts.HoldTTL, s.epoch = func() time.Time { return now }, 2*time.Second, now
	reqs := make([]*fakeRequest, 64)
	for i := range reqs {
		reqs[i] = &fakeRequest{subject: domainwire.Subject("root", domainwire.OpReserve, "cb", "pool"),
			data: []byte(`{"domain":"d` + strconv.Itoa(i) + `","copies":1,"client_id":"bench-` + strconv.Itoa(i) + `"}`)}
	}
	const step, sweep = 17 * time.Microsecond, 500 * time.Millisecond
	warm := int((2*time.Second + sweep) / step)
	for i := range warm {
		now = now.Add(step)
		s.handle(reqs[i%len(reqs)])
		if i%int(sweep/step) == 0 {
			s.Expire()
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now = now.Add(step)
		s.handle(reqs[i%len(reqs)])
		if i%int(sweep/step) == 0 {
			s.Expire()
		}
	}
	b.ReportMetric(float64(s.holds.len()), "holds")
}
