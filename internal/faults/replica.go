package faults

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/replica"
)

// ElectionTTL is the election TTL of every replica of the test set.
const ElectionTTL = 3 * time.Second

// Connect dials url the way `allot coordinator` does: reconnecting
// forever, quickly.
func Connect(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	return nc, nil
}

// ServeReplica runs one coordinator replica of node "root" on nc until ctx
// ends, as `allot coordinator` does: templates come from the watched
// configuration bucket (unmatched resources get the built-in default), the
// watch resyncs on reconnect, and the replica campaigns with ElectionTTL.
// onServing may be nil.
func ServeReplica(ctx context.Context, nc *nats.Conn, id string, log *slog.Logger, onServing func(term uint64, serving bool)) (*coordinator.Replica, <-chan error, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	kv, err := configkv.OpenBucket(startCtx, js, configkv.DefaultBucket, true)
	if err != nil {
		return nil, nil, err
	}
	w := configkv.NewWatcher(kv, config.UnmatchedDefault.Fallback(), log)
	if err := w.Start(startCtx); err != nil {
		return nil, nil, err
	}
	nc.SetReconnectHandler(func(*nats.Conn) { w.Resync() })
	rep, err := coordinator.NewReplica(nc, coordinator.ReplicaOptions{
		Options:  coordinator.Options{ServerID: id, Templates: sources.WatchedTemplates(w), Logger: log},
		Election: replica.Election{TTL: ElectionTTL, OnServing: onServing},
	})
	if err != nil {
		w.Stop()
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() {
		err := rep.Run(ctx)
		w.Stop() // before done: nothing may log after the test has ended
		done <- err
	}()
	return rep, done, nil
}

// Replica is a replica running in this process on its own connection.
type Replica struct {
	*coordinator.Replica
	ID     string
	nc     *nats.Conn
	cancel context.CancelFunc
	done   <-chan error
	once   sync.Once
}

// StartReplica starts a replica named id against url; the test's cleanup
// stops it.
func StartReplica(tb testing.TB, url, id string) *Replica {
	tb.Helper()
	nc, err := Connect(url, "faults replica "+id)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := TestLogger(tb).With("replica", id)
	rep, done, err := ServeReplica(ctx, nc, id, log, nil)
	if err != nil {
		cancel()
		nc.Close()
		tb.Fatalf("start replica %s: %v", id, err)
	}
	r := &Replica{Replica: rep, ID: id, nc: nc, cancel: cancel, done: done}
	tb.Cleanup(r.Stop)
	return r
}

// Stop ends the replica (it resigns) and closes its connection.
func (r *Replica) Stop() {
	r.once.Do(func() {
		r.cancel()
		select {
		case <-r.done:
		case <-time.After(15 * time.Second):
			// Stuck on NATS: closing the connection ends Run.
			r.nc.Close()
			select {
			case <-r.done:
			case <-time.After(5 * time.Second):
			}
		}
		r.nc.Close()
	})
}

// WaitServing waits until one of reps serves and returns it with its term.
func WaitServing(tb testing.TB, timeout time.Duration, reps ...*Replica) (*Replica, uint64) {
	tb.Helper()
	var got *Replica
	var term uint64
	poll.Until(tb, timeout, "a replica to serve", func() bool {
		for _, r := range reps {
			if st := r.Status(); st.Serving {
				got, term = r, st.Term
				return true
			}
		}
		return false
	})
	return got, term
}

// TestLogger logs at warning level and above through tb, so that a
// failing scenario shows what the coordinators complained about.
func TestLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// Environment variables of a child replica process.
const (
	envURL = "ALLOT_FAULTS_REPLICA_URL"
	envID  = "ALLOT_FAULTS_REPLICA_ID"
)

// ChildMain runs a replica (or a flood) and exits if this process was
// started by StartChild (or StartFlood); otherwise it returns at once.
// Call it first in TestMain.
func ChildMain() {
	url := os.Getenv(envURL)
	if url == "" {
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if spec := os.Getenv(envFlood); spec != "" {
		if err := runFlood(url, spec); err != nil {
			log.Error("flood failed", "err", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if err := runChild(url, os.Getenv(envID), log); err != nil {
		log.Error("child replica failed", "err", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(url, id string, log *slog.Logger) error {
	nc, err := Connect(url, "faults child replica "+id)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := signalContext()
	defer cancel()
	go exitWithParent(ctx, cancel)
	_, done, err := ServeReplica(ctx, nc, id, log, func(term uint64, serving bool) {
		log.Info("serving changed", "term", term, "serving", serving)
	})
	if err != nil {
		return err
	}
	return <-done
}

// Child is a replica running in a child process (this test binary run
// again), so that signals such as SIGSTOP reach it alone.
type Child struct {
	ID  string
	cmd *exec.Cmd
}

// StartChild starts a child replica named id against url. The test's
// cleanup kills it and, if the test failed, logs its output.
func StartChild(tb testing.TB, url, id string) *Child {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatalf("find test binary: %v", err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envURL+"="+url, envID+"="+id)
	out := OutputFile(tb, "child-"+id)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start child replica: %v", err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if tb.Failed() {
			tb.Logf("child replica %s output:\n%s", id, ReadOutput(out))
		}
	})
	return &Child{ID: id, cmd: cmd}
}

// Signal sends sig to the child.
func (c *Child) Signal(tb testing.TB, sig os.Signal) {
	tb.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("signal %v to child %s: %v", sig, c.ID, err)
	}
}

// OutputFile creates a file in the test's temporary directory for a child
// process's output; the child writes to it directly, so reading it while
// the child runs needs no locking here.
func OutputFile(tb testing.TB, name string) *os.File {
	tb.Helper()
	f, err := os.Create(filepath.Join(tb.TempDir(), name+".log"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	return f
}

// ReadOutput returns what has been written to f so far.
func ReadOutput(f *os.File) string {
	data, err := os.ReadFile(f.Name())
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", f.Name(), err)
	}
	return string(data)
}

// exitWithParent cancels when the test binary that started this child
// ends (the child is then re-parented), so that a crashed test leaves no
// replica behind.
func exitWithParent(ctx context.Context, cancel context.CancelFunc) {
	parent := os.Getppid()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if os.Getppid() != parent {
				cancel()
				return
			}
		}
	}
}

// signalContext ends on SIGTERM or an interrupt, so a child resigns.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
}

// RunProcess starts bin with args, its output in OutputFile(tb, name),
// and stops it when the test ends: stop, then a kill after grace, and its
// output logged if the test failed. It returns the output file and a
// channel closed when the process exits.
func RunProcess(tb testing.TB, name, bin string, stop os.Signal, grace time.Duration, args ...string) (out *os.File, exited <-chan struct{}) {
	tb.Helper()
	_, exited, out = startProcess(tb, name, bin, stop, grace, args)
	return out, exited
}

// StartProcess starts bin with args like RunProcess, for a test that
// signals it itself (SIGSTOP, kill -9): the test's end kills it.
func StartProcess(tb testing.TB, name, bin string, args ...string) (cmd *exec.Cmd, exited <-chan struct{}, out *os.File) {
	tb.Helper()
	return startProcess(tb, name, bin, os.Kill, 0, args)
}

func startProcess(tb testing.TB, name, bin string, stop os.Signal, grace time.Duration, args []string) (*exec.Cmd, <-chan struct{}, *os.File) {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	out := OutputFile(tb, name)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(stop)
		select {
		case <-done:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-done
		}
		if tb.Failed() {
			tb.Logf("%s output:\n%s", name, ReadOutput(out))
		}
	})
	return cmd, done, out
}
