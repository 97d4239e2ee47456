package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allot/allot/internal/alloc"
)

// Scenario 7's measurements: samples, analysis, plots and the report.

// sample records one 50 ms sample: wants, leases at every level, and
// which levels match the tree's shares.
func (o *TreeOutcome) sample(now time.Duration, nodes []*treeNode, clients []*treeClient, mon *treeMonitor) {
	nowNS := time.Now().UnixNano()
	w := make([]float64, len(clients))
	h := make([]float64, len(clients))
	var inForce float64
	noLease := false
	for k, c := range clients {
		w[k] = c.wants()
		st := c.l.Status()
		inForce += st.Capacity
		noLease = noLease || !st.Leased
	}
	nh := make([]float64, len(nodes))
	mon.mu.Lock()
	for k := range clients {
		h[k] = mon.has(strconv.Itoa(k), nowNS)
	}
	for i, n := range nodes[1:] {
		nh[i+1] = mon.has(n.name, nowNS)
	}
	mon.mu.Unlock()
	if noLease && now >= treeWarmup {
		o.SafeSamples++
	}
	// A node's own lease against what it has leased out.
	short := 0.0
	if o.underSince == nil {
		o.underSince = make([]float64, len(nodes))
	}
	for i, n := range nodes[1:] {
		var out float64
		for _, ci := range n.children {
			out += nh[ci]
		}
		for _, k := range n.clients {
			out += h[k]
		}
		lease := nh[i+1]
		short = math.Max(short, out-lease)
		wants, _ := subtree(nodes, i+1, w)
		switch {
		case lease <= 0 || wants <= 1.01*lease || out >= 0.95*lease:
			o.underSince[i+1] = 0
		case o.underSince[i+1] == 0:
			o.underSince[i+1] = now.Seconds()
		case now.Seconds()-o.underSince[i+1] > o.Underuse.ForS:
			o.Underuse = Underuse{Node: n.name, FromS: o.underSince[i+1], ForS: now.Seconds() - o.underSince[i+1]}
		}
	}
	if short > 1e-6 {
		o.ShortfallSamples++
		o.MaxShortfall = math.Max(o.MaxShortfall, short)
	}
	o.MaxInForceRatio = math.Max(o.MaxInForceRatio, inForce/treeCapacity)

	// The tree's shares: fair share per level on summed wants, weighted
	// by the clients behind each claimant (what the protocol computes).
	share := make([]float64, len(nodes))
	cshare := make([]float64, len(clients))
	share[0] = treeCapacity
	var divide func(i int)
	divide = func(i int) {
		n := nodes[i]
		if n.depth == 2 {
			d := make([]alloc.Demand, len(n.clients))
			for j, k := range n.clients {
				d[j] = alloc.Demand{Wants: w[k], Weight: 1}
			}
			alloc.FairShare(share[i], d, nil)
			for j, k := range n.clients {
				cshare[k] = d[j].Target
			}
			return
		}
		d := make([]alloc.Demand, len(n.children))
		for j, ci := range n.children {
			wants, num := subtree(nodes, ci, w)
			d[j] = alloc.Demand{Wants: wants, Weight: float64(num)}
		}
		alloc.FairShare(share[i], d, nil)
		for j, ci := range n.children {
			share[ci] = d[j].Target
			divide(ci)
		}
	}
	divide(0)
	var conv [treeLevels]bool
	for level := range treeLevels {
		var has, target, dev float64
		if level < treeLevels-1 {
			for i, n := range nodes {
				if n.depth == level+1 {
					has, target, dev = has+nh[i], target+share[i], dev+math.Abs(nh[i]-share[i])
				}
			}
		} else {
			for k := range clients {
				has, target, dev = has+h[k], target+cshare[k], dev+math.Abs(h[k]-cshare[k])
			}
		}
		conv[level] = has >= 0.99*target && dev <= simConvergeTol*treeCapacity
	}

	s := &o.series
	s.t = append(s.t, now.Seconds())
	s.totalW, s.totalH, s.inForce = append(s.totalW, sum(w)), append(s.totalH, sum(h)), append(s.inForce, inForce)
	rh := make([]float64, len(nodes[0].children))
	rw := make([]float64, len(nodes[0].children))
	rl := make([]float64, len(nodes[0].children))
	ro := make([]float64, len(nodes[0].children))
	for j, ri := range nodes[0].children {
		rl[j] = nh[ri]
		for _, ci := range nodes[ri].children {
			ro[j] += nh[ci]
		}
		for k, c := range clients {
			if c.region == nodes[ri].region {
				rh[j] += h[k]
				rw[j] += w[k]
			}
		}
	}
	s.regionH, s.regionW = append(s.regionH, rh), append(s.regionW, rw)
	s.rootLease, s.regionOut = append(s.rootLease, rl), append(s.regionOut, ro)
	s.conv = append(s.conv, conv)

	// Fairness over contended samples after the warm-up.
	if now < treeWarmup || sum(w) <= treeCapacity {
		return
	}
	d := make([]alloc.Demand, len(clients))
	for k := range clients {
		d[k] = alloc.Demand{Wants: w[k], Weight: 1}
	}
	alloc.FairShare(treeCapacity, d, nil)
	fair := make([]float64, len(clients))
	for k := range d {
		fair[k] = d[k].Target
	}
	o.Jain += jain(h, fair)
	o.JainTree += jain(h, cshare)
	o.Samples++ // contended samples; normalized in analyze
}

