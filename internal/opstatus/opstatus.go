// Package opstatus gathers what running coordinator replicas report
// about themselves over NATS micro STATS (role, term, configuration
// generation and revisions) and formats it for operators: the engine
// of `allot config status`.
package opstatus

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/configkv"
)

// Services whose STATS carry a configuration status: every replica,
// leader or follower, registers ReplicaService (coordinator.
// ReplicaServiceName); a serving coordinator also registers
// CoordinatorService (coordinator.ServiceName), which is all a
// coordinator run without the election answers to. They are repeated
// here so that this package does not depend on the coordinator.
const (
	ReplicaService     = "allot-replica"
	CoordinatorService = "allot"
)

// Replica is one coordinator replica's answer to a micro STATS request:
// the micro identity plus the "data" its stats handler returns.
type Replica struct {
	// Service is the micro service that answered, ID its instance id and
	// Version the service version.
	Service string `json:"service"`
	ID      string `json:"id"`
	Version string `json:"version"`
	// Node and ServerID identify the replica.
	Node     string `json:"node"`
	ServerID string `json:"server_id"`
	// Role is "leader" or "follower" ("" from a coordinator that runs
	// without the election); Serving is true while it answers requests.
	Role    string `json:"role,omitempty"`
	Serving bool   `json:"serving"`
	// Term is the replica's term while it leads, else its leader's.
	Term uint64 `json:"term,omitempty"`
	// Config is the replica's configuration status, nil if its reply had
	// none.
	Config *configkv.Status `json:"config,omitempty"`
	// Err describes a reply that could not be decoded.
	Err string `json:"error,omitempty"`
}

// statsReply is the part of micro's io.nats.micro.v1.stats_response that
// Gather reads. micro puts a StatsHandler's result in each endpoint's
// "data"; a top-level "data" is accepted too.
type statsReply struct {
	Type      string          `json:"type"`
	Name      string          `json:"name"`
	ID        string          `json:"id"`
	Version   string          `json:"version"`
	Data      json.RawMessage `json:"data"`
	Endpoints []struct {
		Data json.RawMessage `json:"data"`
	} `json:"endpoints"`
}

type statsData struct {
	Node     string           `json:"node"`
	ServerID string           `json:"server_id"`
	Role     string           `json:"role"`
	Serving  *bool            `json:"serving"`
	Term     json.Number      `json:"term"`
	Config   *configkv.Status `json:"config"`
}

// data is the service data of the reply: the top-level "data" and each
// endpoint's, the empty ones left out.
func (r *statsReply) data() []json.RawMessage {
	var out []json.RawMessage
	for i := -1; i < len(r.Endpoints); i++ {
		raw := r.Data
		if i >= 0 {
			raw = r.Endpoints[i].Data
		}
		if len(raw) > 0 && string(raw) != "null" {
			out = append(out, raw)
		}
	}
	return out
}

// StatsData returns the service data of a micro STATS reply: its
// top-level "data" and each endpoint's (where micro puts a StatsHandler's
// result), in that order, the empty ones left out.
func StatsData(reply []byte) ([]json.RawMessage, error) {
	var r statsReply
	if err := json.Unmarshal(reply, &r); err != nil {
		return nil, fmt.Errorf("decode stats reply: %w", err)
	}
	return r.data(), nil
}

// DecodeStats decodes into T the first service data of a micro STATS
// reply that decodes and that keep accepts (every endpoint of allot's
// services carries the same data); ok is false when none does.
func DecodeStats[T any](reply []byte, keep func(*T) bool) (st T, ok bool) {
	raws, err := StatsData(reply)
	if err != nil {
		return st, false
	}
	for _, raw := range raws {
		var v T
		if json.Unmarshal(raw, &v) == nil && keep(&v) {
			return v, true
		}
	}
	return st, false
}

// DecodeStatsReply extracts a Replica from a micro stats reply.
func DecodeStatsReply(data []byte) (Replica, error) {
	var r statsReply
	if err := json.Unmarshal(data, &r); err != nil {
		return Replica{}, fmt.Errorf("decode stats reply: %w", err)
	}
	rs := Replica{Service: r.Name, ID: r.ID, Version: r.Version}
	for _, raw := range r.data() {
		var d statsData
		if err := json.Unmarshal(raw, &d); err != nil {
			continue // another endpoint's data may be the one
		}
		if d.Config == nil && d.Node == "" {
			continue
		}
		rs.Node, rs.ServerID, rs.Role, rs.Config = d.Node, d.ServerID, d.Role, d.Config
		rs.Term, _ = strconv.ParseUint(strings.Trim(d.Term.String(), `"`), 10, 64)
		// A coordinator's own service answers only while it serves.
		rs.Serving = r.Name == CoordinatorService || d.Serving != nil && *d.Serving
		if rs.Config == nil {
			rs.Err = "reply carries no configuration status"
		}
		return rs, nil
	}
	rs.Err = "reply carries no configuration status"
	return rs, nil
}

