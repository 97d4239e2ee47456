package quotaserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
	"github.com/allot/allot/quotaserver"
	"github.com/allot/allot/replica"
)

// tokenBucket is a TOKEN_BUCKET spec with quotaservice's shape.
func tokenBucket(size int64, rate float64, waitTimeout time.Duration) *quota.Spec {
	return &quota.Spec{Algorithm: quota.TokenBucket, Size: size, FillRate: rate, WaitTimeout: waitTimeout,
		MaxDebt: 10 * time.Second, MaxTokensPerRequest: 10}
}

// staticConfig is a configuration source that never changes.
type staticConfig struct{ cfg *quota.Config }

func (s *staticConfig) get() *quota.Config { return s.cfg }

func namespaces(ns ...*quota.Namespace) *quota.Config {
	c := &quota.Config{Namespaces: map[string]*quota.Namespace{}}
	for _, n := range ns {
		c.Namespaces[n.Name] = n
	}
	return c
}

// takeReply is the JSON reply of a take.
type takeReply struct {
	Status     string `json:"status"`
	Wait       string `json:"wait"`
	Reason     string `json:"reason"`
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	RetryAfter string `json:"retry_after"`
	Matched    string `json:"matched"`
}

// request sends a JSON request and returns the reply and its error code
// header ("" on success).
func request(t *testing.T, nc *nats.Conn, subject, body string) (*nats.Msg, string) {
	t.Helper()
	m, err := nc.Request(subject, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatalf("request %s %s: %v", subject, body, err)
	}
	return m, m.Header.Get("Nats-Service-Error-Code")
}

func take(t *testing.T, nc *nats.Conn, subject, body string) takeReply {
	t.Helper()
	m, code := request(t, nc, subject, body)
	if code != "" {
		t.Fatalf("take %s %s: error %s: %s", subject, body, code, m.Header.Get("Nats-Service-Error"))
	}
	var r takeReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatalf("take reply %s: %v", m.Data, err)
	}
	return r
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// runReplica runs a replica of partition p until the test ends or the
// returned cancel is called. Its seat lasts 30s, which a stall of the
// machine does not outlast: a leader whose renewal came late on a loaded
// machine (past the 1s TTL less the 0.5s margin) lost it mid-test, and
// its successor's buckets start drained.
func runReplica(t testing.TB, nc *nats.Conn, id string, p, n int, cfg quotaserver.Config) (*quotaserver.Replica, context.CancelFunc) {
	t.Helper()
	return runReplicaTTL(t, nc, id, p, n, cfg, 30*time.Second)
}