// subtree sums the wants and counts the clients under node i.
func subtree(nodes []*treeNode, i int, w []float64) (float64, int) {
	n := nodes[i]
	var wants float64
	num := len(n.clients)
	for _, k := range n.clients {
		wants += w[k]
	}
	for _, ci := range n.children {
		cw, cn := subtree(nodes, ci, w)
		wants, num = wants+cw, num+cn
	}
	return wants, num
}

// jain is Jain's fairness index of has[k] ÷ fair[k] over fair[k] > 0.
func jain(has, fair []float64) float64 {
	var sx, sx2 float64
	n := 0
	for k := range fair {
		if fair[k] > 0 {
			x := has[k] / fair[k]
			sx, sx2, n = sx+x, sx2+x*x, n+1
		}
	}
	if sx2 == 0 {
		return 0
	}
	return sx * sx / (float64(n) * sx2)
}

// analyze computes utilization, overshoot per level and reconvergence.
func (o *TreeOutcome) analyze(evs []leaseSeen) {
	s := &o.series
	if o.Samples > 0 {
		o.Jain /= float64(o.Samples)
		o.JainTree /= float64(o.Samples)
	}
	o.Samples = len(s.t)
	var utl float64
	nu := 0
	for i := range s.t {
		if s.t[i] < treeWarmup.Seconds() {
			continue
		}
		if den := math.Min(treeCapacity, s.totalW[i]); den > 0 {
			utl += math.Min(1, s.totalH[i]/den)
			nu++
		}
	}
	o.Utilization = utl / float64(max(nu, 1))

	// Overshoot per level, in the order the leases were seen: a lease
	// replaces its holder's previous one when it arrives and counts until
	// it expires.
	slices.SortStableFunc(evs, func(a, b leaseSeen) int { return cmp.Compare(a.arrival, b.arrival) })
	o.Levels = nil
	for level := range treeLevels {
		lv := TreeLevel{Level: treeLevelNames[level]}
		cur := map[string]leaseSeen{}
		over := false
		for _, ev := range evs {
			if ev.level != level {
				continue
			}
			lv.Leases++
			if ev.capacity < 0 {
				o.NegativeGrants++
			}
			cur[ev.who] = ev
			at := ev.arrival
			var total float64
			for _, c := range cur {
				if c.expiry > at {
					total += c.capacity
				}
			}
			ratio := total / treeCapacity
			lv.MaxLeaseRatio = math.Max(lv.MaxLeaseRatio, ratio)
			if ratio > 1+simOverTol {
				if !over {
					lv.OvershootEvents++
				}
				over = true
			} else {
				over = false
			}
		}
		o.Levels = append(o.Levels, lv)
	}
	client := o.Levels[treeLevels-1]
	o.OvershootEvents, o.MaxLeaseRatio = client.OvershootEvents, client.MaxLeaseRatio

	// Reconvergence per level after the start and each shift, until the
	// next shift.
	o.Shifts = append([]TreeShift{{What: "start", ReconvergeS: [treeLevels]float64{-1, -1, -1}}}, o.Shifts...)
	for n := range o.Shifts {
		until := math.Inf(1)
		if n+1 < len(o.Shifts) {
			until = o.Shifts[n+1].AtS
		}
		for level := range treeLevels {
			o.Shifts[n].ReconvergeS[level] = s.reconverge(level, o.Shifts[n].AtS, until)
		}
	}
	// And after each step of the random walk, until the next change.
	var changes []float64
	for _, sh := range o.Shifts {
		changes = append(changes, sh.AtS)
	}
	changes = append(changes, s.steps...)
	slices.Sort(changes)
	for level := range treeLevels {
		var times []float64
		f := &o.Steps[level]
		for _, at := range s.steps {
			if at < treeWarmup.Seconds() {
				continue
			}
			until := math.Inf(1)
			if j, _ := slices.BinarySearch(changes, math.Nextafter(at, math.Inf(1))); j < len(changes) {
				until = changes[j]
			}
			f.Steps++
			if v := s.reconverge(level, at, until); v >= 0 {
				times = append(times, v)
			} else {
				f.Missed++
			}
		}
		if len(times) > 0 {
			slices.Sort(times)
			f.MedianS, f.MaxS = times[len(times)/2], times[len(times)-1]
		}
	}
}

