package planet

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// Threshold is the coverage at which a level counts as reconverged: its
// nodes hold 99% of their fair shares, or (demand moves in waves, and the
// tree follows a refresh interval behind) within one point of the level's
// mean coverage in the steady stretch before the cut, if that is lower.
const Threshold = 0.99

// Run simulates cfg and returns what it measured. It fails with
// ErrOverGrant as soon as a sample finds the clients holding more than the
// capacity.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	began := time.Now()
	s, err := newSim(cfg)
	if err != nil {
		return nil, err
	}
	res := &Result{Config: cfg, ClientsTotal: cfg.Regions * cfg.Clusters * cfg.Clients}
	var samples []Sample
	tick, end := int64(cfg.Tick), s.start+int64(cfg.Duration())
	nextSample, nextSweep := s.start+int64(cfg.Sample), s.start+int64(time.Second)
	failedOver := false
	for now := s.start + tick; now <= end; now += tick {
		if (now-s.start)/tick%500 == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("planet: %w", ctx.Err())
		}
		if !failedOver && now >= s.downTo {
			// The successor takes over from the last committed record.
			if err := s.root.failover(now); err != nil {
				return nil, err
			}
			failedOver = true
		}
		if err := s.tick(now); err != nil {
			return nil, err
		}
		if cfg.Progress != nil && (now-s.start)%int64(time.Minute) == 0 {
			cfg.Progress(time.Duration(now-s.start), time.Since(began))
		}
		if now >= nextSweep {
			s.sweepAll(now)
			nextSweep += int64(time.Second)
		}
		if now >= nextSample {
			nextSample += int64(cfg.Sample)
			sm := s.sample(now)
			samples = append(samples, sm)
			res.MaxInForce = max(res.MaxInForce, sm.InForce)
			if sm.InForce > 1+1e-9 {
				res.OverGrants++
				return res, fmt.Errorf("%w: at %.1fs Σ in force is %.6f× the capacity", ErrOverGrant, sm.T, sm.InForce)
			}
		}
	}
	res.WallSeconds = time.Since(began).Seconds()
	s.analyze(res, samples)
	return res, nil
}

// shape keeps, per cluster, its clients' bases sorted with prefix sums, so
// that fair shares at any wave factor cost a search, not a pass.
type shape struct {
	sorted [][]float64 // per cluster
	prefix [][]float64 // prefix[c][k] = Σ sorted[c][:k]
}

func newShape(s *sim) shape {
	var sh shape
	for _, n := range s.clusters {
		b := make([]float64, len(n.clients))
		for k, c := range n.clients {
			b[k] = c.base
		}
		slices.Sort(b)
		p := make([]float64, len(b)+1)
		for k, v := range b {
			p[k+1] = p[k] + v
		}
		sh.sorted, sh.prefix = append(sh.sorted, b), append(sh.prefix, p)
	}
	return sh
}

// capped is Σ min(b, x) over a cluster's bases.
func (sh *shape) capped(c int, x float64) float64 {
	b := sh.sorted[c]
	k, _ := slices.BinarySearch(b, x)
	return sh.prefix[c][k] + float64(len(b)-k)*x
}

