package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// TestHotReload drives the operator's path: a separate connection puts a
// template into the bucket (as `nats kv put` would), the running
// coordinator's grants follow; a broken put changes nothing and shows up
// in `allot config status`.
func TestHotReload(t *testing.T) {
	s := natstest.Server(t)
	coordConn := natstest.Conn(t, s)
	operator := natstest.Conn(t, s)
	client := natstest.Conn(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cf := coordFlags{node: "root", round: 5 * time.Millisecond, bucket: "allot_state", configBucket: configkv.DefaultBucket, unmatched: config.UnmatchedReject, logLevel: "warn"}
	serveCtx, stopServe := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- serve(serveCtx, coordConn, &cf, slog.New(slog.DiscardHandler)) }()
	defer func() {
		stopServe()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	js, _ := jetstream.New(operator)
	var kv jetstream.KeyValue
	// serve creates the bucket; a loaded machine running the race
	// detector took longer than 20 s to.
	poll.For(t, 45*time.Second, 20*time.Millisecond, func() (err error) {
		kv, err = js.KeyValue(ctx, configkv.DefaultBucket)
		return err
	})
	get := func() (float64, string) { return askCapacity(t, client, "mysql/main", 1000) }
	waitFor := func(want float64) time.Duration {
		t.Helper()
		start := time.Now()
		poll.For(t, 20*time.Second, 5*time.Millisecond, func() error {
			if got, e := get(); got != want {
				return fmt.Errorf("capacity stayed %v (%s), want %v", got, e, want)
			}
			return nil
		})
		return time.Since(start)
	}

	// Waiting for the coordinator: with --unmatched=reject, no template
	// means 404 (or no responders before it starts).
	poll.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		if _, e := get(); !strings.HasPrefix(e, "404") {
			return fmt.Errorf("coordinator never answered 404: %s", e)
		}
		return nil
	})
	put := func(v string) uint64 {
		t.Helper()
		rev, err := kv.Put(ctx, "templates.mysql-main", []byte(v))
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	put(`{"identifier_glob":"mysql/main","capacity":500,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"5s"}}`)
	t.Logf("put → first grant reflecting it: %v", waitFor(500))
	put(`{"identifier_glob":"mysql/main","capacity":200,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"5s"}}`)
	t.Logf("capacity cut → first grant reflecting it: %v", waitFor(200))

	// A broken put (YAML syntax error, then NaN capacity) changes nothing.
	// The coordinator applies puts asynchronously: wait until its status
	// reports the NaN revision rejected (the syntax error, put before it,
	// was seen first), so that the grant below is asked after both.
	put("identifier_glob: mysql/main\ncapacity: [")
	nanRev := put(`{"identifier_glob":"mysql/main","capacity":"NaN"}`)
	rejected := fmt.Sprintf("rejected templates.mysql-main revision %d ", nanRev)
	var out syncBuffer
	poll.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		out = syncBuffer{}
		code := run(ctx, testEnv(&out), []string{"config", "status", "--nats", s.ClientURL()})
		if st := out.String(); code != 0 || !strings.Contains(st, rejected) || !strings.Contains(strings.ToLower(st), "nan") {
			return fmt.Errorf("config status never showed the rejected NaN revision %d (exit %d):\n%s", nanRev, code, st)
		}
		return nil
	})
	if got, e := get(); got != 200 {
		t.Fatalf("after broken puts capacity is %v (%s), want 200", got, e)
	}
	t.Logf("allot config status:\n%s", out.String())

	// Deleting the template: with --unmatched=reject the resource is refused.
	if err := kv.Delete(ctx, "templates.mysql-main"); err != nil {
		t.Fatal(err)
	}
	poll.For(t, 20*time.Second, 5*time.Millisecond, func() error {
		if _, e := get(); !strings.HasPrefix(e, "404") {
			return fmt.Errorf("delete never applied: %s", e)
		}
		return nil
	})
}
