package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/spf13/pflag"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/quotaserver"
)

// nodeStatus is one line of `allot status`.
type nodeStatus struct {
	Node string `json:"node"`
	// Leader, Term and Since come from the election bucket.
	Leader string    `json:"leader,omitempty"`
	Term   uint64    `json:"term,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	// Replicas are the replicas that answered, with their own view.
	Replicas []coordinator.ReplicaStatus `json:"replicas"`
	// Parent is the node's parent (from its replicas), and Serving the
	// serving leader's coordinator STATS: per resource its capacity (on a
	// child, its lease from the parent), outstanding and claimants.
	Parent  string             `json:"parent,omitempty"`
	Serving *coordinator.Stats `json:"serving,omitempty"`
	// Quota are the node's quota partitions, by partition number.
	Quota []*partitionStatus[quotaserver.Stats] `json:"quota,omitempty"`
	// Domain are the node's domain-limit partitions.
	Domain []*partitionStatus[domainserver.Stats] `json:"domain,omitempty"`
}

// partitionStatus is one quota or domain-limit partition of a node in
// `allot status`.
type partitionStatus[S any] struct {
	Partition int `json:"partition"`
	// Leader, Term and Since come from the election bucket.
	Leader string    `json:"leader,omitempty"`
	Term   uint64    `json:"term,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	// Serving is the serving leader's STATS (quotaserver.Stats: buckets,
	// takes and events per namespace; domainserver.Stats: holds, copies,
	// transfers, learning and counters).
	Serving *S `json:"serving,omitempty"`
}

// partition returns partition p of list, adding it if needed.
func partition[S any](list *[]*partitionStatus[S], p int) *partitionStatus[S] {
	for _, q := range *list {
		if q.Partition == p {
			return q
		}
	}
	q := &partitionStatus[S]{Partition: p}
	*list = append(*list, q)
	return q
}

// partitionElectionKey parses the election key of a partition of kind
// ("quota" or "domain"), which key(node, partition) writes.
func partitionElectionKey(k, kind string, key func(string, int) string) (node string, partition int, ok bool) {
	node, rest, ok := strings.Cut(k, "."+kind+".")
	if !ok {
		return "", 0, false
	}
	p, err := strconv.Atoi(rest)
	if err != nil || key(node, p) != k {
		return "", 0, false
	}
	return node, p, true
}

func defineStatus(fs *pflag.FlagSet) runFunc {
	var conn connFlags
	conn.register(fs)
	bucket := fs.String("election-bucket", election.DefaultBucket, "election KV bucket")
	wait := fs.Duration("wait", 500*time.Millisecond, "how long to collect replica replies")
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		if err := positiveFlag("wait", *wait); err != nil {
			return err
		}
		nc, err := conn.dial("allot status")
		if err != nil {
			return err
		}
		defer nc.Close()
		nodes, err := collectStatus(ctx, nc, *bucket, *wait)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(env.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(nodes); err != nil {
				return err
			}
		} else {
			printStatus(env.stdout, nodes, time.Now())
		}
		// Scripts and health checks rely on the exit code: no replica
		// answering is a failure even if the election bucket names a leader.
		if !slices.ContainsFunc(nodes, func(n *nodeStatus) bool { return len(n.Replicas) > 0 }) {
			return fmt.Errorf("no coordinator replica answered on %s within %v: is a coordinator running against this NATS deployment?", redactURLs(conn.url), *wait)
		}
		return nil
	}
}

