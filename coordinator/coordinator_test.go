package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// answerWithin bounds the wait for a coordinator's answer where a test
// wants one: generous, since a loaded machine may take seconds to give
// it, and it is no timed assertion.
const answerWithin = 30 * time.Second

// tmpl is a template whose leases last a minute: the tests read grants
// that count the other clients' leases in force (fair shares, learning
// mode echoing a lease), and a 10s lease lapsed if the machine stalled
// between two requests. Tests of leases that end set their own.
func tmpl(glob string, capacity float64, kind allotpb.Algorithm_Kind) *config.Template {
	return &config.Template{
		Name: "t-" + glob, Glob: glob, Capacity: capacity, Algorithm: kind,
		LeaseLength: time.Minute, RefreshInterval: time.Second, Floor: config.DefaultFloor(),
	}
}

type env struct {
	t   *testing.T
	nc  *nats.Conn
	c   *coordinator.Coordinator
	srv *server.Server
}

func start(t *testing.T, opts coordinator.Options) *env {
	t.Helper()
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	if opts.RoundInterval == 0 {
		opts.RoundInterval = 5 * time.Millisecond
	}
	return &env{t: t, nc: nc, c: coordtest.Start(t, nc, opts), srv: s}
}

func (e *env) reqJSON(subject, body string) *nats.Msg {
	e.t.Helper()
	m, err := e.nc.Request(subject, []byte(body), answerWithin)
	if err != nil {
		e.t.Fatalf("request %s: %v", subject, err)
	}
	return m
}

func (e *env) get(client string, wants map[string]float64) *allotpb.GetCapacityResponse {
	e.t.Helper()
	req := &allotpb.GetCapacityRequest{ClientId: client}
	for id, w := range wants {
		req.Resource = append(req.Resource, &allotpb.ResourceRequest{ResourceId: id, Wants: w})
	}
	return e.getReq(req)
}

func (e *env) getReq(req *allotpb.GetCapacityRequest) *allotpb.GetCapacityResponse {
	e.t.Helper()
	data, _ := proto.Marshal(req)
	msg := nats.NewMsg(coordinator.Subject("root", "capacity.get"))
	msg.Data = data
	msg.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
	m, err := e.nc.RequestMsg(msg, answerWithin)
	if err != nil {
		e.t.Fatal(err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		e.t.Fatalf("error %s: %s", code, m.Header.Get("Nats-Service-Error"))
	}
	var resp allotpb.GetCapacityResponse
	if err := proto.Unmarshal(m.Data, &resp); err != nil {
		e.t.Fatal(err)
	}
	return &resp
}

func TestJSONRoundTrip(t *testing.T) {
	e := start(t, coordinator.Options{Templates: sources.StaticTemplates(config.NewSet(1, []*config.Template{tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)}, nil))})
	m := e.reqJSON("allot.root.capacity.get", `{"client_id":"me","resource":[{"resource_id":"db","wants":10}]}`)
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("error %s: %s", code, m.Header.Get("Nats-Service-Error"))
	}
	var got struct {
		Response []struct {
			ResourceID     string  `json:"resource_id"`
			SafeCapacity   float64 `json:"safe_capacity"`
			SafeExpiryTime string  `json:"safe_expiry_time"`
			Gets           struct {
				Capacity        float64 `json:"capacity"`
				ExpiryTime      string  `json:"expiry_time"`
				RefreshInterval string  `json:"refresh_interval"`
			} `json:"gets"`
		} `json:"response"`
		Term string `json:"term"`
	}
	if err := json.Unmarshal(m.Data, &got); err != nil {
		t.Fatalf("%v: %s", err, m.Data)
	}
	// The floor: half the fair share (capacity ÷ clients), never more than
	// the lease, until the floor lease (5 minutes) ends.
	if len(got.Response) != 1 || got.Response[0].ResourceID != "db" || got.Response[0].Gets.Capacity != 10 {
		t.Fatalf("unexpected reply %s", m.Data)
	}
	if got.Term != "1" || got.Response[0].Gets.RefreshInterval != "1s" || got.Response[0].SafeCapacity != 10 {
		t.Fatalf("unexpected reply %s", m.Data)
	}
	if se, err := time.Parse(time.RFC3339Nano, got.Response[0].SafeExpiryTime); err != nil || se.Before(time.Now().Add(4*time.Minute)) {
		t.Fatalf("safe_expiry_time %q (%v): want the floor lease, 5 minutes ahead", got.Response[0].SafeExpiryTime, err)
	}
	if _, err := time.Parse(time.RFC3339Nano, got.Response[0].Gets.ExpiryTime); err != nil {
		t.Fatalf("expiry_time: %v", err)
	}
	// camelCase is accepted too.
	m = e.reqJSON("allot.root.capacity.get", `{"clientId":"you","resource":[{"resourceId":"db","wants":95}]}`)
	var resp allotpb.GetCapacityResponse
	if err := wire.Unmarshal(wire.ReplyEncodingOf(m.Header), m.Data, &resp); err != nil || resp.GetResponse()[0].GetGets().GetCapacity() != 90 {
		t.Fatalf("camelCase request: %s (%v)", m.Data, err)
	}
	// Release over JSON.
	m = e.reqJSON("allot.root.capacity.release", `{"client_id":"me","resource_id":["db","nope"]}`)
	var rel allotpb.ReleaseCapacityResponse
	if err := wire.Unmarshal(wire.ReplyEncodingOf(m.Header), m.Data, &rel); err != nil || rel.GetReleased() != 1 {
		t.Fatalf("release: %s (%v)", m.Data, err)
	}
}

