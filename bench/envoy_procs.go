package bench

// The processes of the Envoy benchmark: allot's commands, and
// envoyproxy/ratelimit with its Redis, built and run outside the
// repository.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/subjects"
)

// ReferenceModule is envoyproxy/ratelimit at the version internal/envoyrl
// was proven against; the benchmark builds its server from the module
// proxy (go install ...@version), outside the repository.
const ReferenceModule = "github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36"

// AllotFunc builds the command that runs the allot binary with args (the
// benchmark's own executable).
type AllotFunc func(ctx context.Context, args ...string) *exec.Cmd

// proc is a child process of the benchmark and its output.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// startProc starts cmd.
func startProc(name string, cmd *exec.Cmd) (*proc, error) {
	p := &proc{name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// pid is the process id as /proc names it.
func (p *proc) pid() string { return strconv.Itoa(p.cmd.Process.Pid) }

// await waits until re matches the output and returns the match.
func (p *proc) await(ctx context.Context, re *regexp.Regexp, limit time.Duration) ([]string, error) {
	deadline := time.Now().Add(limit)
	for {
		if m := re.FindStringSubmatch(p.out.String()); m != nil {
			return m, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("bench: %s exited: %s", p.name, tail(p.out.String()))
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench: %s did not start within %v: %s", p.name, limit, tail(p.out.String()))
		}
	}
}

// stop interrupts the process and waits for it, killing it after a while.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the end of a process's output, for errors.
func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

// reference is envoyproxy/ratelimit on its own Redis.
type reference struct {
	redis, service *proc
	addr           string
}

// buildReference builds the reference server into the user's cache
// directory (once) and returns its path, or why it cannot.
func buildReference(ctx context.Context) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command to build the reference: %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "allot", "bench", "envoyproxy-ratelimit")
	bin := filepath.Join(dir, "service_cmd")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "install", ReferenceModule)
	// Outside the repository: the reference's own module, from the proxy.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %v: %s", ReferenceModule, err, tail(string(out)))
	}
	return bin, nil
}

// startReference runs Redis and the reference with config (its YAML) on
// free ports.
func startReference(ctx context.Context, config []byte) (*reference, error) {
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("no redis-server on PATH (apt-get install -y redis-server)")
	}
	bin, err := buildReference(ctx)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "allot-bench-ratelimit-")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), config, 0o644); err != nil {
		return nil, err
	}
	var ports [4]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	r := &reference{addr: "127.0.0.1:" + strconv.Itoa(ports[1])}
	r.redis, err = startProc("redis", exec.Command(redisBin, "--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"))
	if err != nil {
		return nil, err
	}
	if _, err := r.redis.await(ctx, regexp.MustCompile(`Ready to accept connections`), 30*time.Second); err != nil {
		r.redis.stop()
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false", "LOG_LEVEL=warn", "BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:"+strconv.Itoa(ports[0]),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[2]), "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[3]))
	if r.service, err = startProc("envoyproxy/ratelimit", cmd); err != nil {
		r.redis.stop()
		return nil, err
	}
	return r, nil
}

func (r *reference) stop() {
	r.service.stop()
	r.redis.stop()
}

// upAnnounced is how allot up says it serves, and at which NATS URL.
var upAnnounced = regexp.MustCompile(`allot is up: NATS at (nats://\S+),`)

// runAllotUp runs allot up with its embedded NATS server on a free port
// and its store in a new temporary directory (whose name begins with
// prefix), args added, and waits until its output matches ready. It
// returns the process, the directory (the caller removes it once the
// process ended) and ready's match.
func runAllotUp(ctx context.Context, env *Env, prefix string, args []string, ready *regexp.Regexp) (*proc, string, []string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, "", nil, fmt.Errorf("bench: allot up data dir: %w", err)
	}
	p, err := startProc("allot up", env.Allot(ctx, append([]string{"up", "--port", "0", "--data-dir", dir}, args...)...))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", nil, err
	}
	m, err := p.await(ctx, ready, 60*time.Second)
	if err != nil {
		p.stop()
		_ = os.RemoveAll(dir)
		return nil, "", nil, err
	}
	return p, dir, m, nil
}

// storeConfig puts entries (key → document) in the configuration bucket
// of the NATS server at url, as `allot config put` does.
func storeConfig(ctx context.Context, url string, entries map[string]string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("bench: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("bench: jetstream: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, subjects.ConfigBucket)
	if err != nil {
		return fmt.Errorf("bench: configuration bucket: %w", err)
	}
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		if _, err := kv.Put(ctx, k, []byte(entries[k])); err != nil {
			return fmt.Errorf("bench: store %s: %w", k, err)
		}
	}
	return nil
}
