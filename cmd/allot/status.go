package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/election"
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
}

func runStatus(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "status", "[flags]")
	var conn connFlags
	conn.register(fs)
	bucket := fs.String("election-bucket", election.DefaultBucket, "election KV bucket")
	wait := fs.Duration("wait", 500*time.Millisecond, "how long to collect replica replies")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
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
		return fmt.Errorf("no coordinator replica answered on %s within %v: is a coordinator running against this NATS deployment?", conn.url, *wait)
	}
	return nil
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
			if strings.Contains(key, ".") {
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
			n := node(key)
			n.Leader, n.Term, n.Since = v.ID, v.Term, v.Since
			if n.Term == 0 {
				n.Term = entry.Revision()
			}
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
	deadline := time.Now().Add(wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break // timeout: done collecting
		}
		var st micro.Stats
		if json.Unmarshal(m.Data, &st) != nil {
			continue
		}
		for _, ep := range st.Endpoints {
			var rs coordinator.ReplicaStatus
			if ep.Name != "status" || json.Unmarshal(ep.Data, &rs) != nil || rs.Node == "" {
				continue
			}
			n := node(rs.Node)
			n.Replicas = append(n.Replicas, rs)
		}
	}
	out := make([]*nodeStatus, 0, len(byNode))
	for _, n := range byNode {
		slices.SortFunc(n.Replicas, func(a, b coordinator.ReplicaStatus) int { return strings.Compare(a.ServerID, b.ServerID) })
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *nodeStatus) int { return strings.Compare(a.Node, b.Node) })
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
}