// GatherAll asks every replica (ReplicaService) and every coordinator
// (CoordinatorService) at once and returns one entry per replica, sorted
// by node then server id: a coordinator's answer counts only for a
// replica that did not answer itself (one run without the election).
func GatherAll(ctx context.Context, nc *nats.Conn, wait time.Duration) ([]Replica, error) {
	type result struct {
		rs  []Replica
		err error
	}
	services := []string{ReplicaService, CoordinatorService}
	results := make([]result, len(services))
	var wg sync.WaitGroup
	for i, svc := range services {
		wg.Go(func() {
			rs, err := Gather(ctx, nc, svc, wait)
			results[i] = result{rs, err}
		})
	}
	wg.Wait()
	seen := map[[2]string]bool{}
	var out []Replica
	for _, res := range results {
		if res.err != nil {
			return nil, res.err
		}
		for _, r := range res.rs {
			k := [2]string{r.Node, r.ServerID}
			if r.ServerID != "" && seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, r)
		}
	}
	sortReplicas(out)
	return out, nil
}

func sortReplicas(rs []Replica) {
	slices.SortFunc(rs, func(a, b Replica) int {
		return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.ServerID, b.ServerID), strings.Compare(a.ID, b.ID))
	})
}

// Gather sends one micro STATS request to every instance of service and
// collects the replies that arrive within wait (or until ctx ends), sorted
// by node, server id and instance id.
func Gather(ctx context.Context, nc *nats.Conn, service string, wait time.Duration) ([]Replica, error) {
	var out []Replica
	err := Collect(ctx, nc, service, wait, func(data []byte) {
		rs, err := DecodeStatsReply(data)
		if err != nil {
			rs.Service, rs.Err = service, err.Error()
		}
		out = append(out, rs)
	})
	sortReplicas(out)
	return out, err
}

// Collect sends one micro STATS request to every instance of service and
// calls each with every reply's body that arrives within wait (or until
// ctx ends). No instance answering is no call, not an error.
func Collect(ctx context.Context, nc *nats.Conn, service string, wait time.Duration, each func(data []byte)) error {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("subscribe to replies: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SRV.STATS."+service, inbox, nil); err != nil {
		return fmt.Errorf("send stats request: %w", err)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("send stats request: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		msg, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return nil // waited long enough
			}
			if errors.Is(err, nats.ErrNoResponders) {
				return nil // nobody serves the subject
			}
			return fmt.Errorf("gather stats replies: %w", err)
		}
		if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
			continue // no responders
		}
		each(msg.Data)
	}
}