// level returns the water level λ with Σ min(f·b, λ) = share over cluster
// c's clients (+Inf when they want less than share).
func (sh *shape) level(c int, f, share float64) float64 {
	if f*sh.prefix[c][len(sh.sorted[c])] <= share {
		return math.Inf(1)
	}
	lo, hi := 0.0, share
	for range 60 {
		mid := (lo + hi) / 2
		if f*sh.capped(c, mid/f) < share {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// waterfill divides capacity among claimants with the given wants and
// weights, max-min fair per unit of weight (FAIR_SHARE over child bands).
func waterfill(wants, weights []float64, capacity float64) []float64 {
	total := 0.0
	for _, w := range wants {
		total += w
	}
	out := slices.Clone(wants)
	if total <= capacity {
		return out
	}
	lo, hi := 0.0, capacity
	for range 80 {
		mid, sum := (lo+hi)/2, 0.0
		for k, w := range wants {
			sum += min(w, weights[k]*mid)
		}
		if sum < capacity {
			lo = mid
		} else {
			hi = mid
		}
	}
	for k, w := range wants {
		out[k] = min(w, weights[k]*hi)
	}
	return out
}

// sample measures every client at now: what is in force against the
// capacity and the demand, and how much of its fair share each level
// holds (the shares the tree gives with every link up, from the wants of
// now).
func (s *sim) sample(now int64) Sample {
	cfg := s.cfg
	sm := Sample{T: float64(now-s.start) / 1e9}
	// Fair shares top down.
	nc := len(s.regions)
	rw, rweight := make([]float64, nc), make([]float64, nc)
	cw := make([]float64, len(s.clusters))
	f := make([]float64, nc)
	for r := range s.regions {
		f[r] = s.wave(r, now)
		rweight[r] = float64(cfg.Clusters * cfg.Clients)
	}
	for k, n := range s.clusters {
		cw[k] = f[n.region] * s.shape.prefix[k][len(s.shape.sorted[k])]
		rw[n.region] += cw[k]
	}
	rshare := waterfill(rw, rweight, cfg.Capacity())
	cshare := make([]float64, len(s.clusters))
	cweight := make([]float64, cfg.Clusters)
	for k := range cweight {
		cweight[k] = float64(cfg.Clients)
	}
	for r := range s.regions {
		lo := r * cfg.Clusters
		copy(cshare[lo:lo+cfg.Clusters], waterfill(cw[lo:lo+cfg.Clusters], cweight, rshare[r]))
	}
	var cov, cut [3][2]float64 // per level: Σ min(held, share), Σ share
	add := func(level int, region int, held, share float64) {
		cov[level][0] += min(held, share)
		cov[level][1] += share
		if region == 0 {
			cut[level][0] += min(held, share)
			cut[level][1] += share
		}
	}
	for r, n := range s.regions {
		add(0, r, n.up.inForce(now), rshare[r])
	}
	wants, held, useful := 0.0, 0.0, 0.0
	for k, n := range s.clusters {
		add(1, n.region, n.up.inForce(now), cshare[k])
		fr := f[n.region]
		lambda := s.shape.level(k, fr, cshare[k])
		var h, share, hs float64
		for i := range n.clients {
			c := &n.clients[i]
			w := fr * c.base
			x := c.g.inForce(now)
			wants += w
			h += x
			useful += min(x, w)
			sh := min(w, lambda)
			share += sh
			hs += min(x, sh)
		}
		held += h
		cov[2][0] += hs
		cov[2][1] += share
		if n.region == 0 {
			cut[2][0] += hs
			cut[2][1] += share
		}
	}
	sm.Demand, sm.InForce = wants/cfg.Capacity(), held/cfg.Capacity()
	sm.Utilization = held / min(cfg.Capacity(), wants)
	sm.Useful = useful / min(cfg.Capacity(), wants)
	for l := range 3 {
		sm.Coverage[l] = ratio(cov[l][0], cov[l][1])
		sm.CutCoverage[l] = ratio(cut[l][0], cut[l][1])
	}
	return sm
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 1
	}
	return a / b
}

// analyze turns the samples and counters into res.
func (s *sim) analyze(res *Result, samples []Sample) {
	cfg := s.cfg
	secs := cfg.Duration().Seconds()
	at := func(t int64) float64 { return float64(t-s.start) / 1e9 }
	cutFrom, cutTo, down, up := at(s.cutFrom), at(s.cutTo), at(s.downFrom), at(s.downTo)
	var n, sum, nc, sumc, usefulSum, usefulCut float64
	res.UtilizationMin = math.Inf(1)
	settled := cfg.Warmup.Seconds() / 3 // the tree has filled by then
	for _, sm := range samples {
		switch {
		case sm.T < settled:
		case sm.T >= cutFrom && sm.T < cutTo:
			nc++
			sumc += min(sm.Utilization, 1)
			usefulCut += sm.Useful
		default:
			n++
			sum += min(sm.Utilization, 1)
			usefulSum += sm.Useful
			res.UtilizationMin = min(res.UtilizationMin, sm.Utilization)
		}
	}
	res.Utilization, res.UtilizationCut = sum/max(n, 1), sumc/max(nc, 1)
	res.Useful, res.UsefulCut = usefulSum/max(n, 1), usefulCut/max(nc, 1)
	res.CutLowest = [3]float64{1, 1, 1}
	for _, sm := range samples {
		if sm.T >= cutFrom && sm.T < cutTo {
			for l := range 3 {
				res.CutLowest[l] = min(res.CutLowest[l], sm.CutCoverage[l])
			}
		}
	}
	var base, baseCut [3]float64
	nb := 0.0
	for _, sm := range samples {
		if sm.T >= settled && sm.T < cutFrom {
			nb++
			for l := range 3 {
				base[l] += sm.Coverage[l]
				baseCut[l] += sm.CutCoverage[l]
			}
		}
	}
	for l := range 3 {
		base[l] = min(Threshold, base[l]/max(nb, 1)-0.01)
		baseCut[l] = min(Threshold, baseCut[l]/max(nb, 1)-0.01)
	}
	res.Events = []Event{
		s.event("cut healed", cutTo, true, baseCut, samples),
		s.event("root successor took over", up, false, base, samples),
	}
	res.Events[1].Outage = up - down
	var gets, confirms, inherited int64
	for _, n := range s.clusters {
		gets += n.gets
		confirms += n.confirms
		inherited += n.inherited
	}
	res.Levels = [3]Level{
		{Name: "regions → root", Servers: 1, Claimants: cfg.Regions, Requests: s.served[0], RefreshEach: cfg.Refresh.Seconds()},
		{Name: "clusters → region", Servers: cfg.Regions, Claimants: cfg.Clusters, Requests: s.served[1], RefreshEach: cfg.Refresh.Seconds() / 2},
		{Name: "clients → cluster", Servers: cfg.Regions * cfg.Clusters, Claimants: cfg.Clients, Requests: gets, RefreshEach: cfg.Refresh.Seconds() / 4, Confirms: confirms, Inherited: inherited},
	}
	for k := range res.Levels {
		lv := &res.Levels[k]
		lv.PerSecond = float64(lv.Requests) / secs
		lv.PerServer = lv.PerSecond / float64(lv.Servers)
	}
	rc := RootCost{Rounds: len(s.rootRounds)}
	if rc.Rounds > 0 {
		d := slices.Clone(s.rootRounds)
		slices.Sort(d)
		var total time.Duration
		for _, x := range d {
			total += x
		}
		us := func(x time.Duration) float64 { return float64(x) / 1e3 }
		rc.MeanMicro = us(total) / float64(len(d))
		rc.P50Micro, rc.P99Micro, rc.MaxMicro = us(d[len(d)/2]), us(d[len(d)*99/100]), us(d[len(d)-1])
		rc.Busy = (total + s.rootSweeps).Seconds() / secs
	}
	res.Root = rc
	// A series point every 5 s (or every sample when fewer).
	every := max(int(5*time.Second/cfg.Sample), 1)
	for k, sm := range samples {
		if k%every == every-1 {
			res.Series = append(res.Series, sm)
		}
	}
}

// event measures, per level, the coverage before the event at t, the
// lowest after it, and how long until it is back at threshold (the cut
// region's coverage when cut is set, the whole tree's otherwise).
func (s *sim) event(name string, t float64, cut bool, threshold [3]float64, samples []Sample) Event {
	ev := Event{Name: name, At: t, Scope: "whole tree", Threshold: threshold, Lowest: [3]float64{1, 1, 1}, Reconverged: [3]float64{-1, -1, -1}}
	if cut {
		ev.Scope = "region-0's subtree"
	}
	pick := func(sm Sample) [3]float64 {
		if cut {
			return sm.CutCoverage
		}
		return sm.Coverage
	}
	for _, sm := range samples {
		c := pick(sm)
		if sm.T < t {
			ev.Before = c
			continue
		}
		for l := range 3 {
			if ev.Reconverged[l] >= 0 {
				continue
			}
			ev.Lowest[l] = min(ev.Lowest[l], c[l])
			if c[l] >= threshold[l] {
				ev.Reconverged[l] = sm.T - t
			}
		}
	}
	return ev
}
