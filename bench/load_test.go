package bench

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLoadInProcess runs a tiny load against in-process helpers: it checks
// the plumbing (replies counted, no errors), not the speed.
// Requests in JSON too: an error reply (a request the coordinator could
// not read) is counted as one.
func TestLoadInProcess(t *testing.T) {
	for _, json := range []bool{false, true} {
		env := &Env{Short: true}
		o := LoadOptions{ClosedLoop: ClosedLoop{Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, Phases: 1, Conns: 2, Clients: 8, Pipeline: 2}, Resources: 3, PerRequest: 2, JSON: json}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r, err := RunLoad(ctx, env, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range []LoadTarget{r.Baseline, r.Coordinator} {
			if tg.Requests == 0 || tg.Errors != 0 {
				t.Errorf("JSON %v: %s: %d requests, %d errors", json, tg.Name, tg.Requests, tg.Errors)
			}
		}
		if r.CoordinatorStats == nil || r.CoordinatorStats.Requests == 0 {
			t.Errorf("JSON %v: coordinator stats: %+v", json, r.CoordinatorStats)
		}
		t.Log("\n" + r.Markdown())
	}
}

// TestQuotaInProcess runs a tiny quota benchmark against in-process
// helpers, with one and two partitions: every decision answered, none an
// error, all OK (the buckets never run dry).
func TestQuotaInProcess(t *testing.T) {
	env := &Env{Short: true}
	o := QuotaOptions{ClosedLoop: ClosedLoop{Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, Phases: 1, Conns: 2, Clients: 8, Pipeline: 2}, Namespaces: 4, Partitions: []int{1, 2}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := RunQuota(ctx, env, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(r.Runs))
	}
	for _, run := range r.Runs {
		for _, tg := range []LoadTarget{run.Baseline, run.Quota} {
			if tg.Requests == 0 || tg.Errors != 0 {
				t.Errorf("%s: %d requests, %d errors", tg.Name, tg.Requests, tg.Errors)
			}
		}
		if run.Statuses["OK"] == 0 || len(run.Statuses) != 1 {
			t.Errorf("%d partitions: decisions sampled %v, want only OK", run.Partitions, run.Statuses)
		}
		if len(run.TakesPerPartition) != run.Partitions || slices.Contains(run.TakesPerPartition, 0) {
			t.Errorf("%d partitions: takes per partition %v, want every partition deciding", run.Partitions, run.TakesPerPartition)
		}
	}
	t.Log("\n" + r.Markdown())
}

// TestLoadLeasePartitionsInProcess runs the load with four lease
// partitions beside the single coordinator, and the same four served by
// one helper: every partition answers its requests, none an error, and
// each counts some share of them.
func TestLoadLeasePartitionsInProcess(t *testing.T) {
	env := &Env{Short: true}
	o := LoadOptions{ClosedLoop: ClosedLoop{Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, Phases: 1, Conns: 2, Clients: 40, Pipeline: 1},
		Resources: 40, PerRequest: 1, LeasePartitions: 4, PartitionsOneProcess: true}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := RunLoad(ctx, env, o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Partitioned == nil || r.Partitioned.Requests == 0 || r.Partitioned.Errors != 0 {
		t.Fatalf("partitioned target: %+v", r.Partitioned)
	}
	if r.OneProcess == nil || r.OneProcess.Requests == 0 || r.OneProcess.Errors != 0 {
		t.Fatalf("partitions in one process: %+v", r.OneProcess)
	}
	if len(r.PartitionShares) != 4 || slices.Contains(r.PartitionShares, 0) {
		t.Errorf("shares of the requests per partition %v, want every partition answering", r.PartitionShares)
	}
	t.Log("\n" + r.Markdown())
}

// TestPartitionProcsDefault checks the lease partitions' GOMAXPROCS: by
// default each process's share of the cores, at least one; a value
// given is kept.
func TestPartitionProcsDefault(t *testing.T) {
	for _, tc := range []struct{ cores, n, want int }{
		{2, 4, 1}, {8, 4, 2}, {16, 3, 5}, {1, 2, 1},
	} {
		if got := coreShare(tc.cores, tc.n); got != tc.want {
			t.Errorf("share of %d cores among %d processes: %d, want %d", tc.cores, tc.n, got, tc.want)
		}
	}
	o := LoadOptions{LeasePartitions: 4}
	o.fill(true)
	if want := coreShare(runtime.GOMAXPROCS(0), 4); o.PartitionProcs != want {
		t.Errorf("default GOMAXPROCS of 4 partitions: %d, want %d", o.PartitionProcs, want)
	}
	o = LoadOptions{LeasePartitions: 4, PartitionProcs: 3}
	o.fill(true)
	if o.PartitionProcs != 3 {
		t.Errorf("GOMAXPROCS given as 3 became %d", o.PartitionProcs)
	}
	o = LoadOptions{}
	o.fill(true)
	if o.PartitionProcs != 0 {
		t.Errorf("without partitions, GOMAXPROCS of partitions %d, want 0", o.PartitionProcs)
	}
}

// TestLoadVerdicts: the report judges throughput and CPU per request
// against the lease path's targets, each on its own.
func TestLoadVerdicts(t *testing.T) {
	for _, c := range []struct {
		ratio, cpu float64
		want       []string
	}{
		{0.95, 1.2, []string{"throughput 0.95× (target ≥ 0.9×: met)", "CPU per request 1.20× (target ≤ 1.3×: met)"}},
		{0.85, 1.5, []string{"throughput 0.85× (target ≥ 0.9×: **not met**)", "CPU per request 1.50× (target ≤ 1.3×: **not met**)"}},
		{0.95, 1.5, []string{"(target ≥ 0.9×: met)", "CPU per request 1.50× (target ≤ 1.3×: **not met**)"}},
	} {
		r := &LoadResult{Ratio: c.ratio, CPURatio: c.cpu, TargetRatio: TargetLoadRatio, TargetCPURatio: TargetLoadCPURatio}
		md := r.Markdown()
		for _, w := range c.want {
			if !strings.Contains(md, w) {
				t.Errorf("ratio %v, CPU %v: the report lacks %q:\n%s", c.ratio, c.cpu, w, md)
			}
		}
	}
}
