package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/dashboard"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/status"
)

// TestEventStream reads the server-sent events as a browser would: the
// first carries the chart's history (reset), later ones only newer
// samples, each with the coordinator's snapshot of the asked resource.
func TestEventStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := startStack(t, ctx, 100*time.Millisecond, time.Minute)
	client(t, st.nc, "alpha", 30)
	// Wait for the grant and a few samples of it.
	poll.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		ev := getEvent(t, st.url+"snapshot?resource=db")
		if n := len(ev.Points); n < 2 || ev.Points[n-1].Granted != 30 || ev.Points[n-2].Granted != 30 {
			return fmt.Errorf("no samples of alpha's grant: %+v", ev.Points)
		}
		return nil
	})

	next := openStream(t, ctx, st.url+"events?resource=db&top=5")
	var events []dashboard.Event
	var last int64
	for len(events) < 4 {
		ev, _ := next()
		for _, p := range ev.Points {
			if p.T <= last {
				t.Fatalf("event %d repeats or reorders samples: %d after %d", len(events), p.T, last)
			}
			last = p.T
		}
		events = append(events, ev)
	}
	first := events[0]
	if !first.Reset || len(first.Points) < 2 || first.Top != 5 || first.HistoryMS != 60_000 || first.Quota == nil || first.Domain == nil {
		t.Fatalf("first event: reset %v, %d points, top %d, history %d, quota %v, domain %v", first.Reset, len(first.Points), first.Top, first.HistoryMS, first.Quota, first.Domain)
	}
	for _, ev := range events[1:] {
		if ev.Reset {
			t.Fatal("a later event resets the chart")
		}
	}
	for k, ev := range events {
		r := ev.Snapshot.Resource
		if r == nil || r.Granted != 30 || len(r.Top) != 1 || r.Top[0].ID != "alpha" {
			t.Fatalf("resource in event %d: %+v", k, r)
		}
		if p := ev.Points; len(p) > 0 && p[len(p)-1].Granted != 30 {
			t.Fatalf("chart sample in event %d: %+v", k, p[len(p)-1])
		}
	}
}

// TestBadQuery: bad parameters get 400 with the reason.
func TestBadQuery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := startStack(t, ctx, time.Second, time.Minute)
	for _, q := range []string{"top=-1", "top=1001", "top=x", "q=" + strings.Repeat("a", 300)} {
		for _, path := range []string{"events", "snapshot"} {
			resp, err := http.Get(st.url + path + "?" + q)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || len(body) == 0 {
				t.Fatalf("%s?%.20s: %d %s", path, q, resp.StatusCode, body)
			}
		}
	}
	if ev := getEvent(t, st.url+"snapshot?resource=db"); ev.Snapshot == nil || ev.Snapshot.Node != "root" {
		t.Fatalf("snapshot: %+v", ev)
	}
}

// getEvent fetches one event from the snapshot endpoint at url.
func getEvent(t *testing.T, url string) dashboard.Event {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ev dashboard.Event
	if err := json.NewDecoder(resp.Body).Decode(&ev); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return ev
}

// TestQuotaNamespaces: namespaces reported in the STATS of a serving
// quota server of the node (the allot-quota micro service) are listed with
// their event counts (and, in shadow mode, the takes the bucket would have
// refused); those of another node, or of a server not serving, are not.
func TestQuotaNamespaces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := startStack(t, ctx, 100*time.Millisecond, time.Minute)
	for _, data := range []string{
		`{"node":"root","partition":1,"serving":true,"events":{"logins":{"served":5,"timeout":1},"api":{"served":2}},"shadow_would_refuse_by_namespace":{"logins":4}}`,
		`{"node":"other","partition":0,"serving":true,"events":{"elsewhere":{"served":1}}}`,
		`{"node":"root","partition":0,"serving":false,"events":{"stale":{"served":1}}}`,
	} {
		fakeStats(t, st.nc, dashboard.QuotaService, data)
	}
	var ev dashboard.Event
	poll.For(t, 20*time.Second, 200*time.Millisecond, func() error {
		if ev = getEvent(t, st.url+"snapshot"); len(ev.Quota) > 2 {
			t.Fatalf("quota namespaces %+v", ev.Quota)
		} else if len(ev.Quota) < 2 {
			return fmt.Errorf("quota namespaces %+v", ev.Quota)
		}
		return nil
	})
	if q := ev.Quota[0]; q.Name != "api" || q.Partition != 1 || q.Events["served"] != 2 || ev.Quota[1].Events["timeout"] != 1 ||
		ev.Quota[1].Events["shadow_would_refuse"] != 4 || q.Events["shadow_would_refuse"] != 0 {
		t.Fatalf("quota namespaces %+v", ev.Quota)
	}
}

