package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/internal/poll"
)

// startUp starts `allot up` on dataDir with a random port.
func startUp(t *testing.T, bin, dataDir, name string) (*exec.Cmd, <-chan struct{}, *os.File) {
	t.Helper()
	return StartProcess(t, name, bin, "up", "--data-dir", dataDir, "--port", "0", "--metrics-addr", "", "--election-ttl", ElectionTTL.String(), "--server-id", name)
}

var upURL = regexp.MustCompile(`allot is up: NATS at (nats://\S+),`)

// TestTwoUpOneDataDir starts a second `allot up` on the data directory of
// a running one. The second must fail with an error that
// names the directory, and the first must keep serving.
func TestTwoUpOneDataDir(t *testing.T) {
	t.Parallel()
	const (
		resource = "twoup"
		capacity = 60
	)
	bin := BuildAllot(t)
	dataDir := t.TempDir()
	_, _, firstOut := startUp(t, bin, dataDir, "first")
	var url string
	poll.Until(t, 30*time.Second, "the first allot up to announce itself", func() bool {
		if m := upURL.FindStringSubmatch(ReadOutput(firstOut)); m != nil {
			url = m[1]
		}
		return url != ""
	})
	nc, err := Connect(url, "faults test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// The coordinator is already serving: until it has applied the
	// template, the agents would be leased under the default one.
	const safe = 3
	PutTemplate(t, nc, "twoup", Template(resource+"*", capacity, stdLease, stdRefresh, fmt.Sprintf(`,"safe_capacity":%d`, safe)))
	var warmErr error
	if !poll.Ok(10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		// Wants at least the safe capacity: a floor is never above the
		// lease.
		resp, err := Get(ctx, nc, "warm", resource+"-warm", 2*safe)
		if err == nil {
			_, err = Granted(resp)
		}
		if err == nil && resp.GetResponse()[0].GetSafeCapacity() != safe {
			err = fmt.Errorf("safe capacity %g, want %d", resp.GetResponse()[0].GetSafeCapacity(), safe)
		}
		warmErr = err
		return err == nil
	}) {
		t.Fatalf("the template twoup was not applied: %v", warmErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := Release(ctx, nc, "warm", resource+"-warm"); err != nil {
		t.Fatal(err)
	}
	cancel()
	load := StartLoad(t, nc, "agent", stdAgents, resource, capacity, stdWants)
	s := load.Sampler

	second, secondDone, secondOut := startUp(t, bin, dataDir, "second")
	exited := false
	select {
	case <-secondDone:
		exited = true
	case <-time.After(15 * time.Second):
	}
	probe := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := Get(ctx, nc, "probe", resource+"-probe", 10)
		if err != nil {
			return err
		}
		got, err := Granted(resp)
		if err == nil && got <= 0 {
			err = fmt.Errorf("granted %g of 10 wanted", got)
		}
		return err
	}
	var probeErr error
	served := poll.Ok(5*time.Second, func() bool { probeErr = probe(); return probeErr == nil })
	leased := poll.Ok(5*time.Second, load.Leased)

	Report(t, "two-up-one-dir", s.Stop(), "second_exited="+yes(exited), "first_serves="+yes(served), "agents_leased="+yes(leased))
	if !exited {
		t.Errorf("two-up-one-dir: a second allot up on data dir %s still runs after 15s; want it to fail at once with a clear error", dataDir)
	} else {
		msg := ReadOutput(secondOut)
		if second.ProcessState.Success() {
			t.Errorf("two-up-one-dir: the second allot up exited with status 0; want a failure:\n%s", msg)
		}
		if !strings.Contains(msg, dataDir) {
			t.Errorf("two-up-one-dir: the second allot up failed without naming the data dir %s:\n%s", dataDir, msg)
		}
	}
	if !served {
		t.Errorf("two-up-one-dir: the first allot up no longer grants capacity to a new client: %v", probeErr)
	}
	if !leased {
		t.Errorf("two-up-one-dir: the first allot up's agents do not all hold leases")
	}
}