func TestProtobufFairShare(t *testing.T) {
	e := start(t, coordinator.Options{Templates: sources.StaticTemplates(config.NewSet(1, []*config.Template{tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)}, nil))})
	// Doorman's FAIR_SHARE counterexample, through the real path: after
	// every client has refreshed once, shares settle to the exact answer.
	wants := map[string]float64{"a": 1000, "b": 33.5, "c": 31, "d": 1}
	want := map[string]float64{"a": 34.5, "b": 33.5, "c": 31, "d": 1}
	got := map[string]float64{}
	for range 3 {
		for _, id := range []string{"a", "b", "c", "d"} {
			resp := e.get(id, map[string]float64{"db": wants[id]})
			got[id] = resp.GetResponse()[0].GetGets().GetCapacity()
			if resp.GetTerm() != 1 {
				t.Fatalf("term %d", resp.GetTerm())
			}
		}
	}
	for id := range want {
		if math.Abs(got[id]-want[id]) > 1e-9 {
			t.Fatalf("grants %v, want %v", got, want)
		}
	}
}

func TestOwedClientComesBackSooner(t *testing.T) {
	var offset atomic.Int64
	base := time.Now()
	now := func() time.Time { return base.Add(time.Duration(offset.Load())) } // frozen but for offset
	e := start(t, coordinator.Options{Now: now, Templates: sources.StaticTemplates(config.NewSet(1, []*config.Template{tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)}, nil))})
	first := e.get("a", map[string]float64{"db": 100}).GetResponse()[0].GetGets()
	if first.GetCapacity() != 100 {
		t.Fatalf("first client got %v", first.GetCapacity())
	}
	// b's fair share is 50 but a holds everything until it refreshes (due
	// in 1s): b gets nothing now and is asked back just after a is due,
	// sooner than its own full refresh interval.
	offset.Add(int64(400 * time.Millisecond))
	g := e.get("b", map[string]float64{"db": 100}).GetResponse()[0].GetGets()
	if g.GetCapacity() != 0 {
		t.Fatalf("b got %v while a holds all capacity", g.GetCapacity())
	}
	if ri := g.GetRefreshInterval().AsDuration(); ri >= time.Second {
		t.Fatalf("owed client refresh interval %v, want shorter than 1s", ri)
	}
	a := e.get("a", map[string]float64{"db": 100}).GetResponse()[0].GetGets()
	if a.GetCapacity() != 50 {
		t.Fatalf("a after refresh got %v, want 50", a.GetCapacity())
	}
	// Until a confirms the shrink (the reply may not have reached it), its
	// 100 still counts; it is asked back at once to confirm.
	if b := e.get("b", map[string]float64{"db": 100}).GetResponse()[0].GetGets().GetCapacity(); b != 0 {
		t.Fatalf("b got %v before a confirmed giving back 50", b)
	}
	if ri := a.GetRefreshInterval().AsDuration(); ri >= time.Second {
		t.Fatalf("a shrank and was asked back in %v, want sooner than its 1s refresh interval", ri)
	}
	e.getReq(&allotpb.GetCapacityRequest{ClientId: "a", Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 100, Has: a}}})
	if b := e.get("b", map[string]float64{"db": 100}).GetResponse()[0].GetGets().GetCapacity(); b != 50 {
		t.Fatalf("b after a shrank got %v, want 50", b)
	}
}

