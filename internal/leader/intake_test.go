package leader_test

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/leader"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/wire"
)

// blocked is a handler that holds every request until released, and
// records the order in which it got them.
type blocked struct {
	mu      sync.Mutex
	got     []string
	release chan struct{}
}

func newBlocked() *blocked { return &blocked{release: make(chan struct{})} }

func (b *blocked) handle(m micro.Request) {
	b.mu.Lock()
	b.got = append(b.got, string(m.Data()))
	b.mu.Unlock()
	<-b.release
	_ = m.Respond(m.Data())
}

func (b *blocked) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.got...)
}

// known marks requests with the Allot-Client header as a holder's.
func known(_, client string) leader.Class {
	if client != "" {
		return leader.ClassKnown
	}
	return leader.ClassNewcomer
}

func msg(subject, data string, hdr ...string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(data)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	return m
}

// asyncRequest sends m as a request and delivers its answer, or error, on
// the channel returned.
func asyncRequest(nc *nats.Conn, m *nats.Msg) <-chan *nats.Msg {
	out := make(chan *nats.Msg, 1)
	go func() {
		r, err := nc.RequestMsg(m, wait)
		if err != nil {
			r = &nats.Msg{Header: nats.Header{"Test-Error": {err.Error()}}}
		}
		out <- r
	}()
	return out
}

// Past the in-flight bound a request is refused at once with 503 and a
// retry_after, never queued; known clients' requests still have the
// reserve, and go first.
func TestIntakeRefusesPastTheBoundAndServesHoldersFirst(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run("plain="+strconv.FormatBool(plain), func(t *testing.T) {
			s := natstest.Server(t)
			b := newBlocked()
			sp := spec(nil, leader.Endpoint{Name: "e", Subject: "test.e", Plain: plain, Handle: b.handle})
			sp.Limits = leader.Limits{MaxInFlight: 4, Reserve: 1, RetryAfter: 400 * time.Millisecond}
			sp.Classify = known
			sp.ErrorBody = func(_ nats.Header, code int, text string, retry time.Duration) []byte {
				return []byte(strconv.Itoa(code) + " " + retry.String())
			}
			term := startTerm(t, natstest.Conn(t, s), sp)
			cl := natstest.Conn(t, s)
			var answers []<-chan *nats.Msg
			send := func(data string, hdr ...string) {
				answers = append(answers, asyncRequest(cl, msg("test.e", data, hdr...)))
				poll.Until(t, wait, "the request to be taken up", func() bool {
					d, _ := term.Counts()
					return d == uint64(len(answers))
				})
			}
			// n1 is handled (blocked), n2 and n3 wait: the newcomers' 3.
			send("n1")
			poll.Until(t, wait, "n1 to be handled", func() bool { return len(b.seen()) == 1 })
			send("n2")
			send("n3")
			send("n4") // refused: newcomers' share full
			send("k1", leader.HeaderClient, "c1")
			send("k2", leader.HeaderClient, "c2") // refused: all 4 in flight
			for _, i := range []int{3, 5} {
				r := <-answers[i]
				ra, _ := strconv.Atoi(r.Header.Get(leader.HeaderRetryAfter))
				if r.Header.Get(micro.ErrorCodeHeader) != "503" || ra < 300 || ra > 500 || len(r.Data) == 0 || r.Data[0] != '5' {
					t.Fatalf("request %d: headers %v body %q: want a 503 with retry after 300-500ms", i, r.Header, r.Data)
				}
			}
			close(b.release)
			for i, a := range answers {
				if i == 3 || i == 5 {
					continue
				}
				if r := <-a; r.Header.Get(micro.ErrorCodeHeader) != "" || r.Header.Get("Test-Error") != "" {
					t.Fatalf("request %d: %v", i, r.Header)
				}
			}
			if got := b.seen(); len(got) != 4 || got[0] != "n1" || got[1] != "k1" || got[2] != "n2" || got[3] != "n3" {
				t.Fatalf("handled %v: want n1, then the holder's k1, then n2, n3", got)
			}
			if st := term.Intake(); st.Refused != 2 || st.InFlight != 0 {
				t.Fatalf("intake %+v", st)
			}
		})
	}
}

