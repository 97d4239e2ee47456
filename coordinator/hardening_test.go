package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Regression tests of the lease record's faults (deleted, foreign,
// lapsed, racing) through the real path: an embedded NATS server with
// JetStream, the real state bucket, real requests.

func fairSet(capacity float64) coordinator.TemplateSource {
	t := tmpl("*", capacity, allotpb.Algorithm_FAIR_SHARE)
	t.LearningModeDuration = t.LeaseLength
	return sources.StaticTemplates(config.NewSet(1, []*config.Template{t}, nil))
}

func stateKV(t *testing.T, nc *nats.Conn) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), coordinator.DefaultStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func readRecord(t *testing.T, kv jetstream.KeyValue) (*allotpb.LeaseHorizon, error) {
	t.Helper()
	e, err := kv.Get(context.Background(), "root.leases")
	if err != nil {
		return nil, err
	}
	var h allotpb.LeaseHorizon
	if err := protojson.Unmarshal(e.Value(), &h); err != nil {
		t.Fatal(err)
	}
	return &h, nil
}

// A leader whose record is deleted writes it again (it knows the
// truth) and its leases never turn zero-length.
func TestDeletedRecordIsWrittenAgain(t *testing.T) {
	for _, purge := range []bool{false, true} {
		t.Run(fmt.Sprint("purge=", purge), func(t *testing.T) {
			e := start(t, coordinator.Options{Templates: fairSet(60)})
			kv := stateKV(t, e.nc)
			e.get("a", map[string]float64{"r": 10})
			var err error
			if purge {
				err = kv.Purge(context.Background(), "root.leases")
			} else {
				err = kv.Delete(context.Background(), "root.leases")
			}
			if err != nil {
				t.Fatal(err)
			}
			poll.Until(t, 30*time.Second, "the record to be written again", func() bool {
				h, err := readRecord(t, kv)
				return err == nil && h.GetTerm() == 1
			})
			for k := range 5 {
				g := e.get(fmt.Sprint("c", k), map[string]float64{"r": 10}).GetResponse()[0].GetGets()
				if left := time.Until(g.GetExpiryTime().AsTime()); g.GetCapacity() != 10 || left < 5*time.Second {
					t.Fatalf("client %d got %v for %v after the record was deleted", k, g.GetCapacity(), left)
				}
			}
		})
	}
}

// The same when the whole state bucket is deleted.
func TestDeletedStateBucketIsRecreated(t *testing.T) {
	e := start(t, coordinator.Options{Templates: fairSet(60)})
	e.get("a", map[string]float64{"r": 10})
	js, _ := jetstream.New(e.nc)
	if err := js.DeleteKeyValue(context.Background(), coordinator.DefaultStateBucket); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the bucket and record to be recreated", func() bool {
		kv, err := js.KeyValue(context.Background(), coordinator.DefaultStateBucket)
		if err != nil {
			return false
		}
		_, err = readRecord(t, kv)
		return err == nil
	})
	if g := e.get("b", map[string]float64{"r": 10}).GetResponse()[0].GetGets(); g.GetCapacity() != 10 {
		t.Fatalf("b got %v", g.GetCapacity())
	}
}

// A successor that finds the record deleted (a marker left) does
// not take it for a new deployment: it learns, so a newcomer gets nothing
// of what the predecessor's clients may hold.
func TestDeletedRecordIsNotANewDeployment(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	opts := coordinator.Options{Templates: fairSet(100), RoundInterval: 5 * time.Millisecond}
	c1, err := coordinator.New(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, nc: nc, c: c1}
	if got := e.get("holder", map[string]float64{"r": 100}).GetResponse()[0].GetGets().GetCapacity(); got != 100 {
		t.Fatalf("holder got %v", got)
	}
	c1.Stop()
	if err := stateKV(t, nc).Delete(context.Background(), "root.leases"); err != nil {
		t.Fatal(err)
	}
	opts.Term = 2
	e.c = coordtest.Start(t, nc, opts)
	if got := e.get("newcomer", map[string]float64{"r": 100}).GetResponse()[0].GetGets().GetCapacity(); got != 0 {
		t.Fatalf("newcomer got %v while the holder's 100 of 100 may be outstanding", got)
	}
}

