package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/intake"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/heapfloor"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// ChildFunc returns a command that runs ServeChild(ctx, role, args) in a
// new process, e.g. `allot bench child <role> <args>`.
type ChildFunc func(ctx context.Context, role string, args []string) *exec.Cmd

// Helper roles for ServeChild.
const (
	RoleCoordinator = "coordinator"
	RoleEcho        = "echo"
	RoleQuota       = "quota"
	RoleDomain      = "domain"
	RoleReplica     = "replica"
	RoleFlood       = "flood"
)

// ServeChild runs a helper role until ctx ends:
//
//   - "coordinator" serves allot on --nats with one template for every
//     resource (FAIR_SHARE, --capacity, --lease, --refresh) and the round
//     interval --round (0 answers at once), for --node (lease partition
//     --lease-partition of --lease-partitions, or all of them with
//     --all-lease-partitions);
//   - "echo" is a bare NATS responder on --subject that answers every
//     request with its own payload and content type, or with --reply-size
//     bytes of JSON: the baseline that the coordinator's throughput is
//     compared with;
//   - "quota" serves the quota service, --partitions servers (the NATS
//     server maps subjects to them) answering for --namespaces namespaces
//     of never-empty dynamic token buckets;
//   - "domain" serves the domain limits of the charon benchmark;
//   - "replica" runs a coordinator replica of node root named --id, in
//     the node's election (TTL 3 s), with the coordinator's template,
//     round and intake flags; it is ready at once, or with --await-lead
//     once it serves. The failover benchmark kills its leader with
//     kill -9; the overload benchmark floods it;
//   - "flood" floods the coordinator (the overload benchmark) until
//     interrupted, then waits for the late answers and writes what its
//     requests got on stderr (floodCountsPrefix and JSON).
//
// It prints "ready" on stdout once serving.
func ServeChild(ctx context.Context, role string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("allot bench child "+role, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("nats", nats.DefaultURL, "NATS server URL")
	subject := fs.String("subject", "bench.echo", "echo: subject to answer on")
	replySize := fs.Int("reply-size", 0, "echo: answer every request with this many bytes of JSON (Content-Type application/json) instead of its own payload")
	round := fs.Duration("round", 0, "coordinator: round interval (0 answers at once)")
	capacity := fs.Float64("capacity", 1e6, "coordinator: capacity of every resource")
	lease := fs.Duration("lease", time.Minute, "coordinator: lease length")
	refresh := fs.Duration("refresh", 5*time.Second, "coordinator: refresh interval")
	partitions := fs.Int("partitions", 1, "quota: partitions")
	node := fs.String("node", "", "coordinator: the node served (default root)")
	leasePart := fs.Int("lease-partition", 0, "coordinator: the lease partition served, of --lease-partitions")
	leaseParts := fs.Int("lease-partitions", 1, "coordinator: lease partitions of the node")
	allParts := fs.Bool("all-lease-partitions", false, "coordinator: serve every lease partition of --lease-partitions in this one process, on one connection (as allot coordinator --lease-serve all does), instead of --lease-partition")
	namespaces := fs.Int("namespaces", 8, "quota: namespaces qb0..qb<n-1>")
	id := fs.String("id", "bench-replica", "replica: the replica's server id")
	awaitLead := fs.Bool("await-lead", false, "replica: say ready only once it serves")
	inFlight := fs.Int("max-in-flight", 0, "replica, coordinator: the intake's in-flight bound (0: the default)")
	var fo OverloadOptions
	fs.IntVar(&fo.FloodConns, "conns", 4, "flood: connections sending small requests")
	fs.IntVar(&fo.FloodIDs, "ids", 20000, "flood: client ids")
	fs.IntVar(&fo.BigPerSecond, "big", 10, "flood: requests of 1,000 resources per second")
	fs.DurationVar(&fo.Timeout, "timeout", 2*time.Second, "flood: the requests' time-out")
	profile := fs.String("profile", "", "directory for this process's CPU profile and, when it is asked to stop, heap profile")
	heapFloor := fs.String("heap-floor", heapfloor.Default, "coordinator, quota, domain, replica: the heap floor allot coordinator keeps by default (--heap-floor); the echo and the flood keep Go's own pacing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if role != RoleEcho && role != RoleFlood {
		floor, err := heapfloor.ParseSize(*heapFloor)
		if err != nil {
			return fmt.Errorf("bench child: --heap-floor: %w", err)
		}
		defer heapfloor.Start(ctx, floor, nil)()
	}
	if *profile != "" {
		stop, err := startProfile(*profile, role)
		if err != nil {
			return err
		}
		defer stop()
		// The heap as it is under load, before the role stops and lets go.
		ctx = withHeapProfile(ctx, *profile, role, stderr)
	}
	nc, err := nats.Connect(*url, nats.Name("allot bench "+role))
	if err != nil {
		return fmt.Errorf("bench child: connect to %s: %w", *url, err)
	}
	defer nc.Close()
	switch role {
	case RoleEcho:
		sub, err := serveEcho(nc, *subject, *replySize)
		if err != nil {
			return err
		}
		defer func() { _ = sub.Unsubscribe() }()
		fmt.Fprintln(stdout, "ready")
		<-ctx.Done()
		return nil
	case RoleCoordinator:
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		served := []int{*leasePart}
		if *allParts {
			served = served[:0]
			for p := range *leaseParts {
				served = append(served, p)
			}
		}
		var cs []*coordinator.Coordinator
		defer func() {
			for _, c := range cs {
				c.Stop()
			}
		}()
		for _, p := range served {
			c, err := startCoordinator(ctx, nc, coordOptions{node: *node, round: *round, tmpl: benchTemplate(*capacity, *lease, *refresh),
				partition: p, partitions: *leaseParts, intake: intake.Limits{MaxInFlight: *inFlight}}, log)
			if err != nil {
				return err
			}
			cs = append(cs, c)
		}
		fmt.Fprintln(stdout, "ready")
		<-ctx.Done()
		return nil
	case RoleFlood:
		return runFloodChild(ctx, *url, fo, stdout, stderr)
	case RoleReplica:
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		tmpls := sources.StaticTemplates(config.NewSet(1, nil, benchTemplate(*capacity, *lease, *refresh)))
		r, err := startReplica(ctx, *url, coordinator.Options{ServerID: *id, Templates: tmpls, RoundInterval: *round,
			Intake: intake.Limits{MaxInFlight: *inFlight}, Logger: log}, nats.MaxReconnects(-1))
		if err != nil {
			return err
		}
		if *awaitLead {
			select {
			case <-r.serving:
			case <-r.done:
				return errors.New("bench child: replica ended before it served")
			}
		}
		fmt.Fprintln(stdout, "ready")
		<-ctx.Done()
		r.stop()
		return nil
	case RoleDomain:
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		stop, err := serveDomain(ctx, *url, log)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "ready")
		<-ctx.Done()
		stop()
		return nil
	case RoleQuota:
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		stop, err := serveQuota(ctx, *url, *partitions, *namespaces, log)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "ready")
		<-ctx.Done()
		stop()
		return nil
	}
	return fmt.Errorf("bench child: unknown role %q (want %s, %s, %s, %s, %s or %s)", role, RoleCoordinator, RoleEcho, RoleQuota, RoleDomain, RoleReplica, RoleFlood)
}