func TestBadInput(t *testing.T) {
	e := start(t, coordinator.Options{Templates: sources.StaticTemplates(config.NewSet(1, []*config.Template{tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)}, nil))})
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprintf(`{"resource_id":"r%d","wants":1}`, i)
	}
	tests := []struct {
		name, subject, body, code, text string
	}{
		{"malformed", "capacity.get", `{"client_id":`, "400", "cannot decode"},
		{"empty payload", "capacity.get", ``, "400", "empty payload"},
		{"missing client", "capacity.get", `{"resource":[{"resource_id":"db","wants":1}]}`, "400", "client_id is empty"},
		{"no resources", "capacity.get", `{"client_id":"x"}`, "400", "no resources"},
		{"empty resource id", "capacity.get", `{"client_id":"x","resource":[{"wants":1}]}`, "400", "resource_id is empty"},
		{"long id", "capacity.get", `{"client_id":"` + strings.Repeat("x", 300) + `","resource":[{"resource_id":"db"}]}`, "400", "limit is 256"},
		{"NaN", "capacity.get", `{"client_id":"x","resource":[{"resource_id":"db","wants":"NaN"}]}`, "400", "NaN"},
		{"Inf", "capacity.get", `{"client_id":"x","resource":[{"resource_id":"db","wants":"Infinity"}]}`, "400", "infinite"},
		{"negative", "capacity.get", `{"client_id":"x","resource":[{"resource_id":"db","wants":-1}]}`, "400", "negative"},
		{"huge", "capacity.get", `{"client_id":"x","resource":[{"resource_id":"db","wants":1e300}]}`, "400", "limit is"},
		{"unknown field", "capacity.get", `{"client_id":"x","bogus":1,"resource":[{"resource_id":"db"}]}`, "400", "unknown field"},
		{"duplicate resource", "capacity.get", `{"client_id":"x","resource":[{"resource_id":"db"},{"resource_id":"db"}]}`, "400", "appears twice"},
		{"too many", "capacity.get", `{"client_id":"x","resource":[` + strings.Join(many, ",") + `]}`, "400", "limit is 1000"},
		{"unmatched", "capacity.get", `{"client_id":"x","resource":[{"resource_id":"other","wants":1},{"resource_id":"more","wants":1}]}`, "404", "matches no template"},
		{"release no client", "capacity.release", `{"resource_id":["db"]}`, "400", "client_id is empty"},
		{"server get bad band", "server.get", `{"server_id":"s","resource":[{"resource_id":"db","wants":[{"num_clients":0,"wants":5}]}]}`, "400", "num_clients"},
		{"server get as another child", "server.get.eu", `{"server_id":"us","resource":[{"resource_id":"db","wants":[{"num_clients":1,"wants":5}]}]}`, "400", "asks for itself only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := e.reqJSON("allot.root."+tt.subject, tt.body)
			if got := m.Header.Get("Nats-Service-Error-Code"); got != tt.code {
				t.Fatalf("code %q (%s), want %s", got, m.Header.Get("Nats-Service-Error"), tt.code)
			}
			if got := m.Header.Get("Nats-Service-Error"); !strings.Contains(got, tt.text) {
				t.Fatalf("error %q does not mention %q", got, tt.text)
			}
			var er allotpb.ErrorReply
			if err := wire.Unmarshal(wire.JSON, m.Data, &er); err != nil || er.GetError() == "" {
				t.Fatalf("error body %s: %v", m.Data, err)
			}
		})
	}
	// Binary garbage with the protobuf content type.
	msg := nats.NewMsg("allot.root.capacity.get")
	msg.Data = []byte{0xff, 0xff, 0xff}
	msg.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
	m, err := e.nc.RequestMsg(msg, answerWithin)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "400" {
		t.Fatalf("garbage protobuf: %v %v", err, m.Header)
	}
	// A request mixing a configured and an unmatched resource is served for
	// the first and carries an error for the second.
	mixed := e.getReq(&allotpb.GetCapacityRequest{ClientId: "mixed", Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 5}, {ResourceId: "other", Wants: 1}}})
	if r := mixed.GetResponse(); r[0].GetGets().GetCapacity() != 5 || r[1].GetErrorCode() != 404 || !strings.Contains(r[1].GetError(), "matches no template") {
		t.Fatalf("mixed request: %v", mixed)
	}
	jm := e.reqJSON("allot.root.capacity.get", `{"client_id":"mixed","resource":[{"resource_id":"db","wants":5},{"resource_id":"other","wants":1}]}`)
	var jr allotpb.GetCapacityResponse
	if err := wire.Unmarshal(wire.ReplyEncodingOf(jm.Header), jm.Data, &jr); err != nil || jr.GetResponse()[1].GetErrorCode() != 404 || jr.GetResponse()[0].GetGets().GetCapacity() != 5 {
		t.Fatalf("mixed JSON request: %s (%v)", jm.Data, err)
	}
	if _, err := e.nc.Request("allot.root.capacity.release", []byte(`{"client_id":"mixed","resource_id":["db"]}`), answerWithin); err != nil {
		t.Fatal(err)
	}
	// None of the above changed state: the only client gets everything.
	if got := e.get("only", map[string]float64{"db": 100}).GetResponse()[0].GetGets().GetCapacity(); got != 100 {
		t.Fatalf("after bad input, a lone client got %v of 100", got)
	}
	// A valid server.get is served (docs/tree.md): the child is answered
	// with a lease, nothing while the lone client holds everything.
	sm := e.reqJSON("allot.root.server.get.s", `{"server_id":"s","resource":[{"resource_id":"db","wants":[{"priority":0,"num_clients":2,"wants":5}]}]}`)
	var sr allotpb.GetServerCapacityResponse
	if err := wire.Unmarshal(wire.ReplyEncodingOf(sm.Header), sm.Data, &sr); err != nil || sm.Header.Get("Nats-Service-Error-Code") != "" ||
		len(sr.GetResponse()) != 1 || sr.GetResponse()[0].GetGets() == nil || sr.GetTerm() != 1 {
		t.Fatalf("server.get: %s %v (%v)", sm.Data, sm.Header, err)
	}
}

