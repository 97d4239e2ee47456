package natstest

import (
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/netcut"
)

// Level is one level of a test tree: an embedded server with its own
// JetStream domain that accepts leaf-node connections from child levels.
type Level struct {
	// Server is the level's server.
	Server *server.Server
	// Opts are the options it was started with.
	Opts embed.Options
	// link relays the leaf connection to the parent, so that Cut and
	// Restore need no reload of the server's options (a reload races with
	// the server's own readers of them under the race detector).
	link *netcut.Relay
}

// Root starts a tree's root level with JetStream domain domain.
func Root(tb testing.TB, domain string) *Level {
	tb.Helper()
	return startLevel(tb, embed.Options{StoreDir: tb.TempDir(), ServerName: domain, Domain: domain, LeafNodePort: embed.RandomPort, LeafNoAdvertise: true})
}

// Child starts a level with JetStream domain domain, joined to parent as a
// leaf node, and waits until the link is up.
func Child(tb testing.TB, domain string, parent *Level) *Level {
	tb.Helper()
	u, err := url.Parse(embed.LeafNodeURL(parent.Server))
	if err != nil {
		tb.Fatal(err)
	}
	link, err := netcut.New(u.Host)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = link.Close() })
	l := startLevel(tb, embed.Options{StoreDir: tb.TempDir(), ServerName: domain, Domain: domain,
		LeafNodePort: embed.RandomPort, LeafNoAdvertise: true, LeafRemotes: []string{"nats-leaf://" + link.Addr()}})
	l.link = link
	l.WaitLinked(tb, true)
	return l
}

func startLevel(tb testing.TB, o embed.Options) *Level {
	tb.Helper()
	s, err := embed.Start(o)
	if err != nil {
		tb.Fatalf("start nats-server %s: %v", o.ServerName, err)
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return &Level{Server: s, Opts: o}
}

// Cut disconnects the level from its parent and waits until the link is
// down.
func (l *Level) Cut(tb testing.TB) {
	tb.Helper()
	l.link.Cut()
	l.WaitLinked(tb, false)
}

// Restore reconnects the level to its parent and waits until the link is
// up.
func (l *Level) Restore(tb testing.TB) {
	tb.Helper()
	l.link.Restore()
	l.WaitLinked(tb, true)
}

// WaitLinked waits up to 10s until the level's link to its parent is up
// (or down).
func (l *Level) WaitLinked(tb testing.TB, up bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for embed.LeafLinked(l.Server) != up {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: leaf link to parent up=%v after 10s, want %v", l.Opts.ServerName, !up, up)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
