package secure_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/poll"
)

// level is child level region1, started from level.conf under a
// deployment's root, with a coordinator replica of its own.
type level struct {
	srv       *server.Server
	log       *serverLog
	coordErrs *asyncErrors
}

// startLevel starts level.conf joined to d's root over region1's link,
// after the root's admin created the link's mirror consumer, and runs a
// coordinator replica of node region1 (parent root) on its configuration
// mirror until it serves.
func (d *deployment) startLevel(t *testing.T) *level {
	t.Helper()
	d.createMirrorConsumer(t)
	l := d.startLevelServer(t)
	l.coordErrs = d.runCoordinator(t, l.srv, "region1_coordinator", coordinator.Options{Node: "region1", Parent: "root", ServerID: "region1-1"}).errs
	return l
}

// startLevelServer starts level.conf joined to d's root over region1's
// link and waits for the link.
func (d *deployment) startLevelServer(t *testing.T) *level {
	t.Helper()
	env := map[string]string{}
	for k, v := range d.set.Env {
		env[k] = v
	}
	env["SERVER_NAME"], env["CLIENT_PORT"], env["HTTP_LISTEN"] = "allot-region1", "-1", "127.0.0.1:-1"
	env["STORE_DIR"], env["TLS_VERIFY"] = t.TempDir(), "false"
	env["PARENT_LEAF_URLS"] = "[" + d.leafURL + "]"
	before := d.srv.NumLeafNodes()
	l := &level{}
	l.srv, l.log = startConfig(t, "level.conf", env)
	poll.For(t, wait, poll.Interval, func() error {
		if lv, r := l.srv.NumLeafNodes(), d.srv.NumLeafNodes(); lv < 1 || r < before+1 {
			return fmt.Errorf("region1's link: level %d, root %d", lv, r)
		}
		return nil
	})
	return l
}

// TestLevelWithoutMirrorConsumer: if the root's admin has not created
// the mirror consumer, the child's coordinator cannot create it (nor a
// mirror consumer of nats-server's own): opening the mirror fails, and
// the refusal names the consumer, so the operator sees what is missing.
func TestLevelWithoutMirrorConsumer(t *testing.T) {
	d := startDeployment(t)
	l := d.startLevelServer(t)
	nc, errs := d.dial(t, l.srv, "region1_coordinator")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := configkv.OpenMirror(ctx, js, "", "root"); err == nil {
		t.Fatal("the mirror opened without its consumer at the root")
	}
	errs.refused(t, "publish", "$JS.root.API.CONSUMER.CREATE.KV_allot_config.allot_mirror_region1")
}

// mirrorConsumerRequest is the operator's request, as the root's admin,
// that creates the durable consumer region1's configuration mirror
// sources through (docs/security.md gives it as a `nats req`): the link
// may find it but not create it.
const (
	mirrorConsumerSubject = "$JS.API.CONSUMER.CREATE.KV_allot_config.allot_mirror_region1"
	mirrorConsumerRequest = `{"stream_name":"KV_allot_config","config":{"durable_name":"allot_mirror_region1","deliver_subject":"allot.mirror.region1.allot_config","ack_policy":"flow_control","flow_control":true,"idle_heartbeat":1000000000,"max_ack_pending":1024}}`
)

