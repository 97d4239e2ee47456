package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/allot/allot/internal/planet"
)

// The planet benchmark: a three-level tree (root, regions, clusters, the
// clients of each cluster) of pure ledgers in virtual time, one FAIR_SHARE
// resource, WAN latencies, a region cut off for 10 minutes, a root
// failover and demand waves (internal/planet). It fails when the clients
// ever hold more than the capacity.

// PlanetOptions configure RunPlanet.
type PlanetOptions struct {
	// ClientsPerCluster overrides the clients per cluster node (default
	// 100: 10 regions × 100 clusters × 100 = 100,000 clients; 1,000 is the
	// full planet of a million, which takes about half an hour on 2
	// shared cores). Short runs 2 × 10 × 100.
	ClientsPerCluster int `json:"clients_per_cluster,omitempty"`
}

// PlanetResult is a run's report: Markdown, and as JSON (planet.json)
// the machine and the simulation's measures.
type PlanetResult struct {
	Machine Machine `json:"machine"`
	res     *planet.Result
}

// planetJSON is PlanetResult's JSON: the simulation's fields beside the
// machine's.
type planetJSON struct {
	Machine Machine `json:"machine"`
	*planet.Result
}

// MarshalJSON writes the report as planet.json holds it.
func (r PlanetResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(planetJSON{r.Machine, r.res})
}

// UnmarshalJSON reads a planet.json.
func (r *PlanetResult) UnmarshalJSON(data []byte) error {
	var v planetJSON
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	r.Machine, r.res = v.Machine, v.Result
	return nil
}

// RunPlanet runs the planet simulation and writes planet.json, planet.md
// and planet.csv.
func RunPlanet(ctx context.Context, env *Env, o PlanetOptions) (*PlanetResult, error) {
	cfg := planet.Full()
	cfg.Clients = 100
	if env.Short {
		cfg = planet.Short()
	}
	if o.ClientsPerCluster > 0 {
		cfg.Clients = o.ClientsPerCluster
	}
	cfg.Workers = runtime.GOMAXPROCS(0)
	cfg.Progress = func(virtual, wall time.Duration) {
		env.progressf("planet: %v of %v virtual, %v wall", virtual, cfg.Duration(), wall.Round(time.Second))
	}
	machine := DescribeMachine()
	env.progressf("planet: %d regions × %d clusters × %d clients, %v of virtual time", cfg.Regions, cfg.Clusters, cfg.Clients, cfg.Duration())
	res, err := planet.Run(ctx, cfg)
	if res == nil {
		return nil, fmt.Errorf("bench: planet: %w", err)
	}
	out := &PlanetResult{Machine: machine, res: res}
	env.progressf("planet: max Σ in force %.6f× capacity, utilization %.4f, %.0fs wall", res.MaxInForce, res.Utilization, res.WallSeconds)
	if werr := env.writeJSON("planet.json", out); werr != nil && err == nil {
		err = werr
	}
	if werr := env.writeFile("planet.csv", out.csv()); werr != nil && err == nil {
		err = werr
	}
	if werr := env.writeFile("planet.md", []byte(out.Markdown())); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return out, fmt.Errorf("bench: planet: %w", err)
	}
	return out, nil
}