// A request whose sender's time-out passes while it waits is dropped
// unanswered; the announced time-out counts, else Limits.MaxAge.
func TestIntakeDropsWhatNobodyWaitsFor(t *testing.T) {
	s := natstest.Server(t)
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	b := newBlocked()
	sp := spec(nil, leader.Endpoint{Name: "e", Subject: "test.e", Handle: b.handle})
	sp.Limits.MaxAge = 10 * time.Second
	sp.Now = clock
	term := startTerm(t, natstest.Conn(t, s), sp)
	cl := natstest.Conn(t, s)
	first := asyncRequest(cl, msg("test.e", "first"))
	poll.Until(t, wait, "the first request to be handled", func() bool { return len(b.seen()) == 1 })
	inbox := nats.NewInbox()
	for _, m := range []*nats.Msg{
		msg("test.e", "short", leader.HeaderTimeout, "1000"), // waits 1s
		msg("test.e", "long", leader.HeaderTimeout, "60000"), // 60s
		msg("test.e", "unsaid"),                              // MaxAge: 10s
		msg("test.e", "bad", leader.HeaderTimeout, "soon"),   // MaxAge
	} {
		m.Reply = inbox
		if err := cl.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, wait, "all to be taken up", func() bool { d, _ := term.Counts(); return d == 5 })
	mu.Lock()
	now = now.Add(20 * time.Second) // past short's, unsaid's and bad's time-outs, not long's
	mu.Unlock()
	close(b.release)
	<-first
	poll.Until(t, wait, "all to be handled", func() bool { d, h := term.Counts(); return d == h })
	if got := b.seen(); len(got) != 2 || got[1] != "long" {
		t.Fatalf("handled %v: want first and long only", got)
	}
	if st := term.Intake(); st.Expired != 3 || st.InFlight != 0 {
		t.Fatalf("intake %+v", st)
	}
}

// A request over the size limit gets 413 before any handler sees it; a
// tenant over its rate 429 with the time its rate admits another, while
// other tenants are served.
func TestIntakeRefusesTooLargeAndTenantFloods(t *testing.T) {
	s := natstest.Server(t)
	var handled atomic.Int64
	sp := spec(nil, leader.Endpoint{Name: "e", Subject: "t.*.e", Handle: func(m micro.Request) { handled.Add(1); _ = m.Respond(nil) },
		CheckSize: func(_ wire.Encoding, n int) error {
			if n > 8 {
				return errors.New("over 8 bytes")
			}
			return nil
		},
		Tenant: func(subject string) string { return subject[2:3] }})
	sp.Limits.TenantRate = 0.001 // one per 1000s, in bursts of 1
	term := startTerm(t, natstest.Conn(t, s), sp)
	cl := natstest.Conn(t, s)
	code := func(subject, data string) (string, int) {
		t.Helper()
		r, err := cl.RequestMsg(msg(subject, data), wait)
		if err != nil {
			t.Fatal(err)
		}
		ra, _ := strconv.Atoi(r.Header.Get(leader.HeaderRetryAfter))
		return r.Header.Get(micro.ErrorCodeHeader), ra
	}
	if c, _ := code("t.a.e", "123456789"); c != "413" {
		t.Fatalf("9 bytes: code %q, want 413", c)
	}
	if c, _ := code("t.a.e", "1"); c != "" {
		t.Fatalf("tenant a's first: code %q", c)
	}
	if c, ra := code("t.a.e", "2"); c != "429" || ra < 900_000 {
		t.Fatalf("tenant a's second: code %q retry after %dms, want 429 after about 1000s", c, ra)
	}
	if c, _ := code("t.b.e", "1"); c != "" {
		t.Fatalf("tenant b's first: code %q", c)
	}
	if st := term.Intake(); handled.Load() != 2 || st.TooLarge != 1 || st.Limited != 1 {
		t.Fatalf("handled %d, intake %+v", handled.Load(), st)
	}
}

