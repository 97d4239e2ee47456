package status_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/envoyserver"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/opstatus"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/quotatest"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/quotaserver"
	"github.com/allot/allot/replica"
	"github.com/allot/allot/status"
)

// TestLiveStats asks live servers for their micro STATS, as `nats micro
// stats --json` and the dashboard do, and decodes each one's data into
// its status type with unknown fields refused: every field the server
// sends has its place, and encoding the decoded value again gives the
// same bytes, so a reader of the status package sees all of it.
func TestLiveStats(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)

	// A coordinator replica (allot-replica), serving. Its seat lasts 30s:
	// with the default 3s, a stall of the machine deposes it, and the
	// check wants it leading.
	rep, err := coordinator.NewReplica(natstest.Conn(t, s), coordinator.ReplicaOptions{
		Options:  coordinator.Options{ServerID: "c1", Templates: coordinator.DefaultTemplates(), Logger: quiet},
		Election: replica.Election{TTL: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rep.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	poll.Until(t, 30*time.Second, "the replica to serve", func() bool { return rep.Status().Serving })

	// A quota partition (allot-quota) that has decided a take.
	q := quotatest.Start(t, natstest.Conn(t, s), map[string]string{"logins": `{"default_bucket": {"size": 5, "fill_rate": 1}}`})
	if _, err := nc.Request(quotaserver.BucketSubject("root", "take", "logins", "alice"), []byte(`{}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}

	// A domain-limit partition (allot-domain) and an Envoy counter
	// partition (allot-envoy).
	dom, err := domainserver.New(natstest.Conn(t, s), domainserver.Options{Config: sources.DomainsFunc(func() map[string]*domainlimit.Namespace { return nil }), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := dom.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dom.Stop)
	env, err := envoyserver.New(natstest.Conn(t, s), envoyserver.Options{ServerID: "e1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)

	check := func(service string, into any, ok func() bool) {
		t.Helper()
		// Each gathering waits 2s for the replies; a server slower than
		// that on a loaded machine is asked again.
		var raw []json.RawMessage
		poll.For(t, time.Minute, poll.Interval, func() error {
			var data []byte
			if err := opstatus.Collect(ctx, nc, service, 2*time.Second, func(d []byte) { data = d }); err != nil {
				return fmt.Errorf("%s: %v", service, err)
			}
			var err error
			if raw, err = opstatus.StatsData(data); err != nil || len(raw) == 0 {
				return fmt.Errorf("%s: STATS data %v, %v", service, raw, err)
			}
			return nil
		})
		dec := json.NewDecoder(bytes.NewReader(raw[0]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			t.Fatalf("%s: %s: %v", service, raw[0], err)
		}
		again, err := json.Marshal(into)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if err := json.Compact(&want, raw[0]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, want.Bytes()) {
			t.Errorf("%s: re-encoded\n%s\nsent\n%s", service, again, want.Bytes())
		}
		if !ok() {
			t.Errorf("%s: decoded %+v", service, into)
		}
	}
	var r status.Replica
	check(status.ReplicaService, &r, func() bool { return r.Role == status.RoleLeader && r.Serving && r.ServerID == "c1" && r.Term > 0 })
	var qs status.Quota
	check(status.QuotaService, &qs, func() bool {
		return qs.Serving && qs.Takes == 1 && qs.Events["logins"].Served == 1 && qs.Takes == q.Stats()[0].Takes
	})
	var ds status.Domain
	check(status.DomainService, &ds, func() bool { return ds.Serving && ds.Node == "root" })
	var es status.Envoy
	check(status.EnvoyService, &es, func() bool { return es.Serving && es.ServerID == "e1" && es.MaxCounters > 0 })
}