// serveEcho answers requests on subject with their own payload, or with
// replySize bytes (echoReply) when it is above 0.
func serveEcho(nc *nats.Conn, subject string, replySize int) (*nats.Subscription, error) {
	hdr := nats.Header{wire.HeaderContentType: []string{wire.ContentProtobuf}}
	var fixed []byte
	if replySize > 0 {
		fixed, hdr = echoReply(replySize)
	}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		data := m.Data
		if fixed != nil {
			data = fixed
		}
		_ = nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: hdr, Data: data})
	})
	if err != nil {
		return nil, fmt.Errorf("bench: echo subscribe: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	return sub, nil
}

// echoReply is the echo's reply of size bytes with its header, standing
// in for a coordinator's JSON reply of that size: a JSON string (size
// at least 2) and the Content-Type every JSON reply carries.
func echoReply(size int) ([]byte, nats.Header) {
	data := bytes.Repeat([]byte{'x'}, size)
	if size >= 2 {
		data[0], data[size-1] = '"', '"'
	}
	return data, nats.Header{wire.HeaderContentType: []string{wire.ContentJSON}}
}

// benchTemplate is the FAIR_SHARE template the benchmarks serve.
func benchTemplate(capacity float64, lease, refresh time.Duration) *config.Template {
	return &config.Template{
		Name:            "bench",
		Glob:            "*",
		Capacity:        capacity,
		Algorithm:       allotpb.Algorithm_FAIR_SHARE,
		LeaseLength:     lease,
		RefreshInterval: refresh,
		// A fresh deployment has no lease horizon and skips learning mode
		// anyway; a restarted one learns for one lease length.
		LearningModeDuration: lease,
		// Floors keep production's ratio of floor lease to lease length
		// (5 min to 60 s), compressed like the rest.
		Floor: config.FloorPolicy{Share: config.DefaultFloorShare, Lease: 5 * lease},
	}
}

type coordOptions struct {
	node   string
	parent string        // parent node; empty for a root
	round  time.Duration // 0: answer at once
	tmpl   *config.Template
	tmpls  coordinator.TemplateSource
	bucket string
	id     string
	// partition of partitions: the lease partition served (0 of 1: the
	// node's plain subjects).
	partition, partitions int
	intake                intake.Limits
}

// startCoordinator starts a coordinator with o's template on nc.
func startCoordinator(ctx context.Context, nc *nats.Conn, o coordOptions, log *slog.Logger) (*coordinator.Coordinator, error) {
	round := o.round
	if round == 0 {
		round = coordinator.NoRoundInterval
	}
	src := o.tmpls
	if src == nil {
		src = sources.StaticTemplates(config.NewSet(1, nil, o.tmpl))
	}
	c, err := coordinator.New(nc, coordinator.Options{
		Node: o.node, Parent: o.parent, ServerID: o.id, RoundInterval: round, Templates: src, StateBucket: o.bucket, Logger: log,
		Partition: o.partition, Partitions: o.partitions, Intake: o.intake,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: coordinator: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Start(sctx); err != nil {
		return nil, fmt.Errorf("bench: start coordinator: %w", err)
	}
	return c, nil
}

// helper is a running helper role, in a child process or in this one.
type helper struct {
	role string
	pid  string // for /proc: a number, or "self" in process
	stop func() error
	// kill ends a child process with SIGKILL (kill -9); nil in process.
	kill   func() error
	output *syncBuffer
}

// startHelper starts role with args against the NATS server at url and
// waits for it to report ready.
func (e *Env) startHelper(ctx context.Context, role, url string, args []string) (*helper, error) {
	return e.startHelperEnv(ctx, role, url, args, nil)
}

// startHelperEnv is startHelper with environment variables added to a
// child process's ("GOMAXPROCS=1"); in process they are ignored.
func (e *Env) startHelperEnv(ctx context.Context, role, url string, args, environ []string) (*helper, error) {
	args = append([]string{"--nats", url}, args...)
	out := &syncBuffer{}
	if e.Child == nil {
		// In one process the garbage collector is everyone's: a floor
		// kept for the coordinator would be the echo's too.
		args = append(args, "--heap-floor", "0")
		hctx, cancel := context.WithCancel(ctx)
		ready := make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- ServeChild(hctx, role, args, readyWriter{ready}, out) }()
		select {
		case <-ready:
		case err := <-done:
			cancel()
			return nil, fmt.Errorf("bench: %s helper: %w: %s", role, err, out.String())
		}
		return &helper{role: role, pid: "self", output: out, stop: func() error {
			cancel()
			return <-done
		}}, nil
	}
	if e.ProfileDir != "" {
		args = append(args, "--profile", e.ProfileDir)
	}
	cmd := e.Child(ctx, role, args)
	if len(environ) > 0 {
		cmd.Env = append(os.Environ(), environ...)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: %s helper: %w", role, err)
	}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s helper: %w", role, err)
	}
	ready := make(chan struct{})
	go func() {
		var buf [64]byte
		var seen []byte
		for {
			n, err := stdout.Read(buf[:])
			seen = append(seen, buf[:n]...)
			if bytes.Contains(seen, []byte("ready")) {
				close(ready)
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var once sync.Once
	var waitErr error
	wait := func() error { // any number of times: stop after kill
		once.Do(func() { waitErr = cmd.Wait() })
		return waitErr
	}
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = wait()
		return nil, fmt.Errorf("bench: %s helper not ready after 60s: %s", role, out.String())
	}
	h := &helper{role: role, pid: strconv.Itoa(cmd.Process.Pid), output: out}
	h.stop = func() error {
		_ = cmd.Process.Signal(os.Interrupt)
		t := time.AfterFunc(10*time.Second, func() { _ = cmd.Process.Kill() })
		defer t.Stop()
		err := wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) && !ee.Exited() {
			return nil // ended by our signal
		}
		return err
	}
	h.kill = func() error {
		if err := cmd.Process.Kill(); err != nil {
			return err
		}
		_ = wait()
		return nil
	}
	return h, nil
}

type readyWriter struct{ ready chan struct{} }

func (w readyWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("ready")) {
		select {
		case <-w.ready:
		default:
			close(w.ready)
		}
	}
	return len(p), nil
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil // keep the first MiB
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