// reconverge returns the time from from to the first sample before until
// where level is converged, or -1.
func (s *treeSeries) reconverge(level int, from, until float64) float64 {
	for i := range s.t {
		if s.t[i] >= from && s.t[i] < until && s.conv[i][level] {
			return s.t[i] - from
		}
	}
	return -1
}

func (s *treeSeries) csv() []byte {
	var b strings.Builder
	b.WriteString("t_s,total_wants,total_has,in_force,capacity")
	n := 0
	if len(s.regionH) > 0 {
		n = len(s.regionH[0])
	}
	for r := range n {
		fmt.Fprintf(&b, ",wants_region_%d,has_region_%d,root_lease_region_%d,cluster_leases_region_%d", r, r, r, r)
	}
	for l := range treeLevels {
		fmt.Fprintf(&b, ",converged_level_%d", l)
	}
	b.WriteString("\n")
	for i := range s.t {
		fmt.Fprintf(&b, "%.3f,%.2f,%.2f,%.2f,%g", s.t[i], s.totalW[i], s.totalH[i], s.inForce[i], treeCapacity)
		for r := range n {
			fmt.Fprintf(&b, ",%.2f,%.2f,%.2f,%.2f", s.regionW[i][r], s.regionH[i][r], s.rootLease[i][r], s.regionOut[i][r])
		}
		for l := range treeLevels {
			fmt.Fprintf(&b, ",%t", s.conv[i][l])
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

func (o *TreeOutcome) plot() []byte {
	s := &o.series
	c := chart{title: "Scenario 7: root, 3 regions × 3 clusters × 5 clients, capacity 500; spikes +100; faults dashed",
		xLabel: "time (s; refresh interval 500 ms, leases 10 s)", yLabel: "capacity", width: 1100, height: 480}
	capY := make([]float64, len(s.t))
	for i := range capY {
		capY[i] = treeCapacity
	}
	c.series = append(c.series,
		series{name: "root capacity", x: s.t, y: capY, color: "#d62728", dash: true},
		series{name: "total wants", x: s.t, y: s.totalW, color: "#ff7f0e"},
		series{name: "total has (client leases)", x: s.t, y: s.totalH, color: "#1f77b4"},
	)
	colors := []string{"#2ca02c", "#9467bd", "#8c564b"}
	for r := range o.Scenario.Regions {
		y := make([]float64, len(s.t))
		for i := range s.t {
			y[i] = s.regionH[i][r]
		}
		c.series = append(c.series, series{name: fmt.Sprintf("has, region %d", r), x: s.t, y: y, color: colors[r%len(colors)]})
	}
	maxY := treeCapacity * 1.2
	for _, v := range s.totalW {
		maxY = math.Max(maxY, v*1.05)
	}
	c.yMin, c.yMax = 0, math.Min(maxY, treeCapacity*3)
	// The faults as vertical dashed lines.
	for _, sh := range o.Shifts {
		if sh.What == "leader-lost" || sh.What == "cut" || sh.What == "restore" {
			c.series = append(c.series, series{name: fmt.Sprintf("%s %.0fs", sh.What, sh.AtS), x: []float64{sh.AtS, sh.AtS},
				y: []float64{0, c.yMax}, color: "#7f7f7f", dash: true})
		}
	}
	return c.svg()
}

// Markdown renders the outcome: figures, per level, per shift, the plot.
func (o *TreeOutcome) Markdown() string {
	var b strings.Builder
	b.WriteString("### Scenario 7: a three-level tree\n\n")
	fmt.Fprintf(&b, "Real coordinators (FAIR_SHARE, 20 ms rounds), one per node, on %d nats-servers (one per node, each its own JetStream domain) joined by leaf-node connections: a root with capacity %g, %d regions, %d clusters per region, %d clients per cluster (%d agents, one NATS connection each, at their cluster's node). Leases of %v refreshed every %v by the root's children and twice as often at each level below (Doorman's decay factor 0.5), floors of half the fair share lasting %v (time compressed 10× against Doorman's 5 s refresh and allot's 60 s leases and 5 min floor leases); wants start at %g and follow a random walk (step every %v, σ 1.5, reverting to %.1f so that the total hovers around capacity); mishaps: a client's wants +%g and back; %s run as two elected replicas whose leader's connection is closed; a region's leaf link to the root cut, then restored. %.0fs of compressed time after %.1fs of setup. Leases are observed on the wire at every level (replies to the clients' and coordinators' inboxes, on each level's server).\n\n",
		1+o.Scenario.Regions*(1+o.Scenario.Clusters), o.Capacity, o.Scenario.Regions, o.Scenario.Clusters, o.Scenario.Clients,
		o.Scenario.Regions*o.Scenario.Clusters*o.Scenario.Clients, o.Lease, o.Refresh, treeFloorLease, treeWants, simStep, treeMean, treeSpike,
		o.Scenario.ReplicaNode, o.RunS, o.SetupS)
	fmt.Fprintf(&b, "- Utilization (Σ client leases ÷ min(capacity, Σ wants), 50 ms samples after the first 3 s): **%.2f%%** (target ≥ %.0f%%: %s).\n",
		o.Utilization*100, TargetUtilization*100, verdict(o.Utilization >= TargetUtilization))
	fmt.Fprintf(&b, "- Overshoot (Σ unexpired client leases above the root's capacity, in the order the leases reached the clients' servers): **%d events, max %.2f%%** of capacity (target 0: %s). Negative grants: %d.\n",
		o.OvershootEvents, o.MaxLeaseRatio*100, verdict(o.OvershootEvents == 0), o.NegativeGrants)
	fmt.Fprintf(&b, "- Capacity in force at the agents (leases, or the safe capacity without one), sampled: max %.2f%% of capacity; %d samples with some client without a lease.\n",
		o.MaxInForceRatio*100, o.SafeSamples)
	fmt.Fprintf(&b, "- Jain's index of has ÷ fair share over all 45 clients: %.3f; against the tree's own shares (fair share per level on summed wants): %.3f.\n", o.Jain, o.JainTree)
	if o.FailoverS > 0 {
		fmt.Fprintf(&b, "- Leader of %s lost: the follower's first lease to a child %.2fs later (election TTL 3 s).\n", o.Scenario.ReplicaNode, o.FailoverS)
	}
	if u := o.Underuse; u.ForS > 0 {
		fmt.Fprintf(&b, "- Longest stretch in which a node handed out < 95%% of its own lease while its clients wanted more: %s, %.2fs from %.1fs.\n", u.Node, u.ForS, u.FromS)
	}
	fmt.Fprintf(&b, "- Nodes that had leased out more than their own lease (the parent still counts it as theirs): %d samples, by up to %.2f.\n", o.ShortfallSamples, o.MaxShortfall)
	fmt.Fprintf(&b, "- Reconvergence (first 50 ms sample where a level's leases add up to ≥ 99%% of its shares and are within 5%% of capacity of them; target ≤ 2 refresh intervals = %v per level, %v through the three levels) after each of the random walk's %d steps (1 s apart) and after each mishap, below.\n\n",
		TargetReconvergence, treeLevels*TargetReconvergence, o.Steps[0].Steps)
	var steps [][]string
	for l, f := range o.Steps {
		steps = append(steps, []string{treeLevelNames[l], fmt.Sprintf("%.2fs", f.MedianS), fmt.Sprintf("%.2fs", f.MaxS), fmt.Sprintf("%d of %d", f.Missed, f.Steps)})
	}
	b.WriteString(table([]string{"after a step of the walk", "median", "max", "not settled before the next change"}, steps))
	b.WriteString("\n")
	var rows [][]string
	for _, lv := range o.Levels {
		rows = append(rows, []string{lv.Level, strconv.Itoa(lv.Leases), strconv.Itoa(lv.OvershootEvents), f2(lv.MaxLeaseRatio * 100)})
	}
	b.WriteString(table([]string{"leases", "seen", "overshoots", "max Σ leases % of root capacity"}, rows))
	b.WriteString("\n")
	rows = nil
	for _, sh := range o.Shifts {
		row := []string{fmt.Sprintf("%.1f", sh.AtS), sh.What, sh.On}
		for _, v := range sh.ReconvergeS {
			row = append(row, reconv(v))
		}
		rows = append(rows, row)
	}
	b.WriteString(table([]string{"at s", "shift", "on", "root → regions", "regions → clusters", "clusters → clients"}, rows))
	b.WriteString("\nDoorman's scenario 7 (its own simulation, a simulated hour, 5 s refresh): 96.6% handed out on average, 14 overshoots up to 106.05%, up to 2 minutes to catch up after a shift.\n\n![scenario 7](sim7.svg)\n")
	return b.String()
}

func reconv(v float64) string {
	if v < 0 {
		return "not within window"
	}
	return fmt.Sprintf("%.2fs", v)
}

func (o *TreeOutcome) headlineRows() [][]string {
	return [][]string{{"simulation, scenario 7 (3-level tree, 45 clients): utilization, overshoot", fmt.Sprintf("≥ %.0f%%, no overshoot", TargetUtilization*100),
		fmt.Sprintf("%.2f%%, %d overshoots (max %.2f%%), Jain %.3f", o.Utilization*100, o.OvershootEvents, o.MaxLeaseRatio*100, o.Jain),
		verdict(o.Utilization >= TargetUtilization && o.OvershootEvents == 0 && o.NegativeGrants == 0)}}
}