func TestLearningModeAfterRestart(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	set := config.NewSet(1, []*config.Template{tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)}, nil)
	set.Templates()[0].LearningModeDuration = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run := func() *coordinator.Coordinator {
		c, err := coordinator.New(nc, coordinator.Options{Templates: sources.StaticTemplates(set), RoundInterval: coordinator.NoRoundInterval})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	e := &env{t: t, nc: nc}
	// Brand-new deployment: no horizon recorded, no learning mode.
	c := run()
	a := e.get("a", map[string]float64{"db": 70}).GetResponse()[0].GetGets()
	if a.GetCapacity() != 70 {
		t.Fatalf("fresh deployment granted %v, want 70 at once", a.GetCapacity())
	}
	c.Stop()

	// Restart: a's lease may still be out there. The record says at most
	// 80 (70 + 10% headroom) is leased out, so a new client gets the 20
	// that is surely free at once, not nothing (Doorman's learning mode).
	c = run()
	defer c.Stop()
	b := e.get("b", map[string]float64{"db": 70}).GetResponse()[0].GetGets()
	if b.GetCapacity() != 20 {
		t.Fatalf("learning mode gave a new client %v, want the 20 not covered by the ceiling", b.GetCapacity())
	}
	ra := e.getReq(&allotpb.GetCapacityRequest{ClientId: "a", Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 70, Has: a}}}).GetResponse()[0].GetGets()
	if ra.GetCapacity() != 70 {
		t.Fatalf("learning mode did not echo a's lease: %v", ra.GetCapacity())
	}
	// A lying client can take at most what is left of the predecessor's
	// ceiling: the total stays within capacity.
	liar := &allotpb.Lease{Capacity: 1e9, ExpiryTime: timestamppb.New(time.Now().Add(time.Minute))}
	rl := e.getReq(&allotpb.GetCapacityRequest{ClientId: "liar", Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 1e9, Has: liar}}}).GetResponse()[0].GetGets()
	if total := rl.GetCapacity() + ra.GetCapacity() + b.GetCapacity(); total > 100 {
		t.Fatalf("learning mode granted %v in total (liar %v), capacity 100", total, rl.GetCapacity())
	}
}

