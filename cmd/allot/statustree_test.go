package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
)

// allot status draws the tree from any level: each node under its parent,
// with its leader and term, and per resource its capacity (at the root)
// or lease (below it), outstanding and claimants.
func TestStatusDrawsTree(t *testing.T) {
	root := natstest.Root(t, "root")
	child := natstest.Child(t, "eu", root)
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: 500 * time.Millisecond, LearningModeDuration: 10 * time.Second}
	tmpls := sources.StaticTemplates(config.NewSet(1, []*config.Template{tm}, nil))
	rnc, cnc := natstest.Conn(t, root.Server), natstest.Conn(t, child.Server)
	coordtest.Start(t, rnc, coordinator.Options{Node: "root", Templates: tmpls, RoundInterval: 5 * time.Millisecond})
	coordtest.Start(t, cnc, coordinator.Options{Node: "eu", Parent: "root", Templates: tmpls, RoundInterval: 5 * time.Millisecond})
	ask := func() {
		for i := range 3 {
			m, err := cnc.Request(coordinator.Subject("eu", "capacity.get"), fmt.Appendf(nil, `{"client_id":"c%d","resource":[{"resource_id":"db","wants":20}]}`, i), 30*time.Second)
			if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
				t.Fatalf("get at eu: %v %v", err, m.Header)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	for {
		ask() // clients come back, as agents do
		out.Reset()
		env := &cliEnv{stdout: &out, stderr: &errb, log: slog.New(slog.DiscardHandler)}
		run(ctx, env, []string{"status", "--nats", child.Server.ClientURL(), "--wait", "300ms"})
		_, tree, _ := strings.Cut(out.String(), "TREE\n")
		// The child's line is indented under the root's, and its
		// resource shows the lease it holds from the root.
		if strings.HasPrefix(tree, "root") && strings.Contains(tree, "\n  eu (under root)") &&
			strings.Contains(tree, "db: lease 60, outstanding 60, 3 claimants") &&
			strings.Contains(tree, "root  leader ") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("status never drew the tree:\n%s%s", out.String(), errb.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