// collectStatus reads the election bucket (leader and term per node) and
// gathers the STATS of every allot-replica service.
func collectStatus(ctx context.Context, nc *nats.Conn, bucket string, wait time.Duration) ([]*nodeStatus, error) {
	byNode := map[string]*nodeStatus{}
	node := func(name string) *nodeStatus {
		if byNode[name] == nil {
			byNode[name] = &nodeStatus{Node: name}
		}
		return byNode[name]
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(kctx, bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
	case err != nil:
		return nil, fmt.Errorf("election bucket %q: %w", bucket, err)
	default:
		keys, err := kv.ListKeys(kctx)
		if err != nil {
			return nil, fmt.Errorf("list election keys: %w", err)
		}
		for key := range keys.Keys() {
			qnode, part, isQuota := partitionElectionKey(key, "quota", quotaserver.ElectionKey)
			dnode, dpart, isDomain := partitionElectionKey(key, "domain", domainserver.ElectionKey)
			if strings.Contains(key, ".") && !isQuota && !isDomain {
				continue // not a node: e.g. election.FoundedKey
			}
			entry, err := kv.Get(kctx, key)
			if err != nil {
				continue // expired meanwhile
			}
			var v election.Value
			if err := json.Unmarshal(entry.Value(), &v); err != nil {
				continue
			}
			term := v.Term
			if term == 0 {
				term = entry.Revision()
			}
			if isQuota {
				q := partition(&node(qnode).Quota, part)
				q.Leader, q.Term, q.Since = v.ID, term, v.Since
				continue
			}
			if isDomain {
				d := partition(&node(dnode).Domain, dpart)
				d.Leader, d.Term, d.Since = v.ID, term, v.Since
				continue
			}
			n := node(key)
			n.Leader, n.Term, n.Since = v.ID, term, v.Since
		}
	}

	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	subject, err := micro.ControlSubject(micro.StatsVerb, coordinator.ReplicaServiceName, "")
	if err != nil {
		return nil, err
	}
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	// The serving leaders' STATS too: the tree and its resources. Leaf
	// connections carry these requests to every level.
	if subject, err = micro.ControlSubject(micro.StatsVerb, coordinator.ServiceName, ""); err != nil {
		return nil, err
	}
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	// And the quota and domain-limit partitions' serving leaders.
	for _, svc := range []string{quotaserver.ServiceName, domainserver.ServiceName} {
		if subject, err = micro.ControlSubject(micro.StatsVerb, svc, ""); err != nil {
			return nil, err
		}
		if err := nc.PublishRequest(subject, inbox, nil); err != nil {
			return nil, fmt.Errorf("request %s: %w", subject, err)
		}
	}
	deadline := time.Now().Add(wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if errors.Is(err, nats.ErrNoResponders) {
			continue // nobody serves one of the two services
		}
		if err != nil {
			break // timeout: done collecting
		}
		var st micro.Stats
		if json.Unmarshal(m.Data, &st) != nil {
			continue
		}
		if st.Name == quotaserver.ServiceName && len(st.Endpoints) > 0 {
			var qs quotaserver.Stats
			if json.Unmarshal(st.Endpoints[0].Data, &qs) == nil && qs.Node != "" && qs.Serving {
				partition(&node(qs.Node).Quota, qs.Partition).Serving = &qs
			}
			continue
		}
		if st.Name == domainserver.ServiceName && len(st.Endpoints) > 0 {
			var ds domainserver.Stats
			if json.Unmarshal(st.Endpoints[0].Data, &ds) == nil && ds.Node != "" && ds.Serving {
				partition(&node(ds.Node).Domain, ds.Partition).Serving = &ds
			}
			continue
		}
		for _, ep := range st.Endpoints {
			if st.Name == coordinator.ServiceName {
				var cs coordinator.Stats
				if ep.Name == "capacity" && json.Unmarshal(ep.Data, &cs) == nil && cs.Node != "" && cs.Serving {
					cs.Config = nil // config status has its own command
					n := node(cs.Node)
					n.Serving, n.Parent = &cs, cs.Parent
				}
				continue
			}
			var rs coordinator.ReplicaStatus
			if ep.Name != "status" || json.Unmarshal(ep.Data, &rs) != nil || rs.Node == "" {
				continue
			}
			n := node(rs.Node)
			n.Replicas = append(n.Replicas, rs)
			if rs.Parent != "" {
				n.Parent = rs.Parent
			}
		}
	}
	out := make([]*nodeStatus, 0, len(byNode))
	for _, n := range byNode {
		slices.SortFunc(n.Quota, func(a, b *partitionStatus[quotaserver.Stats]) int { return a.Partition - b.Partition })
		for _, q := range n.Quota {
			if q.Leader == "" && q.Serving != nil {
				q.Leader, q.Term = q.Serving.ServerID, q.Serving.Term
			}
		}
		slices.SortFunc(n.Domain, func(a, b *partitionStatus[domainserver.Stats]) int { return a.Partition - b.Partition })
		for _, d := range n.Domain {
			if d.Leader == "" && d.Serving != nil {
				d.Leader, d.Term = d.Serving.ServerID, d.Serving.Term
			}
		}
		slices.SortFunc(n.Replicas, func(a, b coordinator.ReplicaStatus) int { return strings.Compare(a.ServerID, b.ServerID) })
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *nodeStatus) int { return strings.Compare(a.Node, b.Node) })
	for _, n := range out {
		// A level's election bucket is in its own JetStream domain: for
		// nodes of other levels, the replicas say who leads.
		for _, r := range n.Replicas {
			if n.Leader == "" && r.Role == election.RoleLeader {
				n.Leader, n.Term = r.ServerID, r.Term
			}
		}
		if n.Leader == "" && n.Serving != nil {
			// A coordinator run without replicas: it is the leader.
			n.Leader, n.Term = n.Serving.ServerID, n.Serving.Term
		}
	}
	return out, nil
}

