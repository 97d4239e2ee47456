package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envChild carries a helper role and its arguments (JSON) to this test
// binary run again as a child process, as `allot bench child` does.
const envChild = "ALLOT_BENCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(envChild); spec != "" {
		var args []string
		if err := json.Unmarshal([]byte(spec), &args); err != nil || len(args) == 0 {
			fmt.Fprintln(os.Stderr, "bad", envChild, spec)
			os.Exit(2)
		}
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := ServeChild(ctx, args[0], args[1:], os.Stdout, os.Stderr)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testChild runs helper roles in this test binary, started again.
func testChild(t *testing.T) ChildFunc {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, role string, args []string) *exec.Cmd {
		spec, _ := json.Marshal(append([]string{role}, args...))
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"="+string(spec))
		return cmd
	}
}

// TestFailoverPlumbing runs both failover scenarios with a few claimants
// and short times: it checks the plumbing (the leader killed, the node
// answering again, the parent's server back, a series on each side of the
// fault), not the figures.
func TestFailoverPlumbing(t *testing.T) {
	env := &Env{Short: true, Child: testChild(t)}
	o := FailoverOptions{Claimants: 20, Lease: 4 * time.Second, Refresh: time.Second, Down: 2 * time.Second, Observe: 30 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := RunFailover(ctx, env, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(r.Runs))
	}
	for _, run := range r.Runs {
		if run.Before < 0.99 || len(run.Series) == 0 || run.ServiceS <= 0 {
			t.Errorf("%s: before %.3f, %d points, service after %.1fs", run.Scenario, run.Before, len(run.Series), run.ServiceS)
		}
	}
	if back := r.Runs[1].BackS; back < o.Down.Seconds() {
		t.Errorf("parent-restart: the parent's server back %.1fs after the fault, want at least %v", back, o.Down)
	}
	if md := r.Markdown(); !strings.Contains(md, "leader-kill") || !strings.Contains(md, "parent-restart") {
		t.Errorf("report:\n%s", md)
	}
	t.Log("\n" + r.Markdown())
}