// TestDomainPartitions: the partitions reported in the STATS of the
// domain service (domainserver.ServiceName) that serve on the node are
// listed, sorted by partition, with their leader, term, learning state,
// holds and counters; those of another node, or of a leader no longer
// serving, are not.
func TestDomainPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := startStack(t, ctx, 100*time.Millisecond, time.Minute)
	for _, data := range []string{
		`{"node":"root","server_id":"b","partition":1,"term":3,"serving":true,"resources":2,"holds":4,"copies_held":7,"transfers":1,"requests":9,"requests_rejected":2,"reserves":5,"reserves_refused":1,"holds_expired":3,"learning":false}`,
		`{"node":"root","server_id":"a","partition":0,"term":2,"serving":true,"learning":true,"learning_until":"2026-11-23T14:28:01Z"}`,
		`{"node":"other","server_id":"c","partition":2,"term":1,"serving":true}`,
		`{"node":"root","server_id":"d","partition":3,"term":1,"serving":false}`,
	} {
		fakeStats(t, st.nc, domainserver.ServiceName, data)
	}
	want := []dashboard.DomainPartition{
		{Partition: 0, ServerID: "a", Term: 2, Learning: true, LearningUntil: time.Date(2026, 11, 23, 14, 28, 1, 0, time.UTC)},
		{Partition: 1, ServerID: "b", Term: 3, Resources: 2, Holds: 4, CopiesHeld: 7, Transfers: 1,
			Counts: domainserver.Counts{Requests: 9, Rejected: 2, Reserves: 5, ReservesRefused: 1, Expired: 3}},
	}
	var ev dashboard.Event
	poll.For(t, 20*time.Second, 200*time.Millisecond, func() error {
		if ev = getEvent(t, st.url+"snapshot"); len(ev.Domain) > len(want) {
			t.Fatalf("domain partitions %+v", ev.Domain)
		} else if len(ev.Domain) < len(want) {
			return fmt.Errorf("domain partitions %+v", ev.Domain)
		}
		return nil
	})
	for i := range want {
		got := ev.Domain[i]
		if got.LearningUntil.Equal(want[i].LearningUntil) {
			got.LearningUntil = want[i].LearningUntil // the same instant, whatever its location
		}
		if got != want[i] {
			t.Fatalf("domain partition %d: got %+v, want %+v", i, got, want[i])
		}
	}
}