// createMirrorConsumer sends mirrorConsumerRequest as the root's admin.
func (d *deployment) createMirrorConsumer(t *testing.T) {
	t.Helper()
	admin, _ := d.dial(t, d.srv, "admin")
	m, err := admin.Request(mirrorConsumerSubject, []byte(mirrorConsumerRequest), wait)
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
		Config jetstream.ConsumerConfig `json:"config"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil || resp.Error != nil {
		t.Fatalf("create the mirror consumer: %s (%v)", m.Data, err)
	}
	want := configkv.MirrorConsumer("", "region1")
	if got := resp.Config; got.DeliverSubject != want.DeliverSubject || got.AckPolicy != want.AckPolicy || got.MaxAckPending != want.MaxAckPending {
		t.Fatalf("the documented consumer is not the one allot creates: %+v, want %+v", got, want)
	}
}

// noViolations fails the test if a server logged a permission violation:
// the link's rights must cover everything a working level does.
func noViolations(t *testing.T, logs ...*serverLog) {
	t.Helper()
	for _, l := range logs {
		l.mu.Lock()
		for _, line := range l.lines {
			// A spoke ignores, at debug level, the parent's interest it
			// may not publish to; a refusal is an error or warning.
			if strings.Contains(line, "Violation") && !strings.HasPrefix(line, "[DBG] ") {
				t.Errorf("server refused: %s", line)
			}
		}
		l.mu.Unlock()
	}
}

// configBucket opens allot_config on nc (a mirror at a child level).
func configBucket(ctx context.Context, t *testing.T, nc *nats.Conn) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, configkv.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// TestLevelTenantLeaseFromRootCapacity: a child level with its own
// coordinators, linked with only its link user's rights: its
// configuration mirror fills from the root through the durable consumer,
// its coordinator asks the root for capacity, and a tenant at the child
// gets a lease that comes out of the root's capacity (100): the child
// holds 40 of it, so a tenant at the root wanting 80 gets 60 (fair share
// of 100 between the child and it). Nothing on the way is refused.
func TestLevelTenantLeaseFromRootCapacity(t *testing.T) {
	d := startDeployment(t)
	l := d.startLevel(t)

	ncChild, childErrs := d.dial(t, l.srv, "tenant_a")
	leaseOf(t, ncChild, agent.WithNode("region1"))
	ncRoot, rootErrs := d.dial(t, d.srv, "tenant_b")
	leaseOfWants(t, ncRoot, 80, 60)

	admin, _ := d.dial(t, l.srv, "region1_admin")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, kv := configBucket(ctx, t, admin)
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Mirror
	if m == nil || m.Consumer == nil || m.Consumer.Name != "allot_mirror_region1" || m.External == nil || m.External.APIPrefix != "$JS.root.API" {
		t.Fatalf("region1's allot_config is not a mirror of root's through the durable consumer: %+v", m)
	}
	for who, errs := range map[string]*asyncErrors{"tenant at the child": childErrs, "tenant at the root": rootErrs, "child coordinator": l.coordErrs, "root coordinator": d.coordErrs} {
		if e := errs.all(); len(e) > 0 {
			t.Errorf("%s was refused: %v", who, e)
		}
	}
	noViolations(t, d.log, l.log)
}

// TestLevelConfigReachesChild: a template the root's admin puts, after
// more than a mirror consumer's unacknowledged limit of other changes,
// reaches the child's mirror and its coordinator serves it; the child's admin
// cannot write the root's bucket through the mirror (the link carries no
// $KV), and the root's bucket does not change.
func TestLevelConfigReachesChild(t *testing.T) {
	d := startDeployment(t)
	l := d.startLevel(t)
	rootAdmin, _ := d.dial(t, d.srv, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	rjs, root := configBucket(ctx, t, rootAdmin)
	// More changes than the mirror consumer's 1,024 unacknowledged
	// deliveries (MaxAckPending): the mirror must acknowledge by flow
	// control across the link for the template after them to arrive.
	for i := range 1100 {
		if _, err := rjs.PublishAsync(fmt.Sprintf("$KV.%s.flow.%d", configkv.DefaultBucket, i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-rjs.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("puts not acknowledged")
	}
	const later = `{"identifier_glob": "db2", "capacity": 30, "algorithm": {"kind": "FAIR_SHARE", "lease_length": "30s", "refresh_interval": "1s"}}`
	rev, err := root.Put(ctx, config.Key("db2"), []byte(later))
	if err != nil {
		t.Fatal(err)
	}

	admin, _ := d.dial(t, l.srv, "region1_admin")
	_, mirror := configBucket(ctx, t, admin)
	poll.For(t, wait, 20*time.Millisecond, func() error {
		e, err := mirror.Get(ctx, config.Key("db2"))
		switch {
		case err != nil:
			return fmt.Errorf("the root's template never reached the child's mirror: %w", err)
		case e.Revision() != rev || string(e.Value()) != later:
			return fmt.Errorf("the child's mirror has revision %d (%s), not the root's template (revision %d)", e.Revision(), e.Value(), rev)
		}
		return nil
	})
	// The child's coordinator serves it: 30 for db2 at the child.
	nc, _ := d.dial(t, l.srv, "tenant_a")
	a, err := agent.New(nc, agent.WithNode("region1"), agent.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	lim, err := a.Rate("db2", agent.WithWants(50))
	if err != nil {
		t.Fatal(err)
	}
	poll.For(t, wait, 20*time.Millisecond, func() error {
		if st := lim.Status(); !st.Leased || st.Capacity != 30 {
			return fmt.Errorf("no lease of 30 of db2 at the child: %+v (%v)", st, a.LastError())
		}
		return nil
	})

	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer pcancel()
	if _, err := mirror.Put(pctx, config.Key("db2"), []byte(template)); err == nil {
		t.Fatal("the child's admin wrote the root's configuration through the mirror")
	}
	if e, err := root.Get(ctx, config.Key("db2")); err != nil || e.Revision() != rev {
		t.Fatalf("the root's template changed: %v %v", e, err)
	}
	noViolations(t, d.log, l.log)
}

// TestLevelLinkRefusedAtRoot: a hostile child speaking the leaf protocol
// with region1's link seed is refused at the root (the root logs the
// violation and drops the link) when it writes the root's
// configuration, election or state bucket (directly or through the
// domain's API prefix), calls any other JetStream API, asks the root's
// coordinators anything but server.get for region1, publishes as a tenant or into
// an inbox, or subscribes to a subject it may not receive; a wildcard
// subscription is accepted but receives nothing it may not (tenants'
// replies, the coordinator's inbox and subjects).
func TestLevelLinkRefusedAtRoot(t *testing.T) {
	d := startDeployment(t)
	// The root reports a refused publish under the subject the ALLOT
	// account's mappings make of it (the check is on the subject sent).
	shown := strings.NewReplacer("$JS.root.API.$KV.", "$KV.", "$JS.root.API.", "$JS.API.")
	for _, subject := range []string{
		"$KV.allot_config.templates.a", "$JS.root.API.$KV.allot_config.templates.a",
		"$KV.allot_election.root", "$JS.root.API.$KV.allot_election.root",
		"$KV.allot_state.root.leases", "$JS.root.API.$KV.allot_state.root.leases",
		"$JS.root.API.STREAM.PURGE.KV_allot_config", "$JS.root.API.STREAM.DELETE.KV_allot_config",
		"$JS.root.API.STREAM.INFO.KV_allot_state", "$JS.root.API.DIRECT.GET.KV_allot_state.$KV.allot_state.root",
		"$JS.root.API.CONSUMER.CREATE.KV_allot_state.x", "$JS.root.API.CONSUMER.CREATE.KV_allot_config.allot_mirror_region1",
		"$JS.root.API.CONSUMER.CREATE.KV_allot_config.allot_mirror_region2", "$JS.root.API.CONSUMER.INFO.KV_allot_config.allot_mirror_region2",
		"$JS.root.API.CONSUMER.DELETE.KV_allot_config.allot_mirror_region1", "$JS.root.API.INFO", "$JS.API.INFO",
		"allot.root.capacity.get", "allot.t.TENANT_A.root.capacity.get", "allot.t.TENANT_A.root.quota.take.a.b",
		"allot.root.replica.status", "_INBOX_allot_coordinator.x", "_INBOX_tenant_a.x", "$SRV.PING",
		// Asking as another child, or on the subject without a child.
		"allot.root.server.get", "allot.root.server.get.region2",
	} {
		t.Run("publish "+subject, func(t *testing.T) {
			leaf := dialLeaf(t, d, "region1_leaf")
			leaf.send(t, fmt.Sprintf("LMSG %s 2\r\n{}\r\nPING\r\n", subject))
			want := shown.Replace(subject)
			if line := leaf.readUntil(t, "-ERR", "PONG"); !strings.Contains(line, "Permissions Violation for Publish to \""+want+"\"") {
				t.Fatalf("the root answered %q", line)
			}
			d.log.waitFor(t, "Publish Violation on \""+want+"\"")
		})
	}
	for _, subject := range []string{
		"_INBOX_allot_coordinator.x", "_INBOX.x", "_INBOX_tenant_a.x", "allot.root.capacity.get", "allot.t.TENANT_A.root.capacity.get",
		"allot.mirror.region2.allot_config", "$KV.allot_config.templates.a", "$SRV.PING",
	} {
		t.Run("subscribe "+subject, func(t *testing.T) {
			leaf := dialLeaf(t, d, "region1_leaf")
			leaf.send(t, fmt.Sprintf("LS+ %s\r\nPING\r\n", subject))
			if line := leaf.readUntil(t, "-ERR", "PONG"); !strings.Contains(line, "Permissions Violation for Subscription to \""+subject+"\"") {
				t.Fatalf("the root answered %q", line)
			}
			d.log.waitFor(t, "Subscription Violation on \""+subject+"\"")
		})
	}
	t.Run("wildcards receive nothing", func(t *testing.T) {
		leaf := dialLeaf(t, d, "region1_leaf")
		leaf.send(t, "LS+ >\r\nLS+ _R_.>\r\nLS+ _INBOX_allot_coordinator.>\r\nLS+ allot.>\r\nLS+ allot.mirror.region1.allot_config\r\nPING\r\n")
		leaf.readUntil(t, "PONG")
		// A tenant's request and the coordinator's reply (on _R_ in
		// ALLOT), a message to the coordinator's inbox and to its
		// subject, and last the one subject the link may receive.
		tenant, _ := d.dial(t, d.srv, "tenant_a")
		leaseOf(t, tenant)
		admin, _ := d.dial(t, d.srv, "admin")
		for _, subject := range []string{"_INBOX_allot_coordinator.x", "allot.root.replica.status", "allot.t.TENANT_A.root.capacity.x", "allot.mirror.region1.allot_config"} {
			if err := admin.Publish(subject, []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
		if err := admin.Flush(); err != nil {
			t.Fatal(err)
		}
		line := leaf.readUntil(t, "LMSG")
		if !strings.HasPrefix(line, "LMSG allot.mirror.region1.allot_config ") {
			t.Fatalf("the link received %q", line)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	admin, _ := d.dial(t, d.srv, "admin")
	_, kv := configBucket(ctx, t, admin)
	if _, err := kv.Get(ctx, config.Key("a")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("templates.a at the root: %v", err)
	}
}

// TestLevelTenantCannotReachRoot: a tenant at the child reaches its own
// level's coordinators only: its requests for node root (capacity,
// quota) enter the child's ALLOT account as allot.t.TENANT_A.root.*,
// which the link does not carry (the root told the child its rights), so
// there is no responder; the root's coordinator never hears them.
func TestLevelTenantCannotReachRoot(t *testing.T) {
	d := startDeployment(t)
	l := d.startLevel(t)
	nc, errs := d.dial(t, l.srv, "tenant_a")
	for _, subject := range []string{"allot.root.capacity.get", "allot.root.capacity.release", "allot.root.quota.take.a.b", "allot.root.domain.reserve.a.b"} {
		if _, err := nc.Request(subject, []byte("{}"), 2*time.Second); !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("%s from a tenant at the child: %v, want no responders", subject, err)
		}
	}
	if e := errs.all(); len(e) > 0 {
		t.Errorf("refused at the child instead: %v", e)
	}
	noViolations(t, d.log, l.log)
}