// Format writes a human-readable report of replicas' statuses: per
// replica, its role, the configuration generation it applied, the
// revision of each key it serves with its state, and the revisions it
// rejected with their errors. It ends with keys whose serving revision
// differs between replicas.
func Format(w io.Writer, rs []Replica) error {
	var b strings.Builder
	if len(rs) == 0 {
		b.WriteString("no coordinator replica answered\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	revs := map[string]map[uint64][]string{} // key → revision → replicas
	var withConfig []string
	for i, r := range rs {
		if i > 0 {
			b.WriteString("\n")
		}
		who := replicaName(r)
		fmt.Fprintf(&b, "replica %s", who)
		if r.Node != "" {
			fmt.Fprintf(&b, " of node %s", r.Node)
		}
		fmt.Fprintf(&b, ": %s", role(r))
		if r.ID != "" && r.ServerID != "" {
			fmt.Fprintf(&b, " (instance %s", r.ID)
			if r.Version != "" {
				fmt.Fprintf(&b, ", version %s", r.Version)
			}
			b.WriteString(")")
		}
		b.WriteString("\n")
		if r.Err != "" {
			fmt.Fprintf(&b, "  error: %s\n", r.Err)
		}
		st := r.Config
		if st == nil {
			continue
		}
		withConfig = append(withConfig, who)
		if err := formatConfig(&b, st); err != nil {
			return err
		}
		for _, k := range st.Keys {
			if revs[k.Key] == nil {
				revs[k.Key] = map[uint64][]string{}
			}
			revs[k.Key][k.Revision] = append(revs[k.Key][k.Revision], who)
		}
	}
	if d := diverging(revs, withConfig); len(d) > 0 {
		b.WriteString("\nreplicas disagree (a change may still be propagating):\n")
		for _, line := range d {
			b.WriteString(line)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// formatConfig writes one replica's configuration status.
func formatConfig(b *strings.Builder, st *configkv.Status) error {
	fmt.Fprintf(b, "  bucket %s, generation %d", st.Bucket, st.Generation)
	if !st.Updated.IsZero() {
		fmt.Fprintf(b, ", updated %s", st.Updated.UTC().Format(time.RFC3339))
	}
	if st.Resyncs > 0 {
		fmt.Fprintf(b, ", %d re-watches", st.Resyncs)
	}
	b.WriteString("\n")
	if st.Fallback != "" {
		fmt.Fprintf(b, "  unmatched resources: %s\n", st.Fallback)
	} else {
		b.WriteString("  unmatched resources: rejected\n")
	}
	for _, u := range st.Unknown {
		fmt.Fprintf(b, "  ignored %s revision %d: %s\n", u.Key, u.Revision, u.Problem)
	}
	if len(st.Keys) == 0 {
		b.WriteString("  no templates\n")
		return nil
	}
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tREVISION\tGLOB\tSTATE")
	for _, k := range st.Keys {
		rev := fmt.Sprint(k.Revision)
		if k.Revision == 0 {
			rev = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", k.Key, rev, k.Glob, keyState(k))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, k := range st.Keys {
		for _, r := range k.Rejected {
			fmt.Fprintf(b, "  rejected %s revision %d at %s: %s\n", k.Key, r.Revision, r.Time.UTC().Format(time.RFC3339), r.Error)
		}
	}
	return nil
}

// keyState is a key's state in words; replicas that predate
// KeyStatus.State leave it to be derived.
func keyState(k configkv.KeyStatus) string {
	if k.State != "" {
		return k.State
	}
	n := len(k.Rejected)
	switch {
	case n > 0 && k.Revision == 0:
		return fmt.Sprintf("revision %d rejected, nothing serving", k.Rejected[n-1].Revision)
	case n > 0:
		return fmt.Sprintf("newer revision %d rejected", k.Rejected[n-1].Revision)
	case k.Revision == 0:
		return "no valid revision"
	}
	return "ok"
}

// diverging lists, one line each, the keys whose serving revision is not
// the same on every replica that reported a configuration.
func diverging(revs map[string]map[uint64][]string, withConfig []string) []string {
	const absent = ^uint64(0)
	var out []string
	for key, byRev := range revs {
		n := 0
		for _, who := range byRev {
			n += len(who)
		}
		if n < len(withConfig) {
			for _, r := range withConfig {
				has := false
				for _, who := range byRev {
					has = has || slices.Contains(who, r)
				}
				if !has {
					byRev[absent] = append(byRev[absent], r)
				}
			}
		}
		if len(byRev) < 2 {
			continue
		}
		var parts []string
		for _, rev := range slices.Sorted(maps.Keys(byRev)) {
			if rev == absent {
				parts = append(parts, "absent on "+strings.Join(byRev[rev], ", "))
				continue
			}
			parts = append(parts, fmt.Sprintf("revision %d on %s", rev, strings.Join(byRev[rev], ", ")))
		}
		out = append(out, fmt.Sprintf("  %s: %s\n", key, strings.Join(parts, "; ")))
	}
	slices.Sort(out)
	return out
}

// role describes a replica's role in words.
func role(r Replica) string {
	switch {
	case r.Role == "" && r.Serving:
		return fmt.Sprintf("coordinator serving term %d", r.Term)
	case r.Role == "leader" && r.Serving:
		return fmt.Sprintf("leader, serving term %d", r.Term)
	case r.Role == "leader":
		return fmt.Sprintf("leader of term %d, not serving", r.Term)
	case r.Role != "" && r.Term > 0:
		return fmt.Sprintf("%s, leader's term %d", r.Role, r.Term)
	case r.Role != "":
		return r.Role
	}
	return "unknown role"
}

func replicaName(r Replica) string {
	if r.ServerID != "" {
		return r.ServerID
	}
	if r.ID != "" {
		return "instance " + r.ID
	}
	return "(unnamed)"
}