// TestLearningWithoutSummary: a record without per-resource summaries (as
// written before they existed) gives Doorman's learning mode: reported
// leases are echoed, new clients get nothing until learning ends.
func TestLearningWithoutSummary(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: coordinator.DefaultStateBucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec := fmt.Sprintf(`{"node":"root","term":1,"horizon":%q}`, time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano))
	if _, err := kv.Put(ctx, "root.leases", []byte(rec)); err != nil {
		t.Fatal(err)
	}
	set := config.NewSet(1, []*config.Template{tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)}, nil)
	set.Templates()[0].LearningModeDuration = 10 * time.Second
	coordtest.Start(t, nc, coordinator.Options{Templates: sources.StaticTemplates(set), Term: 2, RoundInterval: coordinator.NoRoundInterval})
	e := &env{t: t, nc: nc}
	if got := e.get("new", map[string]float64{"db": 30}).GetResponse()[0].GetGets().GetCapacity(); got != 0 {
		t.Fatalf("unknown predecessor leases: new client got %v, want 0", got)
	}
	held := &allotpb.Lease{Capacity: 60, ExpiryTime: timestamppb.New(time.Now().Add(30 * time.Second))}
	got := e.getReq(&allotpb.GetCapacityRequest{ClientId: "old", Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: 80, Has: held}}}).GetResponse()[0].GetGets().GetCapacity()
	if got != 60 {
		t.Fatalf("reported lease of 60 echoed as %v", got)
	}
	// The record now carries our term and a ceiling for db.
	entry, err := kv.Get(ctx, "root.leases")
	if err != nil {
		t.Fatal(err)
	}
	var h allotpb.LeaseHorizon
	if err := wire.Unmarshal(wire.JSON, entry.Value(), &h); err != nil {
		t.Fatal(err)
	}
	if h.GetTerm() != 2 || h.GetResources()["db"].GetCeiling() < 60 {
		t.Fatalf("record after takeover: %s", entry.Value())
	}
	if h.GetComplete() {
		t.Fatalf("record claims completeness while unknown leases may be out: %s", entry.Value())
	}
	// A coordinator with a lower term refuses to start over this record.
	old, _ := coordinator.New(nc, coordinator.Options{Templates: sources.StaticTemplates(set), Term: 1})
	if err := old.Start(ctx); err == nil {
		old.Stop()
		t.Fatal("a coordinator with a lower term took over the record")
	}
}

// A record whose horizon passed skips learning; one written with a
// horizon already in the past is an edit no leader makes: learning.
func TestHorizonInPastSkipsLearning(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: coordinator.DefaultStateBucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	// A leader writes a horizon no earlier than the time of the write; this
	// one has passed by the time the successor starts (no clock skew): the
	// successor's clock is a second on.
	old := fmt.Sprintf(`{"node":"root","term":1,"horizon":%q}`, time.Now().Add(100*time.Millisecond).UTC().Format(time.RFC3339Nano))
	if _, err := kv.Put(ctx, "root.leases", []byte(old)); err != nil {
		t.Fatal(err)
	}
	set := config.NewSet(1, []*config.Template{tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)}, nil)
	set.Templates()[0].LearningModeDuration = 10 * time.Second
	coordtest.Start(t, nc, coordinator.Options{Templates: sources.StaticTemplates(set), ClockSkew: coordinator.NoClockSkew,
		Now: func() time.Time { return time.Now().Add(time.Second) }})
	e := &env{t: t, nc: nc}
	if got := e.get("a", map[string]float64{"db": 30}).GetResponse()[0].GetGets().GetCapacity(); got != 30 {
		t.Fatalf("horizon in the past: got %v, want 30 without learning", got)
	}
	// The coordinator recorded a new horizon covering the lease it issued.
	entry, err := kv.Get(ctx, "root.leases")
	if err != nil {
		t.Fatal(err)
	}
	var h allotpb.LeaseHorizon
	if err := wire.Unmarshal(wire.JSON, entry.Value(), &h); err != nil {
		t.Fatal(err)
	}
	if !h.GetHorizon().AsTime().After(time.Now().Add(9 * time.Second)) {
		t.Fatalf("horizon %v does not cover a 10s lease", h.GetHorizon().AsTime())
	}
}

func TestMicroDiscovery(t *testing.T) {
	e := start(t, coordinator.Options{})
	for _, subj := range []string{"$SRV.PING.allot", "$SRV.INFO.allot", "$SRV.STATS.allot"} {
		m := e.reqJSON(subj, "")
		if !strings.Contains(string(m.Data), `"name":"allot"`) {
			t.Fatalf("%s: %s", subj, m.Data)
		}
	}
	m := e.reqJSON("$SRV.INFO.allot", "")
	for _, s := range []string{`"allot.root.capacity.*"`, `"allot.root.server.get"`, `"queue_group":""`} {
		if !strings.Contains(string(m.Data), s) {
			t.Fatalf("INFO lacks %s: %s", s, m.Data)
		}
	}
}