func printStatus(w io.Writer, nodes []*nodeStatus, now time.Time) {
	if len(nodes) == 0 {
		fmt.Fprintln(w, "no coordinator replicas answered and no leader is recorded")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tLEADER\tTERM\tLEADING FOR\tFOLLOWERS")
	for _, n := range nodes {
		leader, term, since := "(none)", "-", "-"
		if n.Leader != "" {
			leader, term = n.Leader, fmt.Sprint(n.Term)
			if !n.Since.IsZero() {
				since = now.Sub(n.Since).Round(time.Second).String()
			}
		}
		var followers []string
		for _, r := range n.Replicas {
			switch {
			case r.Partitions > 1:
				leader = "(lease partitions, below)"
			case r.ServerID == n.Leader && !r.Serving:
				leader += " (not serving)"
			case r.ServerID == n.Leader:
			case r.Role == election.RoleLeader:
				followers = append(followers, r.ServerID+" (claims leadership)")
			default:
				followers = append(followers, r.ServerID)
			}
		}
		f := strings.Join(followers, ", ")
		if f == "" {
			f = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Node, leader, term, since, f)
	}
	_ = tw.Flush()
	printLeasePartitions(w, nodes)
	printTree(w, nodes)
	printQuota(w, nodes, now)
	printDomain(w, nodes, now)
}

// printDomain lists each node's domain-limit partitions: leader, term,
// learning, holds, copies held, staged transfers and decisions.
func printDomain(w io.Writer, nodes []*nodeStatus, now time.Time) {
	if !slices.ContainsFunc(nodes, func(n *nodeStatus) bool { return len(n.Domain) > 0 }) {
		return
	}
	fmt.Fprintln(w, "\nDOMAIN LIMITS")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPARTITION\tLEADER\tTERM\tLEADING FOR\tHOLDS\tCOPIES HELD\tTRANSFERS\tREQUESTS\tRESERVES")
	for _, n := range nodes {
		for _, d := range n.Domain {
			leader, term, since := partitionLeader(d.Leader, d.Term, d.Since, d.Serving != nil, now)
			holds, copies, transfers, requests, reserves := "-", "-", "-", "-", "-"
			if s := d.Serving; s != nil {
				holds, copies, transfers = fmt.Sprint(s.Holds), fmt.Sprint(s.CopiesHeld), fmt.Sprint(s.Transfers)
				requests, reserves = fmt.Sprint(s.Requests), fmt.Sprint(s.Reserves)
				if now.Before(s.LearnUntil) {
					leader += fmt.Sprintf(" (learning holds for %v more)", s.LearnUntil.Sub(now).Round(100*time.Millisecond))
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, d.Partition, leader, term, since, holds, copies, transfers, requests, reserves)
		}
	}
	_ = tw.Flush()
}

// partitionLeader formats a partition's leader, term and time leading;
// a leader whose STATS did not come is "(not serving)".
func partitionLeader(id string, term uint64, since time.Time, serving bool, now time.Time) (leader, termText, leading string) {
	leader, termText, leading = "(none)", "-", "-"
	if id == "" {
		return leader, termText, leading
	}
	leader, termText = id, fmt.Sprint(term)
	if !since.IsZero() {
		leading = now.Sub(since).Round(time.Second).String()
	}
	if !serving {
		leader += " (not serving)"
	}
	return leader, termText, leading
}

// printQuota lists each node's quota partitions: leader, term, buckets
// in memory, decisions, and quotaservice's events per namespace.
func printQuota(w io.Writer, nodes []*nodeStatus, now time.Time) {
	if !slices.ContainsFunc(nodes, func(n *nodeStatus) bool { return len(n.Quota) > 0 }) {
		return
	}
	fmt.Fprintln(w, "\nQUOTA")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPARTITION\tLEADER\tTERM\tLEADING FOR\tBUCKETS\tTAKES\tREPORTS")
	for _, n := range nodes {
		for _, q := range n.Quota {
			leader, term, since := partitionLeader(q.Leader, q.Term, q.Since, q.Serving != nil, now)
			buckets, takes, reports := "-", "-", "-"
			if s := q.Serving; s != nil {
				buckets, takes, reports = fmt.Sprint(s.Buckets), fmt.Sprint(s.Takes), fmt.Sprint(s.Reports)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, q.Partition, leader, term, since, buckets, takes, reports)
		}
	}
	_ = tw.Flush()
	for _, n := range nodes {
		for _, q := range n.Quota {
			if q.Serving == nil {
				continue
			}
			for _, ns := range slices.Sorted(maps.Keys(q.Serving.Events)) {
				fmt.Fprintf(w, "  %s/%d %s: %s\n", n.Node, q.Partition, ns, eventCounts(q.Serving.Events[ns]))
			}
		}
	}
}

// eventCounts formats a namespace's event counters as name=count, the
// non-zero ones, in the order of their JSON names.
func eventCounts(ev any) string {
	data, err := json.Marshal(ev)
	if err != nil {
		return err.Error()
	}
	var counts map[string]any
	if err := json.Unmarshal(data, &counts); err != nil {
		return string(data)
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if v, ok := counts[k].(float64); ok && v == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%s=%v", k, counts[k]))
	}
	if len(out) == 0 {
		return "no events"
	}
	return strings.Join(out, " ")
}

// printTree draws the nodes from the root down, each with its parent,
// leader and term, and per resource its capacity (on a child, its lease
// from the parent), outstanding and number of claimants.
func printTree(w io.Writer, nodes []*nodeStatus) {
	byName := map[string]*nodeStatus{}
	children := map[string][]*nodeStatus{}
	for _, n := range nodes {
		byName[n.Node] = n
	}
	var roots []*nodeStatus
	for _, n := range nodes {
		if n.Parent == "" || byName[n.Parent] == nil {
			roots = append(roots, n)
		} else {
			children[n.Parent] = append(children[n.Parent], n)
		}
	}
	fmt.Fprintln(w, "\nTREE")
	var draw func(n *nodeStatus, indent string)
	draw = func(n *nodeStatus, indent string) {
		head := n.Node
		if n.Parent != "" {
			head += " (under " + n.Parent + ")"
		}
		if n.Leader != "" {
			head += fmt.Sprintf("  leader %s, term %d", n.Leader, n.Term)
		} else {
			head += "  no leader"
		}
		if s := n.Serving; s != nil && s.ParentError != "" {
			head += "  PARENT UNREACHABLE: serving on its leases, then safe capacity (" + s.ParentError + ")"
		}
		fmt.Fprintln(w, indent+head)
		if s := n.Serving; s != nil {
			for _, r := range s.TopResources {
				line := "capacity " + number(r.Capacity)
				if n.Parent != "" {
					line = "lease " + number(r.Lease)
				}
				fmt.Fprintf(w, "%s    %s: %s, outstanding %s, %d claimants\n", indent, r.ID, line, number(r.Outstanding), r.Claimants)
			}
		}
		for _, c := range children[n.Node] {
			draw(c, indent+"  ")
		}
	}
	for _, r := range roots {
		draw(r, "")
	}
}

// printLeasePartitions lists the replicas of nodes whose resources are
// spread over lease partitions: each partition's leader and followers.
func printLeasePartitions(w io.Writer, nodes []*nodeStatus) {
	if !slices.ContainsFunc(nodes, func(n *nodeStatus) bool {
		return slices.ContainsFunc(n.Replicas, func(r coordinator.ReplicaStatus) bool { return r.Partitions > 1 })
	}) {
		return
	}
	fmt.Fprintln(w, "\nLEASE PARTITIONS")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPARTITION\tREPLICA\tROLE\tTERM\tSERVING")
	for _, n := range nodes {
		reps := slices.Clone(n.Replicas)
		slices.SortStableFunc(reps, func(a, b coordinator.ReplicaStatus) int { return a.Partition - b.Partition })
		for _, r := range reps {
			if r.Partitions > 1 {
				fmt.Fprintf(tw, "%s\t%d of %d\t%s\t%s\t%d\t%v\n", n.Node, r.Partition, r.Partitions, r.ServerID, r.Role, r.Term, r.Serving)
			}
		}
	}
	_ = tw.Flush()
}
