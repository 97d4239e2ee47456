package domain

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// seizeHelperEnv makes the test binary, run by TestTransferAcrossProcesses,
// act as the second process instead of running tests.
const seizeHelperEnv = "ALLOT_TEST_SEIZE_TRANSFER"

// TestSeizeHelperProcess is the second process of
// TestTransferAcrossProcesses; it does nothing in a normal test run. It
// seizes the transfer named in the environment with an agent of its own,
// releases one copy, prints what it holds, keeps it (refreshing) until
// its standard input is closed, and then exits while holding it (without
// Close), so that only the hold's expiry gives it back.
func TestSeizeHelperProcess(t *testing.T) {
	id := os.Getenv(seizeHelperEnv)
	if id == "" {
		t.Skip("helper process of TestTransferAcrossProcesses")
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(ag)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := a.Seize(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("seized %s holding %d\n", h.Domain(), h.Copies())
	// Alive until the first process has seen the service count the hold.
	_, _ = io.Copy(io.Discard, os.Stdin)
	nc.Close() // dies holding: no release, no refresh
}

// TestTransferAcrossProcesses: this process reserves 5 copies and stages
// 3 for transfer; another process (this test binary run again) seizes
// them with an agent of its own, releases 1 and exits holding 2. The
// service counts 2 + 2 while both live, and this process's 2 alone once
// the other's hold has expired.
func TestTransferAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second process")
	}
	s := natstest.Server(t)
	srv := startDomainServer(t, s, 800*time.Millisecond, false)
	a := newClient(t, natstest.Conn(t, s), "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := a.Reserve(ctx, "app:sandbox", "acme", 5)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	id, err := h.Transfer(ctx, 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSeizeHelperProcess$", "-test.v")
	// Under -race a process sleeps a second at exit (GORACE
	// atexit_sleep_ms), longer than the hold's ttl: the seized hold would
	// expire before the service could be seen counting it.
	cmd.Env = append(os.Environ(), seizeHelperEnv+"="+id, "NATS_URL="+s.ClientURL(), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	// The second process holds on until its stdin is closed: the count of
	// both holds is read while it lives, not after its exit, which on a
	// loaded machine may come later than the hold's ttl after its last
	// refresh.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for !strings.Contains(out.String(), "seized acme holding 2") {
		select {
		case err := <-exited:
			t.Fatalf("second process: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if st := srv.Stats(); st.CopiesHeld != 4 || st.Seized != 1 || st.Transfers != 0 {
		t.Fatalf("after the seize in the other process: %+v", st)
	}
	_ = stdin.Close()
	if err := <-exited; err != nil {
		t.Fatalf("second process: %v\n%s", err, out.String())
	}
	poll.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if st := srv.Stats(); st.CopiesHeld != 2 {
			return fmt.Errorf("the dead process's hold never expired: %+v", st)
		}
		return nil
	})
	if h.Copies() != 2 || h.Err() != nil {
		t.Errorf("this process's hold: %d copies, lost %v", h.Copies(), (h.Err() != nil))
	}
}
