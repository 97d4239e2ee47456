package embed_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// requestUntil sends a request on nc until it is answered, for up to 5s:
// subscription interest takes a moment to cross a new leaf link.
func requestUntil(t *testing.T, nc *nats.Conn, subj string) string {
	t.Helper()
	var reply string
	poll.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		m, err := nc.Request(subj, []byte("ping"), 500*time.Millisecond)
		if err != nil {
			return fmt.Errorf("request %s: %w", subj, err)
		}
		reply = string(m.Data)
		return nil
	})
	return reply
}

// TestLeafTree: a request published two levels down reaches a responder
// at the root over leaf-node connections, each level keeps its own
// JetStream domain, and a cut link stops requests until it is restored.
func TestLeafTree(t *testing.T) {
	root := natstest.Root(t, "global")
	region := natstest.Child(t, "eu", root)
	cluster := natstest.Child(t, "eu-1", region)

	rootNC := natstest.Conn(t, root.Server)
	if _, err := rootNC.Subscribe("allot.global.server.get", func(m *nats.Msg) { _ = m.Respond([]byte("from global")) }); err != nil {
		t.Fatal(err)
	}
	rootNC.Flush()
	clusterNC := natstest.Conn(t, cluster.Server)
	if got := requestUntil(t, clusterNC, "allot.global.server.get"); got != "from global" {
		t.Fatalf("reply %q", got)
	}

	// JetStream per domain: a bucket made at the cluster is not the
	// root's, and the root's is reached only through its domain's prefix.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range []*natstest.Level{root, region, cluster} {
		js, err := jetstream.New(natstest.Conn(t, l.Server))
		if err != nil {
			t.Fatal(err)
		}
		ai, err := js.AccountInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ai.Domain != l.Opts.Domain {
			t.Fatalf("%s: JetStream domain %q, want %q", l.Opts.ServerName, ai.Domain, l.Opts.Domain)
		}
	}
	rootJS, _ := jetstream.New(rootNC)
	if _, err := rootJS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "only_root"}); err != nil {
		t.Fatal(err)
	}
	clusterJS, _ := jetstream.New(clusterNC)
	if _, err := clusterJS.KeyValue(ctx, "only_root"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("root's bucket looked up in the cluster's domain: %v, want bucket not found", err)
	}
	viaDomain, err := jetstream.NewWithDomain(clusterNC, "global")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := viaDomain.KeyValue(ctx, "only_root")
	if err != nil {
		t.Fatalf("root's bucket through domain global, two levels down: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("put through domain global: %v", err)
	}

	region.Cut(t)
	// The root's interest leaves the cluster a moment after the link.
	poll.For(t, 30*time.Second, poll.Interval, func() error {
		if _, err := clusterNC.Request("allot.global.server.get", nil, 200*time.Millisecond); !errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("request with the region's link cut: %v, want no responders", err)
		}
		return nil
	})
	region.Restore(t)
	if got := requestUntil(t, clusterNC, "allot.global.server.get"); got != "from global" {
		t.Fatalf("reply after restore %q", got)
	}
}

// TestLeafOptionsInvalid: bad leaf settings fail Start with an error that
// names them.
func TestLeafOptionsInvalid(t *testing.T) {
	for _, tc := range []struct {
		o    embed.Options
		want string
	}{
		{embed.Options{LeafRemotes: []string{"http://x:1"}}, "nats-leaf://HOST:PORT"},
		{embed.Options{LeafRemotes: []string{"nats-leaf://nohost"}}, "host and port"},
		{embed.Options{LeafNodePort: 70000}, "leaf-node port 70000"},
		{embed.Options{LeafNodePort: -5}, "leaf-node port -5"},
	} {
		tc.o.StoreDir = t.TempDir()
		s, err := embed.Start(tc.o)
		if err == nil {
			s.Shutdown()
			t.Fatalf("%+v: started", tc.o)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}
