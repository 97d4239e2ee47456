package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
)

// ServiceName is the micro service name coordinators register; status
// discovery sends to "$SRV.STATS." + ServiceName.
const ServiceName = "allot"

// CoordinatorStatus is one coordinator's answer to a micro STATS request:
// the micro identity plus the "data" a coordinator's stats handler
// returns ({"node": ..., "server_id": ..., "config": Status}).
type CoordinatorStatus struct {
	// ID is the micro service instance id.
	ID string `json:"id"`
	// Version is the service version.
	Version string `json:"version"`
	// Node and ServerID identify the coordinator.
	Node     string `json:"node"`
	ServerID string `json:"server_id"`
	// Config is the coordinator's configuration status, nil if its reply
	// had none.
	Config *Status `json:"config,omitempty"`
	// Err describes a reply that could not be decoded.
	Err string `json:"error,omitempty"`
}

// statsReply is the part of micro's io.nats.micro.v1.stats_response that
// GatherStatus reads. micro puts a StatsHandler's result in each
// endpoint's "data"; a top-level "data" is accepted too.
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
	Node     string  `json:"node"`
	ServerID string  `json:"server_id"`
	Config   *Status `json:"config"`
}

// DecodeStatsReply extracts a CoordinatorStatus from a micro stats reply.
func DecodeStatsReply(data []byte) (CoordinatorStatus, error) {
	var r statsReply
	if err := json.Unmarshal(data, &r); err != nil {
		return CoordinatorStatus{}, fmt.Errorf("decode stats reply: %w", err)
	}
	cs := CoordinatorStatus{ID: r.ID, Version: r.Version}
	candidates := []json.RawMessage{r.Data}
	for _, e := range r.Endpoints {
		candidates = append(candidates, e.Data)
	}
	for _, raw := range candidates {
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		var d statsData
		if err := json.Unmarshal(raw, &d); err != nil {
			continue // another endpoint's data may be the one
		}
		if d.Config == nil && d.Node == "" {
			continue
		}
		cs.Node, cs.ServerID, cs.Config = d.Node, d.ServerID, d.Config
		return cs, nil
	}
	cs.Err = "reply carries no configuration status"
	return cs, nil
}

// GatherStatus sends one micro STATS request to every instance of
// service and collects the replies that arrive within wait (or until ctx
// ends), sorted by node then id.
func GatherStatus(ctx context.Context, nc *nats.Conn, service string, wait time.Duration) ([]CoordinatorStatus, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("subscribe to replies: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SRV.STATS."+service, inbox, nil); err != nil {
		return nil, fmt.Errorf("send stats request: %w", err)
	}
	if err := nc.Flush(); err != nil {
		return nil, fmt.Errorf("send stats request: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var out []CoordinatorStatus
	for {
		msg, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				break // waited long enough
			}
			if errors.Is(err, nats.ErrNoResponders) {
				break // nobody serves the subject
			}
			return out, fmt.Errorf("gather stats replies: %w", err)
		}
		if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
			continue // no responders
		}
		cs, err := DecodeStatsReply(msg.Data)
		if err != nil {
			cs.Err = err.Error()
		}
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b CoordinatorStatus) int {
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// FormatStatus writes a human-readable report of coordinators' statuses:
// per coordinator, the revision of each key it serves and the revisions
// it rejected with their errors. It ends with keys whose serving revision
// differs between coordinators.
func FormatStatus(w io.Writer, sts []CoordinatorStatus) error {
	var b strings.Builder
	if len(sts) == 0 {
		b.WriteString("no coordinators answered\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	revs := map[string]map[uint64][]string{} // key → revision → nodes
	for i, cs := range sts {
		if i > 0 {
			b.WriteString("\n")
		}
		who := nodeName(cs)
		fmt.Fprintf(&b, "coordinator %s", who)
		if cs.ServerID != "" {
			fmt.Fprintf(&b, " server %s", cs.ServerID)
		}
		if cs.ID != "" && cs.Node != "" {
			fmt.Fprintf(&b, " instance %s", cs.ID)
		}
		if cs.Version != "" {
			fmt.Fprintf(&b, " version %s", cs.Version)
		}
		b.WriteString("\n")
		if cs.Err != "" {
			fmt.Fprintf(&b, "  error: %s\n", cs.Err)
		}
		st := cs.Config
		if st == nil {
			continue
		}
		fmt.Fprintf(&b, "  bucket %s, generation %d", st.Bucket, st.Generation)
		if !st.Updated.IsZero() {
			fmt.Fprintf(&b, ", updated %s", st.Updated.UTC().Format(time.RFC3339))
		}
		if st.Resyncs > 0 {
			fmt.Fprintf(&b, ", %d re-watches", st.Resyncs)
		}
		b.WriteString("\n")
		if st.Fallback != "" {
			fmt.Fprintf(&b, "  unmatched resources: %s\n", st.Fallback)
		} else {
			b.WriteString("  unmatched resources: rejected\n")
		}
		if len(st.Keys) == 0 {
			b.WriteString("  no templates\n")
			continue
		}
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KEY\tREVISION\tGLOB\tSTATE")
		for _, k := range st.Keys {
			state := "ok"
			rev := fmt.Sprint(k.Revision)
			if k.Revision == 0 {
				rev, state = "-", "no valid revision"
			}
			if n := len(k.Rejected); n > 0 {
				state = fmt.Sprintf("newer revision %d rejected", k.Rejected[n-1].Revision)
				if k.Revision == 0 {
					state = fmt.Sprintf("revision %d rejected, nothing serving", k.Rejected[n-1].Revision)
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", k.Key, rev, k.Glob, state)
			if revs[k.Key] == nil {
				revs[k.Key] = map[uint64][]string{}
			}
			revs[k.Key][k.Revision] = append(revs[k.Key][k.Revision], who)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, k := range st.Keys {
			for _, r := range k.Rejected {
				fmt.Fprintf(&b, "  rejected %s revision %d at %s: %s\n", k.Key, r.Revision, r.Time.UTC().Format(time.RFC3339), r.Error)
			}
		}
	}
	var withConfig []string
	for _, cs := range sts {
		if cs.Config != nil {
			withConfig = append(withConfig, nodeName(cs))
		}
	}
	var diverging []string
	for key, byRev := range revs {
		n := 0
		for _, nodes := range byRev {
			n += len(nodes)
		}
		if n < len(withConfig) {
			var absent []string
			for _, node := range withConfig {
				has := false
				for _, nodes := range byRev {
					has = has || slices.Contains(nodes, node)
				}
				if !has {
					absent = append(absent, node)
				}
			}
			byRev[^uint64(0)] = absent
		}
		if len(byRev) > 1 {
			var parts []string
			for _, r := range slices.Sorted(maps.Keys(byRev)) {
				if r == ^uint64(0) {
					parts = append(parts, "absent on "+strings.Join(byRev[r], ", "))
					continue
				}
				parts = append(parts, fmt.Sprintf("revision %d on %s", r, strings.Join(byRev[r], ", ")))
			}
			diverging = append(diverging, fmt.Sprintf("  %s: %s\n", key, strings.Join(parts, "; ")))
		}
	}
	if len(diverging) > 0 {
		slices.Sort(diverging)
		b.WriteString("\ncoordinators disagree (a change may still be propagating):\n")
		for _, d := range diverging {
			b.WriteString(d)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func nodeName(cs CoordinatorStatus) string {
	if cs.Node != "" {
		return cs.Node
	}
	if cs.ID != "" {
		return "instance " + cs.ID
	}
	return "(unnamed)"
}