// Markdown is the report.
func (r *PlanetResult) Markdown() string {
	c := r.res.Config
	var b strings.Builder
	fmt.Fprintf(&b, "### Planet: a three-level tree in virtual time\n\n%s\n", r.Machine.Markdown())
	fmt.Fprintf(&b, "The pure ledgers (internal/ledger) of a root, %d regions, %d clusters per region and %d clients per cluster (%d clients) on one FAIR_SHARE resource of capacity %g (%g per client), driven in virtual time by internal/planet: "+
		"one-way WAN latencies %v–%v per link (cluster–region, region–root; each message delivered after its link's latency), clusters' rounds every %v, records committed at once. "+
		"Lease %v; regions ask the root every %v, clusters their region every %v and clients their cluster every %v (the ledger halves the refresh per level); a floor of half the fair share lasts %v. "+
		"Demand waves: each client wants its base (0.2–1.8× the mean share) times 1 + 0.3 sin(2πt/7 min) + 0.3 sin(2π(t/3 min + region/%d)), stepped every 30 s (a client whose wants move by more than a quarter and at least one unit asks at once, as the agent does), so that demand swings between about 0.7× and 1.3× the capacity and moves between regions. "+
		"Timeline: %v of warm-up; region-0 cut off from the root for %v; %v later the root's leader is lost, a successor takes over from the last committed record %v after that; %v more. %.0f s of wall time.\n\n",
		c.Regions, c.Clusters, c.Clients, r.res.ClientsTotal, c.Capacity(), c.Share, c.MinLatency, c.MaxLatency, c.Tick,
		c.Lease, c.Refresh, c.Refresh/2, c.Refresh/4, c.FloorLease, c.Regions,
		c.Warmup, c.Cut, c.AfterCut, c.Outage, c.AfterFailover, r.res.WallSeconds)
	fmt.Fprintf(&b, "- **Max Σ in force ÷ capacity over all %d clients, sampled every %v: %.6f** (%d samples above 1: %s).\n", r.res.ClientsTotal, c.Sample, r.res.MaxInForce, r.res.OverGrants, verdict(r.res.OverGrants == 0))
	fmt.Fprintf(&b, "- Utilization (Σ in force ÷ min(capacity, Σ wants), mean over samples from %v on, outside the cut): **%.2f%%** (lowest sample %.2f%%; counting only what clients want, %.2f%%). During the cut: %.2f%% (%.2f%%).\n",
		c.Warmup/3, 100*r.res.Utilization, 100*r.res.UtilizationMin, 100*r.res.Useful, 100*r.res.UtilizationCut, 100*r.res.UsefulCut)
	fmt.Fprintf(&b, "- Region-0's subtree during the cut: lowest coverage of its fair shares %.3f / %.3f / %.3f (root → region, region → clusters, clusters → clients): it runs on its lease, then its floor, then nothing once the floor ends, while the root keeps counting it.\n",
		r.res.CutLowest[0], r.res.CutLowest[1], r.res.CutLowest[2])
	fmt.Fprintf(&b, "- Root: %d rounds (one per request of a region), ledger time per round mean %.1f µs, p50 %.1f µs, p99 %.1f µs, max %.1f µs; rounds and sweeps keep it busy %.4f%% of the time.\n\n",
		r.res.Root.Rounds, r.res.Root.MeanMicro, r.res.Root.P50Micro, r.res.Root.P99Micro, r.res.Root.MaxMicro, 100*r.res.Root.Busy)
	b.WriteString("Reconvergence: per level, the coverage (Σ min(held, fair share) ÷ Σ fair share, the fair shares the tree gives with every link up, from the wants of the moment) before the event, its lowest after, and the seconds until it is back at 99% or, if lower, one point under the level's mean before the faults.\n\n")
	rows := [][]string{}
	names := []string{"root → regions", "regions → clusters", "clusters → clients"}
	for _, ev := range r.res.Events {
		for l := range 3 {
			back := "not within the run"
			if ev.Reconverged[l] >= 0 {
				back = f1(ev.Reconverged[l]) + " s"
			}
			rows = append(rows, []string{ev.Name, f0(ev.At) + " s", ev.Scope, names[l], f3(ev.Before[l]), f3(ev.Lowest[l]), f3(ev.Threshold[l]), back})
		}
	}
	b.WriteString(table([]string{"event", "at", "scope", "level", "before", "lowest", "target", "reconverged"}, rows))
	b.WriteString("\nTraffic per level (requests, each answered once, over the whole run):\n\n")
	rows = rows[:0]
	for _, lv := range r.res.Levels {
		short := ""
		if lv.Requests > 0 && lv.Confirms+lv.Inherited > 0 {
			short = fmt.Sprintf("%.0f%% (%.0f%% own shrink, %.0f%% passed on)", 100*float64(lv.Confirms+lv.Inherited)/float64(lv.Requests),
				100*float64(lv.Confirms)/float64(lv.Requests), 100*float64(lv.Inherited)/float64(lv.Requests))
		}
		rows = append(rows, []string{lv.Name, fmt.Sprint(lv.Servers), fmt.Sprint(lv.Claimants), fmt.Sprintf("%.0f s", lv.RefreshEach),
			fmt.Sprint(lv.Requests), f1(lv.PerSecond), f2(lv.PerServer), f2(lv.PerServer / float64(lv.Claimants)), short})
	}
	b.WriteString(table([]string{"level", "servers", "claimants each", "refresh", "requests", "req/s", "req/s per server", "req/s per claimant", "answered with the shortest refresh"}, rows))
	b.WriteString("\nUtilization and demand over time (every 5 s of virtual time, in planet.csv):\n\n```\n")
	for k, sm := range r.res.Series {
		if k%6 == 0 {
			fmt.Fprintf(&b, "%6.0f s  demand %.3f  in force %.3f  utilization %.3f  coverage %.3f %.3f %.3f  region-0 %.3f %.3f %.3f\n",
				sm.T, sm.Demand, sm.InForce, sm.Utilization, sm.Coverage[0], sm.Coverage[1], sm.Coverage[2], sm.CutCoverage[0], sm.CutCoverage[1], sm.CutCoverage[2])
		}
	}
	b.WriteString("```\n")
	return b.String()
}

// csv is the series: time, demand, in force, utilization, coverage per
// level, and region-0's.
func (r *PlanetResult) csv() []byte {
	var b strings.Builder
	b.WriteString("t_s,demand,in_force,utilization,useful,cov_root,cov_regions,cov_clusters,cut_root,cut_regions,cut_clusters\n")
	for _, sm := range r.res.Series {
		fmt.Fprintf(&b, "%.1f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f\n", sm.T, sm.Demand, sm.InForce, sm.Utilization, sm.Useful,
			sm.Coverage[0], sm.Coverage[1], sm.Coverage[2], sm.CutCoverage[0], sm.CutCoverage[1], sm.CutCoverage[2])
	}
	return []byte(b.String())
}