// runReplicaTTL is runReplica with an election TTL of ttl, for a test
// that waits for a lost leader's seat to expire.
func runReplicaTTL(t testing.TB, nc *nats.Conn, id string, p, n int, cfg quotaserver.Config, ttl time.Duration) (*quotaserver.Replica, context.CancelFunc) {
	t.Helper()
	r, err := quotaserver.NewReplica(nc, quotaserver.ReplicaOptions{
		Options:  quotaserver.Options{ServerID: id, Partition: p, Partitions: n, Config: cfg, Logger: quiet()},
		Election: replica.Election{TTL: ttl},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil && ctx.Err() == nil {
			t.Logf("replica %s: %v", id, err) // e.g. its connection was closed
		}
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return r, stop
}

// waitServing waits until r's server answers.
func waitServing(t testing.TB, rs ...*quotaserver.Replica) {
	t.Helper()
	poll.For(t, 10*time.Second, poll.Interval, func() error {
		for _, r := range rs {
			if st := r.Status(); !st.Serving {
				return fmt.Errorf("replica %+v not serving", st)
			}
		}
		return nil
	})
}

// watchConfig opens the configuration bucket of s and watches it, as a
// coordinator process does, and returns the bucket and the source.
func watchConfig(t *testing.T, nc *nats.Conn) (jetstream.KeyValue, *configkv.Watcher) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := configkv.OpenBucket(ctx, js, configkv.DefaultBucket, true)
	if err != nil {
		t.Fatal(err)
	}
	w := configkv.NewWatcher(kv, nil, quiet())
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return kv, w
}

// putNamespace stores a namespace and waits until w serves revision.
func putNamespace(t *testing.T, kv jetstream.KeyValue, w *configkv.Watcher, ns, doc string) {
	t.Helper()
	rev, err := kv.Put(context.Background(), config.NamespaceKey(ns), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, fmt.Sprintf("namespace %s revision %d to be served", ns, rev), func() bool {
		n := w.Current().Quota().Namespaces[ns]
		return n != nil && n.Revision == rev
	})
}

func TestTakeAnswersAsConfigured(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	kv, w := watchConfig(t, nc)
	putNamespace(t, kv, w, "logins", `{"buckets": {"alice": {"size": 3, "fill_rate": 1, "wait_timeout": "5s"}}}`)
	r, _ := runReplica(t, nc, "a", 0, 1, sources.WatchedQuota(w))
	waitServing(t, r)

	subj := quotaserver.TakeSubject("root")
	// The bucket starts full at the first take and refills 1 token/s, so
	// the 4th take waits 1s less the time since the first.
	first := time.Now()
	for i := range 3 {
		if got := take(t, nc, subj, `{"bucket":"logins:alice"}`); got.Status != "OK" || got.Matched != "logins:alice" {
			t.Fatalf("take %d: %+v, want OK from logins:alice (the first leader starts buckets full)", i, got)
		}
	}
	got := take(t, nc, subj, `{"bucket":"logins:alice"}`)
	elapsed := time.Since(first)
	if got.Status != "OK_WAIT" {
		t.Fatalf("4th take: %+v, want OK_WAIT", got)
	}
	if w, err := time.ParseDuration(got.Wait); err != nil || w < time.Second-elapsed || w > time.Second {
		t.Fatalf("4th take waits %q, want 1s less at most the %v since the first take (one token at 1/s)", got.Wait, elapsed)
	}
	// max_wait 0s: now or never. The bucket owes 1s already: no_wait.
	if got := take(t, nc, subj, `{"bucket":"logins:alice","max_wait":"0s"}`); got.Status != "REJECTED" || got.Reason != quota.ReasonNoWait {
		t.Fatalf("take with max_wait 0s: %+v, want REJECTED no_wait", got)
	}
	// The bucket subject answers too, for the same bucket.
	if got := take(t, nc, quotaserver.BucketSubject("root", "take", "logins", "alice"), `{"max_wait":"0s"}`); got.Status != "REJECTED" {
		t.Fatalf("take on the bucket subject: %+v, want REJECTED", got)
	}
	if got := take(t, nc, subj, `{"bucket":"nope:x"}`); got.Status != "REJECTED" || got.Reason != quota.ReasonNoBucket {
		t.Fatalf("take of an unknown namespace: %+v, want REJECTED no_bucket", got)
	}

	// Hot reload: a new revision is in force at the next request.
	putNamespace(t, kv, w, "logins", `{"buckets": {"bob": {"size": 1, "fill_rate": 1}}}`)
	if got := take(t, nc, subj, `{"bucket":"logins:bob"}`); got.Status != "OK" || got.Matched != "logins:bob" {
		t.Fatalf("take after reload: %+v, want OK from logins:bob", got)
	}

	st := r.Server().Stats()
	if st.Takes != 8 || st.Partitions != 1 || !st.BucketsStartFull || st.Events["logins"] == (quota.Events{}) {
		t.Fatalf("stats %+v: want 8 takes, 1 partition, buckets starting full, events for logins", st)
	}
}

func TestReportCharges(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	src := &staticConfig{cfg: namespaces(&quota.Namespace{Name: "batch",
		Buckets: map[string]*quota.Spec{"job": tokenBucket(10, 0.001, 0)}})}
	r, _ := runReplica(t, nc, "a", 0, 1, sources.QuotaFunc(src.get))
	waitServing(t, r)

	peek := func() int64 {
		return take(t, nc, quotaserver.TakeSubject("root"), `{"bucket":"batch:job","tokens":0}`).Remaining
	}
	before := peek()
	m, code := request(t, nc, quotaserver.ReportSubject("root"), `{"reports":[{"bucket":"batch:job","tokens":4},{"bucket":"bad name","tokens":1}]}`)
	if code != "" || !strings.Contains(string(m.Data), `"accepted":1`) || !strings.Contains(string(m.Data), `"ignored":1`) {
		t.Fatalf("report ack %s (code %q): want 1 accepted, 1 ignored", m.Data, code)
	}
	if after := peek(); after != before-4 {
		t.Fatalf("remaining %d after reporting 4 of %d", after, before)
	}
	// A report without a reply subject is applied too (published, never
	// answered), and so is one on the bucket's subject.
	if err := nc.Publish(quotaserver.BucketSubject("root", "report", "batch", "job"), []byte(`{"reports":[{"tokens":3}]}`)); err != nil {
		t.Fatal(err)
	}
	poll.For(t, 30*time.Second, poll.Interval, func() error {
		if got := peek(); got != before-7 {
			return fmt.Errorf("published report of 3 not applied: remaining %d, want %d", got, before-7)
		}
		return nil
	})
}

// TestReportAckCounts: a report's acknowledgement counts each report
// once, accepted or ignored, whether it is malformed or its bucket does
// not exist, on the plain subject and on a bucket's.
func TestReportAckCounts(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	src := &staticConfig{cfg: namespaces(&quota.Namespace{Name: "batch", Dynamic: tokenBucket(1000, 100, 0), MaxDynamicBuckets: 10})}
	r, _ := runReplica(t, nc, "a", 0, 1, sources.QuotaFunc(src.get))
	waitServing(t, r)
	for _, c := range []struct {
		subject, body     string
		accepted, ignored int32
		err               string
	}{
		{quotaserver.ReportSubject("root"), `{"bucket":"nons:x","tokens":1}`, 0, 1, `report nons:x: no_bucket: no bucket answers it`},
		{quotaserver.ReportSubject("root"), `[{"bucket":"batch:job","tokens":120},{"bucket":"bad-name","tokens":1}]`, 1, 1, `bucket "bad-name"`},
		{quotaserver.ReportSubject("root"), `[{"bucket":"nons:job","tokens":1},{"bucket":"bad-name","tokens":1}]`, 0, 2, `bucket "bad-name"`},
		{quotaserver.ReportSubject("root"), `[{"bucket":"nons:a","tokens":1},{"bucket":"nons:b","tokens":1},{"bucket":"batch:b","tokens":1}]`, 1, 2, `report nons:a: no_bucket`},
		{quotaserver.BucketSubject("root", "report", "nons", "x"), `{"tokens":1}`, 0, 1, `report nons:x: no_bucket: no bucket answers it`},
		{quotaserver.BucketSubject("root", "report", "batch", "y"), `{"tokens":1}`, 1, 0, ""},
	} {
		m, code := request(t, nc, c.subject, c.body)
		var ack allotpb.QuotaReportResponse
		if code != "" || wire.Unmarshal(wire.JSON, m.Data, &ack) != nil {
			t.Errorf("%s %s: code %q, %s", c.subject, c.body, code, m.Data)
			continue
		}
		if ack.Accepted != c.accepted || ack.Ignored != c.ignored || !strings.Contains(ack.Error, c.err) || (c.err == "") != (ack.Error == "") {
			t.Errorf("%s %s: ack %s, want accepted %d, ignored %d, error naming %q", c.subject, c.body, m.Data, c.accepted, c.ignored, c.err)
		}
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	src := &staticConfig{cfg: namespaces(&quota.Namespace{Name: "logins", Dynamic: tokenBucket(5, 0.001, 0), MaxDynamicBuckets: 100})}
	r, _ := runReplica(t, nc, "a", 0, 1, sources.QuotaFunc(src.get))
	waitServing(t, r)
	plain := quotaserver.TakeSubject("root")
	take(t, nc, plain, `{"bucket":"logins:alice"}`)
	remaining := take(t, nc, plain, `{"bucket":"logins:alice","tokens":0}`).Remaining
	buckets := r.Server().Stats().Buckets

	cases := []struct{ subject, body, want string }{
		{plain, `{"bucket":`, "quota take"},
		{plain, `{"bucket":"logins:alice","tokens":NaN}`, "quota take"},
		{plain, `{"bucket":"logins:alice","tokens":"NaN"}`, "quota take"},
		{plain, `{"bucket":"logins:alice","tokens":-1}`, "tokens -1"},
		{plain, `{"bucket":"logins:alice","max_wait":"360000000s"}`, "max_wait"},
		{plain, `{"bucket":"logins:alice","max_wait":"-1s"}`, "max_wait"},
		{plain, `{"bucket":"logins:al ice"}`, "quota take"},
		{plain, `{"bucket":"logins"}`, "quota take"},
		{plain, `{"bucket":"logins:bob","unknown":1}`, "quota take"},
		{plain, `{}`, "bucket is empty"},
		{quotaserver.BucketSubject("root", "take", "logins", "bob"), `{"bucket":"logins:alice"}`, "not \"logins:bob\" of the subject"},
		{quotaserver.BucketSubject("root", "report", "logins", "bob"), `{"reports":[{"bucket":"logins:alice","tokens":1}]}`, "of the subject"},
	}
	for _, c := range cases {
		m, code := request(t, nc, c.subject, c.body)
		if code != "400" || !strings.Contains(m.Header.Get("Nats-Service-Error"), c.want) {
			t.Errorf("%s %s: code %q, error %q; want 400 mentioning %q", c.subject, c.body, code, m.Header.Get("Nats-Service-Error"), c.want)
		}
	}
	if m, code := request(t, nc, quotaserver.PartitionSubject("root", 0)+".peek.logins.alice", `{}`); code != "404" || !strings.Contains(m.Header.Get("Nats-Service-Error"), "take.NAMESPACE.NAME") {
		t.Errorf("unknown operation on the partition subject: code %q, %q; want 404 naming the subjects", code, m.Header.Get("Nats-Service-Error"))
	}
	// A report is never refused: a malformed one is ignored and counted.
	if m, code := request(t, nc, quotaserver.ReportSubject("root"), `[{"bucket"`); code != "" || !strings.Contains(string(m.Data), `"ignored":1`) {
		t.Errorf("malformed report: code %q, %s; want an acknowledgement counting it ignored", code, m.Data)
	}
	if got := take(t, nc, plain, `{"bucket":"logins:alice","tokens":0}`).Remaining; got != remaining {
		t.Fatalf("remaining %d after bad requests, was %d", got, remaining)
	}
	if got := r.Server().Stats().Buckets; got != buckets {
		t.Fatalf("%d buckets after bad requests, was %d", got, buckets)
	}
}

// startMapped starts a server with the subject mappings of n partitions.
func startMapped(t *testing.T, n int) *server.Server {
	t.Helper()
	s, err := embed.Start(embed.Options{StoreDir: t.TempDir(), Mappings: quotaserver.Mappings("root", n)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

func TestPartitionsShareTheNamespaces(t *testing.T) {
	s := startMapped(t, 2)
	nc := natstest.Conn(t, s)
	// The buckets refill a token per 1000s: the counts below (99 after a
	// take, 90 after a report of 9 more) hold however long the machine
	// takes between the requests (at 10/s they held for 100ms).
	var spaces []*quota.Namespace
	for i := range 8 {
		spaces = append(spaces, &quota.Namespace{Name: fmt.Sprintf("ns%d", i), Dynamic: tokenBucket(100, 0.001, 0), MaxDynamicBuckets: 10})
	}
	src := &staticConfig{cfg: namespaces(spaces...)}
	r0, _ := runReplica(t, nc, "p0", 0, 2, sources.QuotaFunc(src.get))
	r1, _ := runReplica(t, natstest.Conn(t, s), "p1", 1, 2, sources.QuotaFunc(src.get))
	waitServing(t, r0, r1)

	for i := range 8 {
		ns := fmt.Sprintf("ns%d", i)
		if got := take(t, nc, quotaserver.BucketSubject("root", "take", ns, "k"), `{}`); got.Status != "OK" || got.Matched == "" {
			t.Fatalf("take %s:k on its bucket subject: %+v", ns, got)
		}
	}
	t0, t1 := r0.Server().Stats().Takes, r1.Server().Stats().Takes
	if t0 == 0 || t1 == 0 || t0+t1 != 8 {
		t.Fatalf("partition takes %d and %d: want 8 spread over both", t0, t1)
	}
	// The plain subject reaches every namespace: partition 0 passes the
	// others' on, and their owner answers.
	for i := range 8 {
		ns := fmt.Sprintf("ns%d", i)
		if got := take(t, nc, quotaserver.TakeSubject("root"), `{"bucket":"`+ns+`:k","tokens":0}`); got.Status != "OK" || got.Remaining != 99 {
			t.Fatalf("peek %s:k on the plain subject: %+v, want OK with 99 remaining (its owner's bucket)", ns, got)
		}
	}
	if f := r0.Server().Stats().Forwarded; f != 8 {
		t.Fatalf("partition 0 forwarded %d plain takes, want all 8", f)
	}
	// Reports on the plain subject reach their owner too.
	if _, code := request(t, nc, quotaserver.ReportSubject("root"), `{"reports":[{"bucket":"ns0:k","tokens":9},{"bucket":"ns1:k","tokens":9}]}`); code != "" {
		t.Fatalf("report: error %s", code)
	}
	for _, ns := range []string{"ns0", "ns1"} {
		poll.Until(t, 30*time.Second, "the report to "+ns+":k to be applied by its owner", func() bool {
			return take(t, nc, quotaserver.BucketSubject("root", "take", ns, "k"), `{"tokens":0}`).Remaining == 90
		})
	}
}

// TestFailoverNeverAdmitsMoreThanTheLimit kills the leader abruptly while
// a client takes as fast as it is answered: the follower takes over, and
// the admissions of both terms together stay within what the bucket
// allows over the whole run (size + fill rate × time). The new leader's
// buckets start drained past the old leader's longest possible wait.
func TestFailoverNeverAdmitsMoreThanTheLimit(t *testing.T) {
	s := natstest.Server(t)
	client := natstest.Conn(t, s)
	const size, rate = 5, 2.0
	src := &staticConfig{cfg: namespaces(&quota.Namespace{Name: "api",
		Buckets: map[string]*quota.Spec{"k": tokenBucket(size, rate, time.Second)}})}
	ncA := natstest.Conn(t, s)
	a, _ := runReplicaTTL(t, ncA, "a", 0, 1, sources.QuotaFunc(src.get), time.Second) // its seat expires within the run
	waitServing(t, a)
	b, _ := runReplicaTTL(t, natstest.Conn(t, s), "b", 0, 1, sources.QuotaFunc(src.get), time.Second)

	start := time.Now()
	admitted, afterFailover := 0, 0
	var killed, answered time.Time
	var second *quotaserver.Server // the new leader's, once it admits
	for time.Since(start) < 4*time.Second {
		if killed.IsZero() && time.Since(start) > 500*time.Millisecond {
			ncA.Close() // abrupt: no resignation, its key expires
			killed = time.Now()
		}
		m, err := client.Request(quotaserver.TakeSubject("root"), []byte(`{"bucket":"api:k","max_wait":"0s"}`), 200*time.Millisecond)
		if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
			var r takeReply
			if err := json.Unmarshal(m.Data, &r); err != nil {
				t.Fatal(err)
			}
			if !killed.IsZero() && answered.IsZero() {
				answered = time.Now()
			}
			if r.Status == "OK" {
				admitted++
				if srv := b.Server(); srv != nil && b.Status().Serving {
					afterFailover++
					second = srv
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("abrupt leader loss: first answer %v later (election TTL 1s); %d admitted, %d by the new leader", answered.Sub(killed), admitted, afterFailover)
	limit := size + int(rate*time.Since(start).Seconds())
	if admitted > limit {
		t.Fatalf("admitted %d across the failover, the bucket allows %d", admitted, limit)
	}
	if second == nil {
		t.Fatalf("follower status %+v: it never admitted after the failover", b.Status())
	}
	// The old leader's OK_WAIT answers (up to the 1s wait_timeout) take
	// effect until a second after its last decision.
	if st := second.Stats(); st.BucketsStartFull || st.Since.Sub(killed) < time.Second {
		t.Fatalf("the second leader starts buckets full, or drained at %v, less than the longest wait (1s) after the old leader was lost at %v", st.Since, killed)
	}
}

// TestSweepAndProtobuf: idle dynamic buckets are swept (and counted as
// removed), and a binary take gets a binary reply without headers.
func TestSweepAndProtobuf(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	spec := tokenBucket(5, 1, 0)
	spec.MaxIdle = 100 * time.Millisecond
	cfg := namespaces(&quota.Namespace{Name: "users", Dynamic: spec, MaxDynamicBuckets: 10})
	// A seat of 30s, as runReplica's: with the default 3s, a 3s stall of
	// the machine deposed the replica and the test read a nil Server.
	r, err := quotaserver.NewReplica(nc, quotaserver.ReplicaOptions{Options: quotaserver.Options{
		ServerID: "a", SweepInterval: 50 * time.Millisecond, Config: sources.QuotaFunc(func() *quota.Config { return cfg }), Logger: quiet()},
		Election: replica.Election{TTL: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitServing(t, r)

	data, err := proto.Marshal(&allotpb.QuotaTakeRequest{Bucket: "users:u1"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.RequestMsg(&nats.Msg{Subject: quotaserver.TakeSubject("root"), Data: data,
		Header: nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var resp allotpb.QuotaTakeResponse
	if err := proto.Unmarshal(m.Data, &resp); err != nil || len(m.Header) != 0 ||
		resp.GetStatus() != allotpb.QuotaTakeResponse_OK || resp.GetMatched() != "users:u1" || resp.GetRemaining() != 4 {
		t.Fatalf("binary take: %v (headers %v), %v; want OK from users:u1 with 4 remaining, no headers", &resp, m.Header, err)
	}
	take(t, nc, quotaserver.TakeSubject("root"), `{"bucket":"users:u2"}`)
	// Counted by creations: u1 may already be idle past 100ms and swept.
	if n := r.Server().Stats().Events["users"].DynamicCreated; n != 2 {
		t.Fatalf("%d dynamic buckets created for two users, want 2", n)
	}
	poll.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		if st := r.Server().Stats(); st.Buckets != 0 || st.Events["users"].Removed != 2 {
			return fmt.Errorf("idle buckets not swept: %+v", st)
		}
		return nil
	})
}

// TestTenantsOfANamespace: a namespace that lists its tenants refuses
// (403) the takes of any other tenant, as the tenant's subject names it
// (allot.t.<tenant>.…, filled by its service import), on the plain and
// the bucket subjects of either partition, and ignores its reports; a
// forged Nats-Request-Info header changes nothing. The listed tenant and
// the service's own account are served. A namespace without a bucket for
// a key is answered by the global default, whose own tenants list then
// applies.
func TestTenantsOfANamespace(t *testing.T) {
	s := startMapped(t, 2)
	nc := natstest.Conn(t, s)
	spaces := []*quota.Namespace{{Name: quota.GlobalDefault, Default: tokenBucket(100, 0.001, 0), Tenants: []string{"TENANT_A"}},
		{Name: "open", Buckets: map[string]*quota.Spec{"x": tokenBucket(100, 0.001, 0)}}}
	for _, name := range []string{"ns0", "ns1"} { // on partitions 0 and 1
		spaces = append(spaces, &quota.Namespace{Name: name, Dynamic: tokenBucket(100, 0.001, 0), MaxDynamicBuckets: 10,
			Tenants: []string{"TENANT_A"}})
	}
	src := &staticConfig{cfg: namespaces(spaces...)}
	r0, _ := runReplica(t, nc, "p0", 0, 2, sources.QuotaFunc(src.get))
	r1, _ := runReplica(t, natstest.Conn(t, s), "p1", 1, 2, sources.QuotaFunc(src.get))
	waitServing(t, r0, r1)

	send := func(subject, body string) (*nats.Msg, string) {
		t.Helper()
		msg := nats.NewMsg(subject)
		msg.Data = []byte(body)
		msg.Header.Set("Nats-Request-Info", `{"acc":"TENANT_A","user":"forged"}`)
		m, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", subject, body, err)
		}
		return m, m.Header.Get("Nats-Service-Error-Code")
	}
	a, b := func(s string) string { return quotaserver.TenantSubject("TENANT_A", s) }, func(s string) string { return quotaserver.TenantSubject("TENANT_B", s) }
	for _, ns := range []string{"ns0", "ns1"} {
		bucket := quotaserver.BucketSubject("root", "take", ns, "k")
		for _, c := range []struct{ subject, body, code string }{
			{b(quotaserver.TakeSubject("root")), `{"bucket":"` + ns + `:k","tokens":5}`, "403"},
			{b(bucket), `{"tokens":5}`, "403"},
			{a(quotaserver.TakeSubject("root")), `{"bucket":"` + ns + `:k","tokens":5}`, ""},
			{a(bucket), `{"tokens":1}`, ""},
			{bucket, `{"tokens":4}`, ""},
		} {
			if m, code := send(c.subject, c.body); code != c.code {
				t.Errorf("%s %s: code %q (%s), want %q", c.subject, c.body, code, m.Data, c.code)
			}
		}
		m, code := send(b(quotaserver.ReportSubject("root")), `{"reports":[{"bucket":"`+ns+`:k","tokens":50}]}`)
		if code != "" || !strings.Contains(string(m.Data), `"accepted":0`) || !strings.Contains(string(m.Data), "not open to") {
			t.Errorf("report from TENANT_B to %s: %s (code %q), want ignored", ns, m.Data, code)
		}
		if got := take(t, nc, bucket, `{"tokens":0}`); got.Remaining != 90 {
			t.Errorf("%s:k has %d left; want 90 (only TENANT_A's and the own account's takes)", ns, got.Remaining)
		}
	}
	// open:x is open:x's own; open:k falls to the global default.
	for _, c := range []struct{ bucket, code string }{{"open:x", ""}, {"open:k", "403"}, {"nope:k", "403"}} {
		if m, code := send(b(quotaserver.TakeSubject("root")), `{"bucket":"`+c.bucket+`"}`); code != c.code {
			t.Errorf("TENANT_B's take of %s: code %q (%s), want %q", c.bucket, code, m.Data, c.code)
		}
	}
}

// TestTenantPlainTakeAcrossPartitions: with accounts and two partitions,
// a tenant's take on the plain subject whose bucket another partition
// owns is answered: partition 0 cannot forward it with the tenant's reply
// subject (the import's _R_.…, which only it may answer), so it asks the
// owner and passes the answer back.
func TestTenantPlainTakeAcrossPartitions(t *testing.T) {
	s := natstest.MappedTenantServer(t, map[string][]string{"TENANT_A": {"a"}}, quotaserver.Mappings("root", 2))
	nc := natstest.Conn(t, s, nats.UserInfo("allot", "allot"))
	src := &staticConfig{cfg: namespaces(&quota.Namespace{Name: "ns0", Dynamic: tokenBucket(100, 0.001, 0), MaxDynamicBuckets: 10},
		&quota.Namespace{Name: "ns1", Dynamic: tokenBucket(100, 0.001, 0), MaxDynamicBuckets: 10})}
	r0, _ := runReplica(t, nc, "p0", 0, 2, sources.QuotaFunc(src.get))
	r1, _ := runReplica(t, natstest.Conn(t, s, nats.UserInfo("allot", "allot")), "p1", 1, 2, sources.QuotaFunc(src.get))
	waitServing(t, r0, r1)
	tenant := natstest.Conn(t, s, nats.UserInfo("a", "a"))
	for _, ns := range []string{"ns0", "ns1"} { // ns1 is partition 1's
		if got := take(t, tenant, quotaserver.TakeSubject("root"), `{"bucket":"`+ns+`:k","tokens":3}`); got.Status != "OK" || got.Remaining != 97 {
			t.Fatalf("the tenant's plain take of %s:k: %+v", ns, got)
		}
	}
	if r1.Server().Stats().Takes != 1 {
		t.Fatalf("partition 1 decided %d takes, want ns1's", r1.Server().Stats().Takes)
	}
}