// A record with a term no election can have issued is reported
// and ignored (learning as after an unknown predecessor), never a
// permanent refusal to serve.
func TestForgedTermIsIgnored(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	js, _ := jetstream.New(nc)
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: coordinator.DefaultStateBucket})
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := protojson.Marshal(&allotpb.LeaseHorizon{Term: math.MaxUint64, Complete: true, Horizon: timestamppb.New(time.Now().Add(time.Hour))})
	if _, err := kv.Put(context.Background(), "root.leases", forged); err != nil {
		t.Fatal(err)
	}
	opts := coordinator.Options{Templates: fairSet(100), RoundInterval: 5 * time.Millisecond, Term: 7,
		TermBound: func(context.Context) (uint64, error) { return 7, nil }}
	c := coordtest.Start(t, nc, opts)
	e := &env{t: t, nc: nc, c: c}
	// Learning (the forged record is treated as damaged): served, with 0.
	if g := e.get("a", map[string]float64{"r": 10}).GetResponse()[0].GetGets(); g == nil || g.GetCapacity() != 0 {
		t.Fatalf("a got %v; want a lease of 0 while learning", g)
	}
	h, err := readRecord(t, kv)
	if err != nil || h.GetTerm() != 7 {
		t.Fatalf("record after takeover: %v %v", h, err)
	}
	m := e.reqJSON("$SRV.STATS.allot", "")
	if !strings.Contains(string(m.Data), `"forged_records":1`) {
		t.Fatalf("STATS do not report the forged record: %s", m.Data)
	}
}

// A coordinator whose leadership lapsed (Valid false) answers
// nothing, not even errors, and says it no longer serves.
func TestInvalidLeaderIsSilent(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	var valid atomic.Bool
	valid.Store(true)
	c := coordtest.Start(t, nc, coordinator.Options{Templates: fairSet(100), RoundInterval: 5 * time.Millisecond,
		Valid: valid.Load})
	e := &env{t: t, nc: nc, c: c}
	e.get("a", map[string]float64{"r": 10})
	valid.Store(false)
	for _, body := range []string{`{"client_id":"b","resource":[{"resource_id":"r","wants":5}]}`, `{malformed`} {
		if m, err := nc.Request(coordinator.Subject("root", "capacity.get"), []byte(body), 300*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("a lapsed leader answered %q: %v %v", body, m, err)
		}
	}
	select {
	case <-c.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("Done not closed")
	}
	if c.Err() == nil {
		t.Fatal("Err is nil")
	}
}

// A get and a release published back to back on one connection
// are applied in that order: the client holds nothing afterwards, and a
// newcomer gets the capacity.
func TestReleaseAfterGetKeepsOrder(t *testing.T) {
	e := start(t, coordinator.Options{Templates: fairSet(100), RoundInterval: coordinator.NoRoundInterval})
	// Half the gets are large enough to be decoded on the bulk lane: the
	// release that follows must still be applied after them.
	var pad strings.Builder
	for k := range 60 {
		fmt.Fprintf(&pad, `,{"resource_id":"pad-%d","wants":0}`, k)
	}
	for trial := range 40 {
		extra := ""
		if trial%2 == 1 {
			extra = pad.String()
		}
		id := fmt.Sprint("c", trial)
		getSub, relSub := nats.NewInbox(), nats.NewInbox()
		got := make(chan *nats.Msg, 2)
		for _, in := range []string{getSub, relSub} {
			sub, err := e.nc.ChanSubscribe(in, got)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
		}
		body := fmt.Sprintf(`{"client_id":%q,"resource":[{"resource_id":"r","wants":100}%s]}`, id, extra)
		if trial == 1 && wire.DecodeInline(wire.JSON, len(body)) {
			t.Fatalf("a %d-byte request is decoded inline; the test wants the bulk lane", len(body))
		}
		if err := e.nc.PublishRequest(coordinator.Subject("root", "capacity.get"), getSub, []byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := e.nc.PublishRequest(coordinator.Subject("root", "capacity.release"), relSub, []byte(fmt.Sprintf(`{"client_id":%q,"resource_id":["r"]}`, id))); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			select {
			case <-got:
			case <-time.After(5 * time.Second):
				t.Fatalf("trial %d: no reply", trial)
			}
		}
		if g := e.get("newcomer", map[string]float64{"r": 100}).GetResponse()[0].GetGets().GetCapacity(); g != 100 {
			t.Fatalf("trial %d: newcomer got %v of 100: the release was applied before the get", trial, g)
		}
		e.get("newcomer", map[string]float64{"r": 0})
		rel := &allotpb.ReleaseCapacityRequest{ClientId: "newcomer", ResourceId: []string{"r"}}
		data, _ := proto.Marshal(rel)
		msg := nats.NewMsg(coordinator.Subject("root", "capacity.release"))
		msg.Data, msg.Header = data, nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}
		if _, err := e.nc.RequestMsg(msg, answerWithin); err != nil {
			t.Fatal(err)
		}
	}
}

