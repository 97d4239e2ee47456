package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spf13/pflag"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/opstatus"
	"github.com/allot/allot/internal/poll"
)

var leafURLRE = regexp.MustCompile(`accepting child levels at (nats-leaf://\S+)`)

// leafURL is the leaf-node URL an `allot up` printed.
func (u *upRun) leafURL(t *testing.T) string {
	t.Helper()
	return u.printed(t, leafURLRE, "a leaf-node URL")[1]
}

// waitApplied waits until the replicas of node, asked through url, serve
// revision rev of template name.
func waitApplied(t *testing.T, url, node, name string, rev string) {
	t.Helper()
	// A minute: status crosses leaf links to replicas that, at load 18,
	// took longer than 15s to apply a revision.
	poll.For(t, time.Minute, 100*time.Millisecond, func() error {
		code, out := runCtx(context.Background(), "config", "status", "--nats", url, "--json", "--wait", "300ms")
		var rs []opstatus.Replica
		if code == 0 && json.Unmarshal([]byte(out), &rs) == nil {
			for _, r := range rs {
				if r.Node != node || r.Config == nil {
					continue
				}
				for _, k := range r.Config.Keys {
					if k.Name == name && k.State == "ok" && rev == strconv.FormatUint(k.Revision, 10) {
						return nil
					}
				}
			}
		}
		return fmt.Errorf("node %s does not serve %s revision %s; last status (code %d): %s", node, name, rev, code, out)
	})
}

var storedRE = regexp.MustCompile(`stored templates\.\S+ revision (\d+)`)

