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
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/replica"
)

// TestStatus runs two replicas and checks that `allot status` shows the
// leader with its term and the other replica as follower.
func TestStatus(t *testing.T) {
	s := natstest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var reps []*coordinator.Replica
	done := make(chan error, 2)
	runCtx, stop := context.WithCancel(ctx)
	for _, id := range []string{"alpha", "beta"} {
		// A seat of 30s: the test checks the leader it saw first, and with
		// the default 3s a stall of the machine handed the seat over.
		rep, err := coordinator.NewReplica(natstest.Conn(t, s), coordinator.ReplicaOptions{
			Options:  coordinator.Options{ServerID: id, Logger: slog.New(slog.DiscardHandler)},
			Election: replica.Election{TTL: 30 * time.Second},
		})
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, rep)
		go func() { done <- rep.Run(runCtx) }()
	}
	defer func() {
		stop()
		<-done
		<-done
	}()
	var leader, follower string
	poll.Until(t, 30*time.Second, "a leader and a follower", func() bool {
		leader, follower = "", ""
		for _, r := range reps {
			st := r.Status()
			if st.Serving {
				leader = st.ServerID
			} else if st.Leader != "" {
				follower = st.ServerID
			}
		}
		return leader != "" && follower != ""
	})
	var out, errb bytes.Buffer
	env := &cliEnv{stdout: &out, stderr: &errb, log: slog.New(slog.DiscardHandler)}
	// status shows the replicas that answer within its --wait (500ms):
	// under -race on a loaded machine one may answer later, so a call
	// that misses it is made again, until the test's deadline.
	for {
		out.Reset()
		errb.Reset()
		problem := checkStatus(run(ctx, env, []string{"status", "--nats", s.ClientURL()}), out.String(), errb.String(), leader, follower)
		if problem == "" {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(problem)
		}
	}
	t.Logf("\n%s", out.String())
	for {
		out.Reset()
		errb.Reset()
		code := run(ctx, env, []string{"status", "--nats", s.ClientURL(), "--json"})
		if code == 0 && strings.Contains(out.String(), `"role": "follower"`) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("status --json exit %d:\n%s%s", code, out.String(), errb.String())
		}
	}
}

// checkStatus returns what is wrong with `allot status` output for one
// node with leader and follower, or "".
func checkStatus(code int, out, errs, leader, follower string) string {
	if code != 0 {
		return fmt.Sprintf("status exit %d: %s", code, errs)
	}
	table, tree, ok := strings.Cut(strings.TrimSpace(out), "\n\nTREE\n")
	lines := strings.Split(table, "\n")
	if !ok || len(lines) != 2 {
		return "want a header and one node line, then the tree:\n" + out
	}
	if !strings.HasPrefix(tree, "root  leader "+leader) {
		return fmt.Sprintf("tree %q does not start with root and its leader %s", tree, leader)
	}
	f := strings.Fields(lines[1])
	if f[0] != "root" || f[1] != leader || f[2] == "-" || f[len(f)-1] != follower {
		return fmt.Sprintf("status line %q, want root, leader %s, a term, follower %s", lines[1], leader, follower)
	}
	return ""
}

// TestStatusNothingAnswers: with no coordinator, status says so and exits
// non-zero, in table and JSON form.
func TestStatusNothingAnswers(t *testing.T) {
	s := natstest.Server(t)
	for _, args := range [][]string{{}, {"--json"}} {
		var out, errb bytes.Buffer
		env := &cliEnv{stdout: &out, stderr: &errb, log: slog.New(slog.DiscardHandler)}
		code := run(context.Background(), env, append([]string{"status", "--nats", s.ClientURL(), "--wait", "100ms"}, args...))
		if code == 0 || !strings.Contains(errb.String(), "no coordinator replica answered") {
			t.Errorf("status %v with no coordinator: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

// statusUntil runs `allot status` with args (the connection's) until
// problem, given its exit code and output, returns "" and returns that
// output; after 20s it fails the test with the last problem. status shows what the partitions and
// replicas answer within its --wait: under -race on a loaded machine one
// may answer later than that, and a call must not be read as the whole
// answer.
func statusUntil(t *testing.T, problem func(code int, out string) string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		code, out := runCtx(ctx, append([]string{"status"}, args...)...)
		p := problem(code, out)
		if p == "" {
			return out
		}
		if ctx.Err() != nil {
			t.Fatal(p)
		}
	}
}