// Client records per node are capped with a clear 429.
func TestMaxClients(t *testing.T) {
	e := start(t, coordinator.Options{Templates: fairSet(100), MaxClients: 3})
	for k := range 3 {
		e.get(fmt.Sprint("c", k), map[string]float64{"r": 1})
	}
	m := e.reqJSON(coordinator.Subject("root", "capacity.get"), `{"client_id":"c9","resource":[{"resource_id":"r","wants":1}]}`)
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "429" || !strings.Contains(m.Header.Get("Nats-Service-Error"), "--max-clients") {
		t.Fatalf("code %q: %s", code, m.Header.Get("Nats-Service-Error"))
	}
	// A known client is still served.
	if g := e.get("c1", map[string]float64{"r": 1}).GetResponse()[0].GetGets().GetCapacity(); g != 1 {
		t.Fatalf("known client got %v", g)
	}
}

// However many resources clients name, the record stays within
// its bound and complete where it can be: resources past it are served
// unlisted and the record says it is incomplete, rather than dropping
// every summary.
func TestRecordStaysBounded(t *testing.T) {
	e := start(t, coordinator.Options{Templates: fairSet(100)})
	e.get("victim", map[string]float64{"db": 10})
	pad := strings.Repeat("y", 250)
	for k := range 3 {
		req := &allotpb.GetCapacityRequest{ClientId: fmt.Sprint("spam", k)}
		for j := range 1000 {
			req.Resource = append(req.Resource, &allotpb.ResourceRequest{ResourceId: fmt.Sprintf("%s-%d-%d", pad, k, j), Wants: 1})
		}
		// A grant waits at most 500 ms for the record that lists its
		// resource; on a loaded machine that write (hundreds of KiB) can
		// take longer, and the grant is then 0 until the next request.
		poll.Until(t, 10*time.Second, "every spam resource granted", func() bool {
			for _, r := range e.getReq(req).GetResponse() {
				if r.GetGets().GetCapacity() != 1 {
					t.Logf("spam resource %s got %v %s", r.GetResourceId()[240:], r.GetGets().GetCapacity(), r.GetError())
					return false
				}
			}
			return true
		})
	}
	kv := stateKV(t, e.nc)
	var h *allotpb.LeaseHorizon
	poll.Until(t, 30*time.Second, "the record to list db", func() bool {
		var err error
		h, err = readRecord(t, kv)
		return err == nil && h.GetResources()["db"] != nil
	})
	entry, _ := kv.Get(context.Background(), "root.leases")
	// 512 KiB holds about 890 entries of these 250-byte ids at the
	// ledger's bound on an entry's size.
	if n := len(entry.Value()); n > 512<<10 || h.GetComplete() || len(h.GetResources()) < 850 {
		t.Fatalf("record: %d bytes, complete %v, %d resources listed", n, h.GetComplete(), len(h.GetResources()))
	}
}
