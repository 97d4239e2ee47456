package secure_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/proto/allotpb"
)

// refusedSub subscribes to subject and waits for the server's refusal.
func refusedSub(t *testing.T, nc *nats.Conn, errs *asyncErrors, subject string) {
	t.Helper()
	if _, err := nc.SubscribeSync(subject); err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	errs.refused(t, "subscription", subject)
}

// refusedPub publishes m and waits for the server's refusal.
func refusedPub(t *testing.T, nc *nats.Conn, errs *asyncErrors, m *nats.Msg) {
	t.Helper()
	if err := nc.PublishMsg(m); err != nil {
		t.Fatalf("publish %s: %v", m.Subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	errs.refused(t, "publish", m.Subject)
}

// forgedReply is the reply of the black-box probe: capacity 1e9 until
// 2999 at term 2^64-1 (an agent that took it would refuse every genuine
// reply after).
func forgedReply(t *testing.T) []byte {
	t.Helper()
	data, err := proto.Marshal(&allotpb.GetCapacityResponse{Term: math.MaxUint64, Response: []*allotpb.ResourceResponse{{
		ResourceId: resource, SafeCapacity: 1e9,
		Gets: &allotpb.Lease{Capacity: 1e9, ExpiryTime: timestamppb.New(time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC))},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// leaseOf starts an agent on nc wanting 40 of the resource and waits
// for the coordinator's lease of 40.
func leaseOf(t *testing.T, nc *nats.Conn, opts ...agent.Option) (*agent.Agent, *agent.RateLimiter) {
	t.Helper()
	return leaseOfWants(t, nc, 40, 40, opts...)
}

// leaseOfWants starts an agent on nc (with opts) wanting wants of the
// resource and waits for a lease of capacity.
func leaseOfWants(t *testing.T, nc *nats.Conn, wants, capacity float64, opts ...agent.Option) (*agent.Agent, *agent.RateLimiter) {
	t.Helper()
	a, err := agent.New(nc, append([]agent.Option{agent.WithRequestTimeout(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	lim, err := a.Rate(resource, agent.WithWants(wants))
	if err != nil {
		t.Fatal(err)
	}
	poll.For(t, wait, 20*time.Millisecond, func() error {
		if st := lim.Status(); !st.Leased || st.Capacity != capacity || st.Source != agent.SourceLease {
			return fmt.Errorf("no lease of %v: %+v (last error %v)", capacity, st, a.LastError())
		}
		return nil
	})
	return a, lim
}

// TestUnauthenticatedRefused: without a known nkey nobody connects.
func TestUnauthenticatedRefused(t *testing.T) {
	d := startRoot(t, false)
	url := clientURL(t, d.srv)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	unknown := t.TempDir() + "/unknown.nk"
	writeFile(t, unknown, seed)
	stranger, err := nats.NkeyOptionFromSeed(unknown)
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]nats.Option{
		"no credentials":    nil,
		"unknown nkey":      {stranger},
		"user and password": {nats.UserInfo("admin", "admin")},
	} {
		t.Run(name, func(t *testing.T) {
			nc, err := nats.Connect(url, append(opts, nats.RootCAs(d.set.Certs.CA), nats.Timeout(wait))...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("refused, but not by authorization: %v", err)
			}
		})
	}
}

// TestPlainClientRefused: the client port speaks TLS only, and with
// TLS_VERIFY=true only to clients with a certificate of the CA.
func TestPlainClientRefused(t *testing.T) {
	t.Run("no TLS", func(t *testing.T) {
		// nats.go upgrades to TLS whenever the server asks, so the plain
		// client is spoken by hand: the protocol's CONNECT and PING in
		// clear text after the server's INFO.
		d := startRoot(t, false)
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(clientURL(t, d.srv), "tls://"), wait)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(wait))
		r := bufio.NewReader(conn)
		info, err := r.ReadString('\n')
		if err != nil || !strings.Contains(info, `"tls_required":true`) {
			t.Fatalf("INFO %q, %v: the server does not require TLS", info, err)
		}
		if _, err := conn.Write([]byte("CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":false}\r\nPING\r\n")); err != nil {
			t.Fatal(err)
		}
		if line, err := r.ReadString('\n'); err == nil {
			t.Fatalf("the server answered a plain-text client: %q", line)
		}
		d.log.waitFor(t, "TLS handshake error", "first record does not look like a TLS handshake")
	})
	t.Run("mutual TLS without a client certificate", func(t *testing.T) {
		d := startRoot(t, true)
		nkey, err := nats.NkeyOptionFromSeed(d.set.Seed("admin"))
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(clientURL(t, d.srv), nkey, nats.RootCAs(d.set.Certs.CA), nats.Timeout(wait))
		if err == nil {
			nc.Close()
			t.Fatal("connected without a client certificate")
		}
		if !strings.Contains(err.Error(), "tls") {
			t.Fatalf("refused, but not by TLS: %v", err)
		}
		// The same user with the CA's client certificate connects.
		nc, err = nats.Connect(clientURL(t, d.srv), nkey, nats.RootCAs(d.set.Certs.CA),
			nats.ClientCert(d.set.Certs.ClientCert, d.set.Certs.ClientKey), nats.Timeout(wait))
		if err != nil {
			t.Fatalf("with a client certificate: %v", err)
		}
		nc.Close()
	})
}

// TestTenantCannotImpersonateCoordinator: a tenant cannot subscribe to
// the coordinators' subjects, so it never sees a request to answer, and
// a forged reply it sends to another client's inbox is refused; the
// victim keeps its genuine lease and term.
func TestTenantCannotImpersonateCoordinator(t *testing.T) {
	d := startDeployment(t)
	d.attack(t, d.srv,
		[]string{"allot.root.capacity.get", "allot.*.capacity.get", "allot.t.*.root.capacity.get", "allot.t.TENANT_A.root.capacity.get", "allot.>", ">"},
		[]string{"_INBOX.forged", "_INBOX_tenant_b.forged", "_R_.forged", "_INBOX_allot_coordinator.forged"})
}

// attack has tenant_a, connected to srv, subscribe to each of subs and
// publish the forged reply on each of pubs, sees each refused, and checks
// that tenant_b's agent, connected to srv too, kept its lease and term.
func (d *deployment) attack(t *testing.T, srv *server.Server, subs, pubs []string) {
	t.Helper()
	victim, _ := d.dial(t, srv, "tenant_b")
	a, lim := leaseOf(t, victim)
	term := a.Term()
	nc, errs := d.dial(t, srv, "tenant_a")
	for _, s := range subs {
		refusedSub(t, nc, errs, s)
	}
	for _, s := range pubs {
		refusedPub(t, nc, errs, &nats.Msg{Subject: s, Data: forgedReply(t)})
	}
	refreshed(t, lim, 2)
	if st := lim.Status(); st.Capacity != 40 || a.Term() != term {
		t.Fatalf("victim changed: capacity %v term %d (was 40, %d)", st.Capacity, a.Term(), term)
	}
}

// refreshed waits until lim has refreshed its lease n more times.
func refreshed(t *testing.T, lim *agent.RateLimiter, n int) {
	t.Helper()
	last := lim.Status().LastRefresh
	for i := range n {
		poll.Until(t, 3*wait, fmt.Sprint("refresh ", i+1, " of ", n), func() bool {
			at := lim.Status().LastRefresh
			if at.After(last) {
				last = at
				return true
			}
			return false
		})
	}
}

// TestTenantCannotReadOtherReplies: no inbox but its own, no service
// reply subject, no wildcard.
func TestTenantCannotReadOtherReplies(t *testing.T) {
	d := startDeployment(t)
	nc, errs := d.dial(t, d.srv, "tenant_a")
	for _, s := range []string{"_INBOX.>", "_INBOX_tenant_b.>", "_INBOX_allot_coordinator.>", "_R_.>", "*.>", ">"} {
		refusedSub(t, nc, errs, s)
	}
}

// TestTenantCannotTouchBuckets: the black-box probes on the KV buckets
// (a leader key put without TTL, a forged lease record, a forged
// template; deletes and purges) are refused, and the buckets are as they
// were.
func TestTenantCannotTouchBuckets(t *testing.T) {
	d := startDeployment(t)
	admin, _ := d.dial(t, d.srv, "admin")
	record, err := protojson.Marshal(&allotpb.LeaseHorizon{Node: "root", Term: math.MaxUint64, ServerId: "forged",
		Horizon: timestamppb.New(time.Now().Add(-time.Hour)), Complete: true})
	if err != nil {
		t.Fatal(err)
	}
	forgedTemplate := []byte(`{"identifier_glob": "db", "capacity": 100000, "algorithm": {"kind": "NO_ALGORITHM"}}`)
	probes := []struct {
		bucket, key string
		value       []byte
	}{
		{"allot_election", "root", []byte(`{"id":"forged"}`)}, // no TTL: nobody could win again
		{"allot_state", "root.leases", record},                // term 2^64-1, past horizon, complete
		{"allot_config", "templates.a", forgedTemplate},       // wins on name order
	}
	for _, p := range probes {
		t.Run(p.bucket, func(t *testing.T) {
			nc, errs := d.dial(t, d.srv, "tenant_a")
			subject := "$KV." + p.bucket + "." + p.key
			refusedPub(t, nc, errs, &nats.Msg{Subject: subject, Data: p.value})
			del := nats.NewMsg(subject)
			del.Header.Set("KV-Operation", "DEL")
			refusedPub(t, nc, errs, del)
			purge := nats.NewMsg(subject)
			purge.Header.Set("KV-Operation", "PURGE")
			purge.Header.Set("Nats-Rollup", "sub")
			refusedPub(t, nc, errs, purge)
			// The KV client's own path starts with the stream's info.
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, err := js.KeyValue(ctx, p.bucket); err == nil {
				t.Fatal("tenant opened the bucket")
			}
			errs.refused(t, "publish", "$JS.API.STREAM.INFO.KV_"+p.bucket)
		})
	}
	// What the buckets hold now: nothing forged.
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, p := range probes {
		kv, err := js.KeyValue(ctx, p.bucket)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, p.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			t.Fatal(err)
		case bytes.Contains(e.Value(), []byte("forged")) || bytes.Equal(e.Value(), p.value):
			t.Fatalf("%s/%s holds the forged value %s", p.bucket, p.key, e.Value())
		}
	}
}

// TestTenantCannotCallJetStreamOrSystem: no $JS.API, $KV or $SYS subject
// at all.
func TestTenantCannotCallJetStreamOrSystem(t *testing.T) {
	d := startDeployment(t)
	nc, errs := d.dial(t, d.srv, "tenant_a")
	for _, s := range []string{"$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.DELETE.KV_allot_config",
		"$JS.API.DIRECT.GET.KV_allot_state.$KV.allot_state.root.leases", "$JS.API.CONSUMER.CREATE.KV_allot_config.x.$KV.allot_config.>",
		"$SYS.REQ.SERVER.PING", "$SRV.PING"} {
		refusedPub(t, nc, errs, &nats.Msg{Subject: s, Reply: "_INBOX_tenant_a.x", Data: []byte("{}")})
	}
	refusedSub(t, nc, errs, "$JS.>")
	refusedSub(t, nc, errs, "$KV.>")
	refusedSub(t, nc, errs, "$SYS.>")
}

// TestTenantCannotUseAnotherTenantsSubject: the tenant subjects of the
// ALLOT account are out of reach: publishing one is refused (and through
// the import it would only become allot.t.TENANT_A.t.TENANT_B...).
func TestTenantCannotUseAnotherTenantsSubject(t *testing.T) {
	d := startDeployment(t)
	nc, errs := d.dial(t, d.srv, "tenant_a")
	for _, s := range []string{"allot.t.TENANT_B.root.capacity.get", "allot.t.TENANT_B.root.capacity.release", "allot.root.server.get",
		"allot.t.TENANT_B.root.quota.take", "allot.t.TENANT_B.root.domain.reserve.app.pool"} {
		refusedPub(t, nc, errs, &nats.Msg{Subject: s, Reply: "_INBOX_tenant_a.x", Data: []byte("{}")})
	}
}

// TestCoordinatorCannotWriteConfiguration: the coordinator user reads
// allot_config but cannot put, delete, purge or remove it; admin can.
func TestCoordinatorCannotWriteConfiguration(t *testing.T) {
	d := startDeployment(t)
	nc, errs := d.dial(t, d.srv, "coordinator")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	kv, err := configkv.OpenBucket(ctx, js, "", false)
	if err != nil {
		t.Fatalf("the coordinator cannot even read the configuration: %v", err)
	}
	if _, err := kv.Get(ctx, config.Key(resource)); err != nil {
		t.Fatalf("read a template: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if _, err := kv.Put(short, config.Key("a"), []byte(`{"identifier_glob": "db", "capacity": 100000}`)); err == nil {
		t.Fatal("coordinator put a template")
	}
	errs.refused(t, "publish", "$KV.allot_config.templates.a")
	for _, s := range []string{"$JS.API.STREAM.DELETE.KV_allot_config", "$JS.API.STREAM.PURGE.KV_allot_config", "$JS.API.STREAM.UPDATE.KV_allot_config",
		"$JS.API.STREAM.MSG.DELETE.KV_allot_config", "$KV.allot_config.templates.db"} {
		refusedPub(t, nc, errs, &nats.Msg{Subject: s, Reply: "_INBOX_allot_coordinator.x", Data: []byte("{}")})
	}
	// Nor can it read the operator's replies, or send requests as a
	// client of another node.
	refusedSub(t, nc, errs, "_INBOX.>")
	refusedPub(t, nc, errs, &nats.Msg{Subject: "allot.other.capacity.get", Data: []byte("{}")})
	// The operator can.
	admin, _ := d.dial(t, d.srv, "admin")
	if err := putTemplate(t, admin, "b", false); err != nil {
		t.Fatalf("admin cannot write the configuration: %v", err)
	}
}

// TestCoordinatorServesWithItsRights: with only the coordinator user's
// rights a replica campaigns, renews its leadership, records leases,
// follows a template change, answers discovery from each of its
// services, and resigns, and nothing it does is refused.
func TestCoordinatorServesWithItsRights(t *testing.T) {
	d := startDeployment(t)
	nc, _ := d.dial(t, d.srv, "tenant_a")
	_, lim := leaseOf(t, nc)
	admin, _ := d.dial(t, d.srv, "admin")
	if err := putTemplate(t, admin, resource, false); err != nil {
		t.Fatal(err)
	}
	// Discovery, as allot status and nats micro ls ask: every micro
	// service of the coordinator's connection answers the one request.
	sub, err := admin.SubscribeSync(admin.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.PublishRequest("$SRV.PING", sub.Subject, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // allot-replica and allot-coordinator
		if _, err := sub.NextMsg(wait); err != nil {
			t.Fatalf("discovery answer %d: %v", i+1, err)
		}
	}
	refreshed(t, lim, 2) // meanwhile: leadership renewals and lease records
	if !lim.Status().Leased {
		t.Fatalf("lease lost: %+v", lim.Status())
	}
	d.stopCoord()
	if e := d.coordErrs.all(); len(e) > 0 {
		t.Fatalf("the coordinator user was refused: %v", e)
	}
}

// TestCoordinatorTakesOverWithItsRights: a successor replica takes over
// from the lease record its predecessor left, reading the record's
// history to compare it with the one before (a KV history is a
// consumer on the state bucket), with only the coordinator user's
// rights; any refusal fails the test.
func TestCoordinatorTakesOverWithItsRights(t *testing.T) {
	d := startDeployment(t)
	nc, _ := d.dial(t, d.srv, "tenant_a")
	leaseOf(t, nc)
	d.stopCoord()
	d.startCoordinator(t)
	d.stopCoord()
	if e := d.coordErrs.all(); len(e) > 0 {
		t.Fatalf("the successor was refused: %v", e)
	}
}

// TestTenantAgentsGetTheirLeases: agents with tenant credentials and
// their private inbox prefix work unchanged: each of two tenants wanting
// 40 of 100 gets its 40.
func TestTenantAgentsGetTheirLeases(t *testing.T) {
	d := startDeployment(t)
	for _, user := range []string{"tenant_a", "tenant_b"} {
		nc, errs := d.dial(t, d.srv, user)
		leaseOf(t, nc)
		if e := errs.all(); len(e) > 0 {
			t.Fatalf("%s was refused: %v", user, e)
		}
	}
}

// TestTenantCannotReleaseAnothersLease: the probe of a release or
// `wants: 0` sent with a victim's client_id on the tenant's own, allowed
// subject. The coordinator binds client ids to (tenant, user), so it
// releases nothing of the victim's (it says so: released 0) and the
// thief gets no more than what the victim leaves.
func TestTenantCannotReleaseAnothersLease(t *testing.T) {
	d := startDeployment(t)
	victim, _ := d.dial(t, d.srv, "tenant_b")
	va, vlim := leaseOf(t, victim)
	nc, _ := d.dial(t, d.srv, "tenant_a")
	var rel struct {
		Released int32 `json:"released"`
	}
	request(t, nc, "allot.root.capacity.release", fmt.Sprintf(`{"client_id":%q,"resource_id":[%q]}`, va.ClientID(), resource), &rel)
	if rel.Released != 0 {
		t.Fatalf("a release under the victim's id released %d leases", rel.Released)
	}
	var g struct {
		Response []struct {
			Gets struct {
				Capacity float64 `json:"capacity"`
			} `json:"gets"`
		} `json:"response"`
	}
	request(t, nc, "allot.root.capacity.get", fmt.Sprintf(`{"client_id":%q,"resource":[{"resource_id":%q,"wants":0}]}`, va.ClientID(), resource), &g)
	request(t, nc, "allot.root.capacity.get", fmt.Sprintf(`{"client_id":"thief","resource":[{"resource_id":%q,"wants":100}]}`, resource), &g)
	if got := g.Response[0].Gets.Capacity; got+vlim.Capacity() > 100 {
		t.Fatalf("the thief got %v while the victim holds %v of 100", got, vlim.Capacity())
	}
	if vlim.Capacity() != 40 {
		t.Fatalf("the victim's capacity is %v, not 40", vlim.Capacity())
	}
}

// request sends a JSON request and decodes the reply into out, failing
// on an error reply.
func request(t *testing.T, nc *nats.Conn, subject, body string, out any) {
	t.Helper()
	m, err := nc.Request(subject, []byte(body), wait)
	if err != nil {
		t.Fatalf("%s %s: %v", subject, body, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("%s %s: error %s: %s", subject, body, code, m.Header.Get("Nats-Service-Error"))
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		t.Fatalf("%s reply %s: %v", subject, m.Data, err)
	}
}