// Under a flood far past the bound, every request is answered or refused:
// none is left to time out.
func TestIntakeLeavesNoRequestUnanswered(t *testing.T) {
	s := natstest.Server(t)
	sp := spec(nil, leader.Endpoint{Name: "e", Subject: "test.e", Handle: func(m micro.Request) {
		busy()
		_ = m.Respond(nil)
	}})
	sp.Limits.MaxInFlight = 16
	term := startTerm(t, natstest.Conn(t, s), sp)
	const n = 5000
	cl := natstest.Conn(t, s)
	inbox := nats.NewInbox()
	var ok, refused, other atomic.Int64
	if _, err := cl.Subscribe(inbox, func(m *nats.Msg) {
		switch m.Header.Get(micro.ErrorCodeHeader) {
		case "":
			ok.Add(1)
		case "503":
			refused.Add(1)
		default:
			other.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := cl.PublishRequest("test.e", inbox, nil); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, wait, "every request answered", func() bool { return ok.Load()+refused.Load()+other.Load() == n })
	if other.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("answered %d, refused %d, other %d", ok.Load(), refused.Load(), other.Load())
	}
	t.Logf("%d requests: %d answered, %d refused with 503; intake %+v", n, ok.Load(), refused.Load(), term.Intake())
}

// An Inline Deferred endpoint's requests are handled as they are taken
// up; each stays in flight (counted against the bound) until its product
// answers and releases it, and a released request serves a later one
// with nothing of its own left but what the product kept with it.
func TestInlineDeferredRequestsStayInFlightUntilReleased(t *testing.T) {
	s := natstest.Server(t)
	var mu sync.Mutex
	var queued []micro.Request
	inUse := map[*int]bool{} // what requests in flight keep (Keep)
	sp := spec(nil, leader.Endpoint{Name: "e", Subject: "test.e", Inline: true, Deferred: true, Handle: func(m micro.Request) {
		mu.Lock()
		defer mu.Unlock()
		r := m.(*leader.Request)
		k, _ := r.Kept().(*int)
		if k == nil {
			k = new(int)
			r.Keep(k)
		}
		if inUse[k] {
			t.Errorf("request %q keeps what a request in flight keeps", m.Data())
		}
		inUse[k] = true
		queued = append(queued, m)
	}})
	sp.Limits = leader.Limits{MaxInFlight: 4, Reserve: 1}
	term := startTerm(t, natstest.Conn(t, s), sp)
	cl := natstest.Conn(t, s)
	// answer answers and releases every queued request, echoing its
	// data and subject.
	answer := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range queued {
			if err := m.(*leader.Request).RespondMsg(&nats.Msg{Data: []byte(m.Subject() + ":" + string(m.Data()))}); err != nil {
				t.Error(err)
			}
			inUse[m.(*leader.Request).Kept().(*int)] = false
			leader.Release(m)
		}
		queued = nil
	}
	for round := range 3 {
		var answers []<-chan *nats.Msg
		for i := range 4 { // the 4th is past the newcomers' 3
			answers = append(answers, asyncRequest(cl, msg("test.e", strconv.Itoa(round*10+i))))
			poll.Until(t, wait, "the request to be taken up", func() bool { d, _ := term.Counts(); return d == uint64(round*4+i+1) })
		}
		if r := <-answers[3]; r.Header.Get(micro.ErrorCodeHeader) != "503" {
			t.Fatalf("round %d: the 4th got %v %q, want 503", round, r.Header, r.Data)
		}
		if st := term.Intake(); st.InFlight != 3 {
			t.Fatalf("round %d: %d in flight before the answers, want 3", round, st.InFlight)
		}
		answer()
		for i, a := range answers[:3] {
			if r, want := <-a, "test.e:"+strconv.Itoa(round*10+i); string(r.Data) != want {
				t.Fatalf("round %d: answer %q %v, want %q", round, r.Data, r.Header, want)
			}
		}
		if st := term.Intake(); st.InFlight != 0 {
			t.Fatalf("round %d: %d in flight after the answers", round, st.InFlight)
		}
		if d, h := term.Counts(); d != h {
			t.Fatalf("round %d: %d delivered, %d handled", round, d, h)
		}
	}
}

// A tenant within its request rate cannot take every newcomer's place in
// flight: half of them stay open to the other tenants, so that one
// tenant's burst, held up in a slow round, leaves another served.
func TestIntakeKeepsNewcomerPlacesForOtherTenants(t *testing.T) {
	s := natstest.Server(t)
	b := newBlocked()
	sp := spec(nil, leader.Endpoint{Name: "e", Subject: "t.*.e", Handle: b.handle, Tenant: func(subject string) string { return subject[2:3] }})
	sp.Limits = leader.Limits{MaxInFlight: 9, Reserve: 1, TenantRate: 100, TenantBurst: 100}
	term := startTerm(t, natstest.Conn(t, s), sp)
	cl := natstest.Conn(t, s)
	var answers []<-chan *nats.Msg
	send := func(subject, data string) {
		answers = append(answers, asyncRequest(cl, msg(subject, data)))
		poll.Until(t, wait, "the request to be taken up", func() bool {
			d, _ := term.Counts()
			return d == uint64(len(answers))
		})
	}
	// Tenant a's burst, all within its rate: 4 of the 8 newcomer places,
	// then 503s; without the bound it would take all 8 and b a 503.
	for i := range 8 {
		send("t.a.e", "a"+strconv.Itoa(i))
	}
	send("t.b.e", "b0")
	close(b.release)
	for i, a := range answers {
		want := ""
		if i >= 4 && i < 8 {
			want = "503"
		}
		if r := <-a; r.Header.Get(micro.ErrorCodeHeader) != want || r.Header.Get("Test-Error") != "" {
			t.Fatalf("request %d: %v, want code %q", i, r.Header, want)
		}
	}
	if st := term.Intake(); st.Refused != 4 || st.InFlight != 0 {
		t.Fatalf("intake %+v", st)
	}
}
