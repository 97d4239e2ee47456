package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/allot/allot/internal/alloc"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/ledger"
	"github.com/allot/allot/proto/allotpb"
)

// RoundPoint is the cost of a coordinator's round (the ledger alone, in
// memory) when Changed of Clients clients holding leases on one
// FAIR_SHARE resource ask again with new wants: the cost per changed
// client should not grow with the clients held.
type RoundPoint struct {
	Clients int `json:"clients"`
	Changed int `json:"changed"`
	// USPerChange is the round's time over Changed (Get of each, Propose,
	// Allocate, Lease of each, EndRound), median of 5 samples.
	USPerChange float64 `json:"us_per_change"`
	// FullRoundMS is the same-run baseline: one alloc.Run over all the
	// clients' demands, what every round cost before; ChangesPerFull is
	// how many changed clients cost as much.
	FullRoundMS    float64 `json:"full_round_ms"`
	ChangesPerFull float64 `json:"changes_per_full_round"`
	// RatioToFirst is USPerChange over the smallest size's: flat is 1.
	RatioToFirst float64 `json:"ratio_to_smallest"`
}

// roundChanged is how many clients change their wants per measured round.
const roundChanged = 100

// ledgerRound measures RoundPoints for sizes.
func ledgerRound(ctx context.Context, env *Env, sizes []int, minTime time.Duration) ([]RoundPoint, error) {
	var out []RoundPoint
	for _, n := range sizes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, err := ledgerRoundAt(n, minTime)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 {
			p.RatioToFirst = p.USPerChange / out[0].USPerChange
		} else {
			p.RatioToFirst = 1
		}
		out = append(out, *p)
		env.progressf("scale: ledger round %8d clients, %d changed: %7.2f µs per changed client (a full alloc.Run: %.3f ms = %.0f changes)",
			n, p.Changed, p.USPerChange, p.FullRoundMS, p.ChangesPerFull)
	}
	return out, nil
}

func ledgerRoundAt(n int, minTime time.Duration) (*RoundPoint, error) {
	r, err := newRoundBench(n, true)
	if err != nil {
		return nil, err
	}
	ns := measure(minTime, r.step)
	if r.failed != nil {
		return nil, r.failed
	}
	var s alloc.Scratch
	full := measure(minTime, func() { alloc.Run(allotpb.Algorithm_FAIR_SHARE, float64(n)*5, r.d, &s) })
	return &RoundPoint{Clients: n, Changed: roundChanged, USPerChange: ns / roundChanged / 1e3,
		FullRoundMS: full / 1e6, ChangesPerFull: full / (ns / roundChanged)}, nil
}

// roundBench is a ledger holding n leases on one FAIR_SHARE resource,
// ready for rounds in which roundChanged of them ask again: with new
// wants, or (a steady refresh) the same.
type roundBench struct {
	d      []alloc.Demand
	step   func() // one round of roundChanged changed clients
	failed error  // the first refusal of a step's request
}

func newRoundBench(n int, newWants bool) (*roundBench, error) {
	tmpl := benchTemplate(float64(n)*5, 30*time.Minute, 10*time.Minute)
	set := config.NewSet(1, []*config.Template{tmpl}, nil)
	now := time.Now().UnixNano()
	l := ledger.New(ledger.Config{Node: "bench", ServerID: "bench", Term: 1, MaxClients: n + 1, HolderKey: [ledger.HolderKeySize]byte{1}})
	prop, err := l.Start(now, ledger.Prior{Kind: ledger.PriorNew})
	if err != nil {
		return nil, err
	}
	l.Commit(now, prop, nil)
	ids := make([]string, n)
	r := &roundBench{d: scaleDemands(n)}
	for i := range ids {
		ids[i] = fmt.Sprintf("scale-client-%07d", i)
	}
	var slots []ledger.Slot
	get := func(i int, wants float64) error {
		s, err := l.Get(now, set, &allotpb.GetCapacityRequest{ClientId: ids[i],
			Resource: []*allotpb.ResourceRequest{{ResourceId: "scale", Wants: wants}}})
		slots = append(slots, s...)
		return err
	}
	round := func() {
		if p := l.Propose(now); p != nil {
			l.Commit(now, p, nil)
		}
		l.Allocate(now)
		for _, s := range slots {
			_ = s.Lease(now)
		}
		slots = slots[:0]
		l.EndRound()
	}
	// Fill in rounds of 4,096, as a busy coordinator would.
	for i := range ids {
		if err := get(i, r.d[i].Wants); err != nil {
			return nil, err
		}
		if i%4096 == 4095 {
			round()
		}
	}
	round()
	rng := rand.New(rand.NewPCG(uint64(n), 9))
	// A round's requests arrive decoded, as the coordinator's batch does:
	// each with its own client id, hot in the cache.
	reqs := make([]*allotpb.GetCapacityRequest, roundChanged)
	r.step = func() {
		now += int64(time.Millisecond)
		for k := range reqs {
			i := rng.IntN(n)
			if newWants {
				r.d[i].Wants = float64(rng.IntN(20)) + rng.Float64()
			}
			reqs[k] = &allotpb.GetCapacityRequest{ClientId: strings.Clone(ids[i]),
				Resource: []*allotpb.ResourceRequest{{ResourceId: "scale", Wants: r.d[i].Wants}}}
		}
		// As the coordinator's round does (ledger.Prefetch).
		l.Prefetch(len(reqs), func(k int) (ledger.Claimant, *allotpb.GetCapacityRequest) { return ledger.Claimant{}, reqs[k] })
		for _, req := range reqs {
			s, err := l.Get(now, set, req)
			slots = append(slots, s...)
			if err != nil && r.failed == nil {
				r.failed = err
			}
		}
		round()
	}
	return r, nil
}
