package deploy

import (
	"bufio"
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/internal/faults"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/statekv"
)

// TestRootLevel runs a root level as the deploy files describe it: three
// servers from nats/cluster.conf as it is (no parent, no children), and
// the coordinator command line of the systemd unit, then the Kubernetes
// manifest's, against them. Each must answer, and create every bucket of
// the level with three replicas and the election TTL of a replicated
// level: the shipped files passed no --bucket-replicas, so every bucket
// had one replica, and cluster.conf could not run a root at all (it
// always declared a parent link).
func TestRootLevel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/allot")
	}
	servers := startLevel(t, "nats/cluster.conf", "root", nil, map[string]string{"NODE": "root"})
	bin := faults.BuildAllot(t)
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	url := strings.Join(urls, ",")
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if ai := accountInfo(ctx, t, js); ai.Domain != "root" {
		t.Fatalf("JetStream domain %q, want root (NODE)", ai.Domain)
	}

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"systemd", unitArgs(t, "systemd/allot-coordinator@.service", "root", map[string]string{"ALLOT_NATS_URL": servers[0].ClientURL()})},
		{"kubernetes", manifestArgs(t, "kubernetes/coordinator.yaml", url)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, b := range []string{configkv.DefaultBucket, election.DefaultBucket, statekv.DefaultBucket} {
				if err := js.DeleteKeyValue(ctx, b); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
					t.Fatal(err)
				}
			}
			faults.WaitPlacement(ctx, t, js)
			runCoordinator(ctx, t, bin, tc.args, nc)
			for _, b := range []string{configkv.DefaultBucket, election.DefaultBucket, statekv.DefaultBucket} {
				st := bucketStatus(ctx, t, js, b)
				if r := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas; r != 3 {
					t.Errorf("%s: bucket %s has %d replicas, want 3", tc.args, b, r)
				}
				if b == election.DefaultBucket && st.LimitMarkerTTL() != election.ReplicatedTTL {
					t.Errorf("%s: election TTL %v, want %v", tc.args, st.LimitMarkerTTL(), election.ReplicatedTTL)
				}
			}
		})
	}
}

// unitArgs returns the arguments the systemd unit's ExecStart gives the
// allot binary for instance node, with its Environment= lines overridden
// by env (as its EnvironmentFile would).
func unitArgs(t *testing.T, path, node string, env map[string]string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vars := map[string]string{}
	var exec string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Environment="); ok {
			k, val, _ := strings.Cut(v, "=")
			vars[k] = val
		}
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			exec = v
		}
	}
	for k, v := range env {
		vars[k] = v
	}
	if exec == "" {
		t.Fatalf("%s: no ExecStart", path)
	}
	exec = strings.ReplaceAll(exec, "%i", node)
	// systemd: ${VAR} is one word, $VAR is split into words and dropped
	// when empty.
	exec = regexp.MustCompile(`\$\{(\w+)\}`).ReplaceAllStringFunc(exec, func(m string) string { return vars[m[2:len(m)-1]] })
	exec = regexp.MustCompile(`\$(\w+)`).ReplaceAllStringFunc(exec, func(m string) string { return vars[m[1:]] })
	words := strings.Fields(exec)
	if len(words) < 2 || !strings.HasSuffix(words[0], "/allot") {
		t.Fatalf("%s: ExecStart %q does not run allot", path, exec)
	}
	return words[1:]
}

// manifestArgs returns the coordinator container's args of the manifest,
// with its NATS URL replaced by url and its ops port by a free one.
func manifestArgs(t *testing.T, path, url string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args []string `json:"args"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: want one container", path)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	for i := 1; i < len(args); i++ {
		switch args[i-1] {
		case "--nats":
			args[i] = url
		case "--metrics-addr":
			args[i] = "127.0.0.1:0"
		}
	}
	return args
}

// runCoordinator runs bin with args until the test ends, and waits until
// the node answers and both the coordinator and the domain service have
// written the state bucket.
func runCoordinator(ctx context.Context, t *testing.T, bin string, args []string, nc *nats.Conn) {
	t.Helper()
	out, done := faults.RunProcess(t, "coordinator", bin, syscall.SIGTERM, 20*time.Second, args...)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 60*time.Second, "the coordinator to answer and write its state", func() bool {
		select {
		case <-done:
			t.Fatalf("allot %s exited:\n%s", strings.Join(args, " "), faults.ReadOutput(out))
		default:
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := faults.Get(rctx, nc, "deploy-test", "db", 1); err != nil {
			return false
		}
		kv, err := js.KeyValue(rctx, statekv.DefaultBucket)
		if err != nil {
			return false
		}
		for _, key := range []string{"root.leases", "root.domain.seal"} {
			if _, err := kv.Get(rctx, key); err != nil {
				return false
			}
		}
		return true
	})
}

// bucketStatus returns the status of bucket.
func bucketStatus(ctx context.Context, t *testing.T, js jetstream.JetStream, bucket string) jetstream.KeyValueStatus {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	return st
}