// TestUpTree runs a three-level tree of `allot up` (root, region,
// cluster, joined by leaf nodes) and edits a template at the cluster:
// `allot config put` writes it to the root's bucket, and the coordinators
// of all three levels apply it through the mirrors.
func TestUpTree(t *testing.T) {
	root := startUp(t, "--data-dir", t.TempDir(), "--leafnode-port", "-1")
	root.printed(t, regexp.MustCompile("JetStream domain: root"), "its domain")
	region := startUp(t, "--data-dir", t.TempDir(), "--leafnode-port", "-1", "--node", "eu", "--parent-node", "root", "--parent-url", root.leafURL(t))
	cluster := startUp(t, "--data-dir", t.TempDir(), "--node", "eu-1", "--parent-node", "eu", "--parent-url", region.leafURL(t))
	for _, want := range []string{"JetStream domain: eu-1", `parent: node "eu" at ` + region.leafURL(t), "allot_config mirrors allot_config of domain eu"} {
		cluster.printed(t, regexp.MustCompile(regexp.QuoteMeta(want)), want)
	}

	file := filepath.Join(t.TempDir(), "t.json")
	if err := os.WriteFile(file, []byte(`{"identifier_glob":"tree/*","capacity":321,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"5s"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// The put follows the mirrors up to the root: the region's must be up.
	region.printed(t, regexp.MustCompile(regexp.QuoteMeta("allot_config mirrors allot_config of domain root")), "the region's mirror")
	// Three servers and coordinators in this one process (under -race,
	// beside other tests) answer the put's JetStream API calls over two
	// leaf hops slowly: more than the default 5 s has been seen.
	// The cluster's leaf link to the region may still be coming up (no
	// responders for the origin's API): asked again until it answers.
	var code int
	var out string
	poll.Ok(time.Minute, func() bool {
		code, out = runCtx(context.Background(), "config", "put", "tree", file, "--nats", cluster.url, "--timeout", "30s")
		return code == 0 || !strings.Contains(out, "cannot be reached")
	})
	m := storedRE.FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "root's bucket (JetStream domain root)") {
		t.Fatalf("config put at the cluster: code %d: %s", code, out)
	}
	if code, out := runCtx(context.Background(), "config", "get", "tree", "--nats", root.url); code != 0 || !strings.Contains(out, "321") {
		t.Fatalf("config get at the root: code %d: %s", code, out)
	}
	waitApplied(t, root.url, "root", "tree", m[1])
	waitApplied(t, region.url, "eu", "tree", m[1])
	waitApplied(t, cluster.url, "eu-1", "tree", m[1])
	// Status asked at the cluster reaches the root's replicas too.
	waitApplied(t, cluster.url, "root", "tree", m[1])
	// Each level writes its own verdict, in its own state bucket.
	for node, url := range map[string]string{"root": root.url, "eu": region.url, "eu-1": cluster.url} {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 15*time.Second, node+"'s verdict on templates.tree", func() bool {
			kv, err := js.KeyValue(testCtx(t), "allot_state")
			if err != nil {
				return false
			}
			e, err := kv.Get(testCtx(t), configkv.StatusKey(node, "templates.tree"))
			return err == nil && strings.Contains(string(e.Value()), `"revision":`+m[1]+`,"ok":true`)
		})
		nc.Close()
	}
	// Reads at a child are of its local mirror.
	if code, out := runCtx(context.Background(), "config", "get", "tree", "--nats", cluster.url); code != 0 || !strings.Contains(out, "321") {
		t.Fatalf("config get at the cluster: code %d: %s", code, out)
	}
}

// TestCoordinatorParent: `allot coordinator --parent-node` against a
// server that is a leaf node of an `allot up` root mirrors the root's
// configuration and applies it.
func TestCoordinatorParent(t *testing.T) {
	root := startUp(t, "--data-dir", t.TempDir(), "--leafnode-port", "-1")
	child := startUp(t, "--data-dir", t.TempDir(), "--node", "eu", "--parent-node", "root", "--parent-url", root.leafURL(t))
	// A second process serving another node under the same parent, on the
	// child's server: its bucket is the same mirror.
	startCoordinator(t, []string{"--nats", child.url, "--node", "eu", "--parent-node", "root"}, []string{"--nats", child.url, "--node", "eu"})
	code, out := runCtx(context.Background(), "config", "history", "mysql-main", "--nats", root.url)
	if code != 0 {
		t.Fatalf("history at the root: %s", out)
	}
	rev := regexp.MustCompile(`revision (\d+)`).FindStringSubmatch(out)
	if rev == nil {
		t.Fatalf("history: %s", out)
	}
	waitApplied(t, child.url, "eu", "mysql-main", rev[1])
}

// TestTreeFlagsInvalid: bad tree flags fail with an error that names the
// flag, before anything starts.
func TestTreeFlagsInvalid(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"up", "--data-dir", dir, "--node", "eu", "--parent-node", "root"}, "--parent-node root needs --parent-url"},
		{[]string{"up", "--data-dir", dir, "--parent-url", "nats-leaf://127.0.0.1:7422"}, "--parent-url needs --parent-node"},
		{[]string{"up", "--data-dir", dir, "--node", "eu", "--parent-node", "eu", "--parent-url", "nats-leaf://h:1"}, "is the node itself"},
		{[]string{"up", "--data-dir", dir, "--node", "e.u"}, `--node "e.u"`},
		{[]string{"up", "--data-dir", dir, "--node", "t"}, `node name "t" is reserved`},
		{[]string{"up", "--data-dir", dir, "--node", "eu", "--parent-node", "a b", "--parent-url", "nats-leaf://h:1"}, `--parent-node "a b"`},
		{[]string{"up", "--data-dir", dir, "--node", "eu", "--parent-node", "root", "--parent-url", "http://h:1"}, "--parent-url: "},
		{[]string{"up", "--data-dir", dir, "--node", "eu", "--parent-node", "root", "--parent-url", "nats-leaf://h"}, "host and port"},
		{[]string{"up", "--data-dir", dir, "--leafnode-port", "-2"}, "--leafnode-port -2"},
		{[]string{"up", "--data-dir", dir, "--port", "5000", "--leafnode-port", "5000"}, "is also --port"},
		{[]string{"coordinator", "--node", "eu", "--parent-node", "eu"}, "is the node itself"},
		{[]string{"coordinator", "--parent-node", "x/y"}, `--parent-node "x/y"`},
	} {
		code, out := runCtx(context.Background(), tc.args...)
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%q: code %d, %s; want an error with %q", tc.args, code, out, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("invalid flags left files in the data dir: %v", entries)
	}
}

// TestCoordFlagsParent: --parent-node reaches coordinator.Options.Parent,
// for `up` and `coordinator` alike (they share the flags).
func TestCoordFlagsParent(t *testing.T) {
	fs := pflag.NewFlagSet("coordinator", pflag.ContinueOnError)
	var cf coordFlags
	cf.register(fs)
	if err := fs.Parse([]string{"--node", "eu-1", "--parent-node", "eu"}); err != nil {
		t.Fatal(err)
	}
	if err := cf.validate(); err != nil {
		t.Fatal(err)
	}
	if o := cf.options(nil); o.Node != "eu-1" || o.Parent != "eu" {
		t.Fatalf("options: node %q parent %q", o.Node, o.Parent)
	}
}
