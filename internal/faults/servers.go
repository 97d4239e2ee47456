package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/poll"
)

// ServerProc is one server of a ProcCluster: a nats-server process with
// JetStream, so that it can be killed with SIGKILL or frozen with SIGSTOP
// like a real one.
type ServerProc struct {
	bin  string
	spec serverSpec

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *os.File
}

// Name is the server's name (s0, s1, ...).
func (s *ServerProc) Name() string { return s.spec.Name }

// URL is the server's client URL.
func (s *ServerProc) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.spec.Port) }

// serverSpec is what a server process is started with.
type serverSpec struct {
	Name        string
	Port        int
	ClusterPort int
	Routes      []string
	StoreDir    string
}

// ProcCluster is a NATS cluster of nats-server processes on loopback
// ports that stay the same across restarts.
type ProcCluster struct {
	Servers []*ServerProc
}

// freePorts returns n ports that were free a moment ago.
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	out := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out
}

// StartProcCluster starts n servers of the nats-server binary bin (see
// BuildNATSServer) routed into one cluster, and returns once its
// JetStream has a meta leader (and, with three servers or more, places
// three-replica buckets). The test's cleanup kills them.
func StartProcCluster(tb testing.TB, bin string, n int) *ProcCluster {
	tb.Helper()
	ports := freePorts(tb, 2*n)
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i])
	}
	c := &ProcCluster{}
	for i := range n {
		s := &ServerProc{bin: bin, spec: serverSpec{Name: fmt.Sprintf("s%d", i), Port: ports[i], ClusterPort: ports[n+i], Routes: routes, StoreDir: tb.TempDir()}}
		c.Servers = append(c.Servers, s)
		s.Start(tb)
	}
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1))
	if err != nil {
		tb.Fatalf("connect to the cluster: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	poll.Until(tb, 60*time.Second, "the cluster's JetStream", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
	if n >= 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		WaitPlacement(ctx, tb, js)
	}
	return c
}

// URL returns every server's client URL, comma-separated.
func (c *ProcCluster) URL() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// Server returns the server named name, or nil.
func (c *ProcCluster) Server(name string) *ServerProc {
	for _, s := range c.Servers {
		if s.spec.Name == name {
			return s
		}
	}
	return nil
}

// Start starts the server's process (again, after Kill: same name, ports
// and store) and waits until it accepts connections.
func (s *ServerProc) Start(tb testing.TB) {
	tb.Helper()
	cmd := exec.Command(s.bin, "--name", s.spec.Name, "--addr", "127.0.0.1", "--port", strconv.Itoa(s.spec.Port),
		"--jetstream", "--store_dir", s.spec.StoreDir, "--cluster_name", "allot-faults",
		"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", s.spec.ClusterPort), "--routes", strings.Join(s.spec.Routes, ","))
	s.mu.Lock()
	if s.out == nil {
		s.out = OutputFile(tb, "server-"+s.spec.Name)
		tb.Cleanup(func() {
			s.Kill(tb)
			if tb.Failed() {
				tb.Logf("server %s output:\n%s", s.spec.Name, ReadOutput(s.out))
			}
		})
	}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		tb.Fatalf("start server %s: %v", s.spec.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	poll.Until(tb, 30*time.Second, "server "+s.spec.Name+" to accept connections", func() bool {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.spec.Port), time.Second)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
}

// Kill kills the server's process with SIGKILL (kill -9) and waits until
// it has ended. Killing a server that is not running does nothing.
func (s *ServerProc) Kill(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen process dies too
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		tb.Errorf("kill server %s: %v", s.spec.Name, err)
	}
	<-exited
}

// Signal sends sig (SIGSTOP, SIGCONT) to the server's process.
func (s *ServerProc) Signal(tb testing.TB, sig os.Signal) {
	tb.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		tb.Fatalf("signal %v to server %s: not running", sig, s.spec.Name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("signal %v to server %s: %v", sig, s.spec.Name, err)
	}
}

// StreamLeader returns the name of the server that leads stream, as the
// cluster reports it through nc.
func StreamLeader(ctx context.Context, nc *nats.Conn, stream string) (string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return "", fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("stream %s: %w", stream, err)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", fmt.Errorf("stream %s has no leader", stream)
	}
	return info.Cluster.Leader, nil
}

// BuildNATSServer builds the nats-server of the version in go.mod into a
// temporary directory of tb, or skips the test if no Go toolchain is on
// PATH to build it.
func BuildNATSServer(tb testing.TB) string {
	tb.Helper()
	return build(tb, "nats-server", "github.com/nats-io/nats-server/v2")
}

// BuildAllot builds cmd/allot into a temporary directory of tb, or skips
// the test if no Go toolchain is on PATH to build it.
func BuildAllot(tb testing.TB) string {
	tb.Helper()
	return build(tb, "allot", "github.com/allot/allot/cmd/allot")
}

func build(tb testing.TB, name, pkg string) string {
	tb.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		tb.Skipf("cannot build %s: no go command on PATH (%v)", pkg, err)
	}
	bin := filepath.Join(tb.TempDir(), name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// WaitPlacement waits until the cluster js speaks to places a
// three-replica bucket: on a machine loaded enough that a server misses
// its heartbeats, the meta leader briefly takes it for offline and
// refuses to place one ("no suitable peers for placement"). `allot
// coordinator` waits that out too (up to its start time-out), so this
// only keeps a scenario's timeline from starting with that wait. It fails
// tb once ctx ends.
func WaitPlacement(ctx context.Context, tb testing.TB, js jetstream.JetStream) {
	tb.Helper()
	for {
		_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "placement_probe", Replicas: 3})
		if err == nil {
			if err := js.DeleteKeyValue(ctx, "placement_probe"); err != nil {
				tb.Fatal(err)
			}
			return
		}
		if ctx.Err() != nil {
			tb.Fatalf("the cluster places no three-replica bucket: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