// fakeStats registers, until the test ends, an instance of the micro
// service named service whose STATS carry data (JSON) in its one
// endpoint's data.
func fakeStats(t *testing.T, nc *nats.Conn, service, data string) {
	t.Helper()
	svc, err := micro.AddService(nc, micro.Config{Name: service, Version: "0.1.0",
		StatsHandler: func(*micro.Endpoint) any { return json.RawMessage(data) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AddEndpoint("op", micro.HandlerFunc(func(micro.Request) {})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
}

// TestStreamsEndWithRun: when Run ends (the process shuts down), open
// event streams end too, so that http.Server.Shutdown is not held up by
// them.
func TestStreamsEndWithRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := startStack(t, ctx, 100*time.Millisecond, time.Minute)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, st.url+"events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	st.stopRun()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		ended <- err
	}()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("stream ended with %v, want a clean end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream outlived the dashboard's Run")
	}
}

// TestTenThousandClaimants: with 10,000 claimants on a resource an event
// lists only the asked top N (and a search's matches among all of them),
// so what a page receives stays small.
func TestTenThousandClaimants(t *testing.T) {
	const n = 10_000
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := startStack(t, ctx, 200*time.Millisecond, time.Minute)
	inbox := st.nc.NewRespInbox()
	replies := make(chan *nats.Msg, n)
	sub, err := st.nc.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The requests say they wait as long as the test does: without, the
	// coordinator drops those that waited past its default (2s), which a
	// busy machine's -race run reaches before it has answered 10,000.
	hdr := nats.Header{wire.HeaderTimeout: {strconv.FormatInt(time.Minute.Milliseconds(), 10)}}
	for i := range n {
		body := fmt.Sprintf(`{"client_id":"client-%05d","resource":[{"resource_id":"db","wants":%d}]}`, i, 1+i%10)
		if err := st.nc.PublishMsg(&nats.Msg{Subject: coordinator.Subject("root", "capacity.get"), Reply: inbox, Header: hdr, Data: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		select {
		case m := <-replies:
			if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
				t.Fatalf("error %s: %s", code, m.Header.Get("Nats-Service-Error"))
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d requests answered", i, n)
		}
	}
	ev, size := openStream(t, ctx, st.url+"events?resource=db&top=50&q=CLIENT-09")()
	r := ev.Snapshot.Resource
	// These claimants never refresh: how much each holds by now depends on
	// how the requests fell into rounds, but every record is still kept.
	if r == nil || r.Claimants != n || r.Matching != 1000 || len(r.Top) != 50 || r.Wants > 55_000 || r.Granted > 100+1e-6 {
		t.Fatalf("resource: %d claimants, %d matching, %d listed, wants %v, granted %v", r.Claimants, r.Matching, len(r.Top), r.Wants, r.Granted)
	}
	for k, c := range r.Top {
		if !strings.HasPrefix(c.ID, "client-09") || k > 0 && c.Has > r.Top[k-1].Has {
			t.Fatalf("listed claimant %d: %+v after %+v", k, c, r.Top[max(k-1, 0)])
		}
	}
	if size > 64<<10 {
		t.Fatalf("an event of %d bytes for 50 claimants", size)
	}
}

// openStream opens the event stream at url and returns a function that
// reads its next event (and the size of its JSON), failing the test if
// the stream ends.
func openStream(t *testing.T, ctx context.Context, url string) func() (dashboard.Event, int) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return func() (dashboard.Event, int) {
		t.Helper()
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev dashboard.Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatal(err)
			}
			return ev, len(line)
		}
		t.Fatalf("the stream ended: %v", sc.Err())
		return dashboard.Event{}, 0
	}
}

// TestAssetsSelfContained: the page loads nothing from elsewhere (no CDN,
// works offline): every asset is served from the binary, and none names
// another host.
func TestAssetsSelfContained(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := startStack(t, ctx, time.Second, time.Minute)
	for _, name := range []string{"", "app.js", "style.css"} {
		resp, err := http.Get(st.url + name)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("%q: %d", name, resp.StatusCode)
		}
		for _, ref := range []string{"http:", "https:", "//cdn", "@import"} {
			if strings.Contains(string(body), ref) {
				t.Errorf("%q refers to %q", name, ref)
			}
		}
	}
}

// instantSource answers snapshots whose time moves on only every third
// call, as a coordinator answers two samples taken within one
// millisecond when the sampler catches up on a late tick.
type instantSource struct {
	mu sync.Mutex
	n  int
	t0 time.Time
}

func (s *instantSource) Snapshot(context.Context, string, int, string) (*status.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	at := s.t0.Add(time.Duration(s.n/3) * time.Millisecond)
	return &status.Snapshot{Time: at, Node: "root", Resources: []status.ResourceView{{ID: "db", Capacity: 100, Granted: 30}}}, nil
}

// TestSamplesOfOneInstantAreOne: a snapshot no newer than the chart's
// newest sample is not charted again, so that the chart's samples, and
// the stream's, stay strictly in time order.
func TestSamplesOfOneInstantAreOne(t *testing.T) {
	src := &instantSource{t0: time.Now()}
	url, _ := serveDashboard(t, dashboard.Options{Source: src, Interval: 10 * time.Millisecond, History: time.Minute})
	var pts []dashboard.Point
	poll.Until(t, 20*time.Second, "six samples", func() bool {
		pts = getEvent(t, url+"snapshot?resource=db").Points
		return len(pts) >= 6
	})
	for i := 1; i < len(pts); i++ {
		if pts[i].T <= pts[i-1].T {
			t.Fatalf("sample %d at %d after %d", i, pts[i].T, pts[i-1].T)
		}
	}
}
