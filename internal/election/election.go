// Package election elects one leader per key on a JetStream key-value
// bucket, with per-key TTLs so a leader that disappears loses the key.
//
// The bucket (default "allot_election") keeps one revision per key
// (History 1) and has LimitMarkerTTL set, so that a key's expiry leaves a
// marker that watchers see. A candidate campaigns with kv.Create and a
// per-key TTL; the revision that won is its term, a fencing number that
// only grows (it is the stream sequence). The leader renews by publishing
// to $KV.<bucket>.<key> with a message TTL and an expected last sequence:
// kv.Update would drop the per-key TTL (nats.go issue #1994).
//
// A leader holds leadership until validUntil = (send time of its last
// successful renewal) + TTL − Margin, counted on its monotonic clock. The
// server counts the TTL from the time it stored the renewal, which is later,
// so the leader gives up before its key can expire and before anyone else
// can win. An ambiguous renewal (time-out, or a revision mismatch caused by
// an earlier timed-out renewal that did land) is resolved by reading the
// key back: the value carries a per-campaign nonce and a renewal counter,
// and the send time of each attempt is remembered. Transient errors are
// retried until validUntil.
//
// Followers watch the key and campaign as soon as they see a delete or
// purge marker (resignation or expiry), and also every TTL as a backstop
// for gaps in the watch.
package election

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/allot/allot/internal/jsretry"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/replica"
	"github.com/allot/allot/status"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults for Config.
const (
	DefaultBucket = subjects.ElectionBucket
	DefaultTTL    = replica.DefaultTTL
	DefaultMargin = 500 * time.Millisecond
	// MaxDefaultInterval caps the default RenewInterval and
	// CampaignInterval.
	MaxDefaultInterval = time.Second
	// ReplicatedTTL is the TTL to use when the election bucket has
	// replicas on several servers. Losing the server that leads the
	// bucket's stream stops every write to it until the others elect a
	// new stream leader: nats-server's raft waits a random 4–9 s (its
	// election timeout, not configurable) without hearing from the old
	// one. A leader bridges that gap only if its key outlives it: 9 s,
	// plus up to a renewal interval (1 s) since the last renewal, the
	// margin (0.5 s) and the first renewal attempt after the gap (up to
	// its 1 s time-out and the 0.25 s retry wait) make 11.75 s. With a
	// shorter TTL the leader lapses during the gap, and nobody can win
	// until the stream has a leader again: the node stops for up to about
	// the gap (4.5–6.5 s measured with 3 s).
	ReplicatedTTL = 12 * time.Second
)

// Config configures an Elector.
type Config struct {
	// Bucket is the election bucket. Default DefaultBucket.
	Bucket string
	// Key is the key contended for (a tree node name). Required.
	Key string
	// ID identifies this candidate (a coordinator's server id). Required.
	ID string
	// TTL is the per-key TTL: how long a silent leader's key survives.
	// Whole seconds, at least 1s (the server's granularity). Default 3s.
	TTL time.Duration
	// RenewInterval is how often the leader renews. Default TTL/3, at
	// most MaxDefaultInterval: a leader whose key has a long TTL still
	// renews every second, so that when the election stream stops taking
	// writes (its JetStream leader lost: 4–9 s) all but about a second of
	// the TTL is left to bridge the gap.
	RenewInterval time.Duration
	// Margin is how long before its key could expire a leader stops
	// considering itself leader; it must cover stopping the work done as
	// leader. Default 500ms; must be below TTL − RenewInterval.
	Margin time.Duration
	// CampaignInterval is how often a follower tries to win although it
	// saw no marker (a backstop for watch gaps), and how long a candidate
	// whose leader work failed sits out. Default TTL, at most
	// MaxDefaultInterval: the watch's consumer dies with the election
	// stream's JetStream leader and comes back only after missed
	// heartbeats, so the marker of a key that expired meanwhile may never
	// be seen.
	CampaignInterval time.Duration
	// Replicas is the bucket's replica count when this candidate creates
	// it. Default 1; use 3 on a three-server cluster.
	Replicas int
	// Logger receives the elector's logs. Default slog.Default().
	Logger *slog.Logger
	// Clock is the time source of the deadlines and timers. Default
	// SystemClock.
	Clock Clock
}

// Value is the JSON stored under the key by the leader.
type Value struct {
	// ID is the leader's candidate id.
	ID string `json:"id"`
	// Term is the revision the leader won with; 0 in the first revision,
	// whose own revision is the term.
	Term uint64 `json:"term,omitempty"`
	// Nonce is random per campaign; with Seq it identifies one write.
	Nonce string `json:"nonce"`
	// Seq counts writes within a term (0 is the campaign).
	Seq uint64 `json:"seq"`
	// Since is when the term began, on the leader's clock.
	Since time.Time `json:"since"`
}

// Role is a candidate's current role (status.Role, which replicas
// report).
type Role = status.Role

// Roles.
const (
	RoleFollower = status.RoleFollower
	RoleLeader   = status.RoleLeader
)

// Status is a snapshot of what a candidate knows.
type Status struct {
	Role Role `json:"role"`
	// Term is this candidate's term while leader, else the current
	// leader's term as last seen (0 if none).
	Term uint64 `json:"term"`
	// Leader is the current leader's id as last seen ("" if none).
	Leader string `json:"leader"`
}

// LeadFunc is called each time the candidate wins. ctx is cancelled when
// leadership ends (validUntil passed, the key was lost, or Run's context
// ended); LeadFunc must stop the work it does as leader and return
// promptly after that, within Config.Margin. An error makes the candidate
// resign and sit out one CampaignInterval.
type LeadFunc func(ctx context.Context, term uint64) error

// Elector campaigns for one key. Create it with New and call Run.
type Elector struct {
	js    jetstream.JetStream
	cfg   Config
	log   *slog.Logger
	clock Clock

	mu     sync.Mutex
	status Status
	// validUntil is the current term's deadline on the monotonic clock
	// (zero when not leading).
	validUntil time.Time
	kv         jetstream.KeyValue
}

// New validates cfg and returns an Elector.
func New(js jetstream.JetStream, cfg Config) (*Elector, error) {
	if js == nil {
		return nil, errors.New("election: nil JetStream context")
	}
	if cfg.Key == "" || cfg.ID == "" {
		return nil, errors.New("election: Key and ID are required")
	}
	// The bucket, TTL and replicas are what a replica's public options
	// set: their defaults and bounds are written there.
	pub, err := replica.Election{Bucket: cfg.Bucket, TTL: cfg.TTL, Replicas: cfg.Replicas}.WithDefaults()
	if err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	cfg.Bucket, cfg.TTL, cfg.Replicas = pub.Bucket, pub.TTL, pub.Replicas
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = min(cfg.TTL/3, MaxDefaultInterval)
	}
	if cfg.Margin == 0 {
		cfg.Margin = DefaultMargin
	}
	if cfg.RenewInterval <= 0 || cfg.Margin <= 0 || cfg.RenewInterval+cfg.Margin >= cfg.TTL {
		return nil, fmt.Errorf("election: renew interval %v + margin %v must be positive and below TTL %v", cfg.RenewInterval, cfg.Margin, cfg.TTL)
	}
	if cfg.CampaignInterval == 0 {
		cfg.CampaignInterval = min(cfg.TTL, MaxDefaultInterval)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	return &Elector{js: js, cfg: cfg, clock: cfg.Clock, log: cfg.Logger.With("election", cfg.Bucket+"/"+cfg.Key, "candidate", cfg.ID),
		status: Status{Role: RoleFollower}}, nil
}

// Status returns what the candidate currently knows.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

func (e *Elector) setStatus(s Status) {
	e.mu.Lock()
	e.status = s
	if s.Role != RoleLeader {
		e.validUntil = time.Time{}
	}
	e.mu.Unlock()
}

func (e *Elector) setValid(until time.Time) {
	e.mu.Lock()
	e.validUntil = until
	e.mu.Unlock()
}

// Valid reports whether this candidate still leads in term: its deadline
// (the send time of its last confirmed renewal + TTL − margin, on the
// monotonic clock) has not passed. It reads the clock itself, so a
// process that was frozen past its deadline sees false at once on waking,
// before the goroutine that would end its leadership has run.
func (e *Elector) Valid(term uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status.Role == RoleLeader && e.status.Term == term && e.clock.Now().Before(e.validUntil)
}

// LastSequence returns the election stream's last sequence: no term
// issued so far can be above it. A lease record claiming a higher term
// cannot be genuine.
func (e *Elector) LastSequence(ctx context.Context) (uint64, error) {
	s, err := e.js.Stream(ctx, "KV_"+e.cfg.Bucket)
	if err != nil {
		return 0, fmt.Errorf("election: stream of bucket %q: %w", e.cfg.Bucket, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("election: stream of bucket %q: %w", e.cfg.Bucket, err)
	}
	return info.State.LastSeq, nil
}

// FoundedKey is the key, beside the election key, that records that the
// node has had a leader. It has no TTL and is never deleted by allot.
func FoundedKey(key string) string { return subjects.FoundedKey(key) }

// Founded reports whether the node had a leader before (its founding key
// exists, or a marker of it is left), and records that it has one now.
// A coordinator uses it to tell a new deployment from one whose lease
// record was lost.
func (e *Elector) Founded(ctx context.Context, term uint64) (bool, error) {
	e.mu.Lock()
	kv := e.kv
	e.mu.Unlock()
	if kv == nil {
		return false, errors.New("election: not running")
	}
	key := FoundedKey(e.cfg.Key)
	_, err := kv.Get(ctx, key)
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return false, fmt.Errorf("election: read %s: %w", key, err)
	}
	had := false
	if hist, err := kv.History(ctx, key); err == nil && len(hist) > 0 {
		had = true // deleted or purged: it existed
	}
	data, _ := json.Marshal(map[string]any{"id": e.cfg.ID, "term": term, "at": e.clock.Now().UTC()})
	if _, err := kv.Create(ctx, key, data); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return true, nil
		}
		return had, fmt.Errorf("election: record %s: %w", key, err)
	}
	return had, nil
}

// Bucket opens the election bucket, creating it if it does not exist. An
// existing bucket must have LimitMarkerTTL set and keep one revision.
func Bucket(ctx context.Context, js jetstream.JetStream, name string, ttl time.Duration, replicas int) (jetstream.KeyValue, error) {
	for attempt := 0; ; attempt++ {
		kv, err := js.KeyValue(ctx, name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket:         name,
				Description:    "allot coordinator election: one key per tree node, value = leader",
				History:        1,
				Storage:        jetstream.FileStorage,
				Replicas:       replicas,
				LimitMarkerTTL: max(ttl, time.Second),
			})
			if errors.Is(err, jetstream.ErrBucketExists) && attempt < 3 {
				continue // created concurrently by another candidate
			}
		}
		if err != nil {
			if ctx.Err() == nil && attempt < 20 && jsretry.Transient(err) {
				// A fresh cluster may still be electing its meta leader.
				select {
				case <-time.After(250 * time.Millisecond):
					continue
				case <-ctx.Done():
				}
			}
			return nil, fmt.Errorf("election: bucket %q: %w", name, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("election: bucket %q status: %w", name, err)
		}
		if st.LimitMarkerTTL() == 0 || st.History() != 1 {
			return nil, fmt.Errorf("election: bucket %q must have history 1 and a limit marker TTL (has history %d, marker TTL %v); delete it and let allot recreate it",
				name, st.History(), st.LimitMarkerTTL())
		}
		return kv, nil
	}
}

// isWrongLastSeq reports a compare-and-set conflict (10071, or 10164 on
// replicated streams).
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// Run campaigns until ctx ends, calling lead each time this candidate
// wins. When ctx ends while leading, Run cancels lead's context, waits for
// lead to return and then resigns (deletes its key) so that a follower
// takes over at once. Run returns nil after ctx ends, or an error if the
// bucket cannot be opened or the NATS connection is closed.
func (e *Elector) Run(ctx context.Context, lead LeadFunc) error {
	var kv jetstream.KeyValue
	for {
		openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		kv, err = Bucket(openCtx, e.js, e.cfg.Bucket, e.cfg.TTL, e.cfg.Replicas)
		cancel()
		if err == nil {
			e.mu.Lock()
			e.kv = kv
			e.mu.Unlock()
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if e.js.Conn().IsClosed() {
			return fmt.Errorf("election: %w", nats.ErrConnectionClosed)
		}
		e.log.Warn("cannot open election bucket; retrying", "err", err)
		if !e.sleep(ctx, e.cfg.CampaignInterval) {
			return nil
		}
	}
	for {
		won, err := e.follow(ctx, kv)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if err := e.leadTerm(ctx, kv, won, lead); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// term is a won leadership.
type term struct {
	term       uint64
	nonce      string
	rev        uint64 // latest revision written by us
	seq        uint64 // latest seq confirmed
	since      time.Time
	validUntil time.Time // monotonic
	sent       map[uint64]time.Time
}

func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sleep waits d on the elector's clock; false if ctx ended first.
func (e *Elector) sleep(ctx context.Context, d time.Duration) bool {
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// follow watches the key and campaigns until this candidate wins.
func (e *Elector) follow(ctx context.Context, kv jetstream.KeyValue) (*term, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var updates <-chan jetstream.KeyValueEntry
	var w jetstream.KeyWatcher
	failed := false
	// watch (re)starts the watch. One begun while the connection is down
	// fails once its request times out, and a watch can end; without it
	// a follower hears of a lapsed leader only at its next campaign, so
	// it is tried again at each while connected.
	watch := func() {
		if w != nil {
			_ = w.Stop()
			w = nil
		}
		nw, err := kv.Watch(ctx, e.cfg.Key)
		switch {
		case err != nil && ctx.Err() == nil && !failed:
			e.log.Warn("cannot watch election key; campaigning periodically, and watching again at each campaign", "err", err)
			failed = true
		case err != nil:
			e.log.Debug("cannot watch election key", "err", err)
		case failed:
			e.log.Info("watching election key again")
			failed = false
		}
		if err == nil {
			w, updates = nw, nw.Updates()
		}
	}
	watch()
	defer func() {
		if w != nil {
			_ = w.Stop()
		}
	}()
	tick := e.clock.NewTimer(e.cfg.CampaignInterval)
	defer func() { tick.Stop() }()
	try := true // campaign at once on start
	for {
		if try {
			if e.js.Conn().IsClosed() {
				return nil, fmt.Errorf("election: %w", nats.ErrConnectionClosed)
			}
			t, err := e.campaign(ctx, kv)
			if t != nil {
				return t, nil
			}
			if err != nil && ctx.Err() == nil {
				e.log.Debug("campaign failed", "err", err)
			}
			if err == nil {
				// Someone else leads. The watch may lag after a reconnect
				// (nats.go recreates its consumer only after missed
				// heartbeats), so read the leader directly too.
				e.readLeader(ctx, kv)
			}
			try = false
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C():
			tick = e.clock.NewTimer(e.cfg.CampaignInterval)
			try = true
			if updates == nil && e.js.Conn().IsConnected() {
				watch()
			}
		case entry, ok := <-updates:
			if !ok {
				updates = nil // watcher ended; the ticker remains
				continue
			}
			if entry == nil {
				continue // initial values done
			}
			if entry.Operation() != jetstream.KeyValuePut {
				e.setStatus(Status{Role: RoleFollower})
				try = true
				continue
			}
			e.followerStatus(entry)
		}
	}
}

// readLeader sets the follower status from the key's current value.
func (e *Elector) readLeader(ctx context.Context, kv jetstream.KeyValue) {
	gctx, cancel := context.WithTimeout(ctx, e.cfg.RenewInterval)
	defer cancel()
	entry, err := kv.Get(gctx, e.cfg.Key)
	if err != nil {
		return
	}
	e.followerStatus(entry)
}

// followerStatus records the leader named by a put of the key.
func (e *Elector) followerStatus(entry jetstream.KeyValueEntry) {
	var v Value
	if json.Unmarshal(entry.Value(), &v) != nil {
		return
	}
	tm := v.Term
	if tm == 0 {
		tm = entry.Revision()
	}
	e.setStatus(Status{Role: RoleFollower, Term: tm, Leader: v.ID})
}

// campaign tries once to create the key. It returns the term if won.
func (e *Elector) campaign(ctx context.Context, kv jetstream.KeyValue) (*term, error) {
	t := &term{nonce: newNonce(), since: e.clock.Now(), sent: map[uint64]time.Time{}}
	data, _ := json.Marshal(Value{ID: e.cfg.ID, Nonce: t.nonce, Seq: 0, Since: t.since.UTC()})
	cctx, cancel := context.WithTimeout(ctx, e.cfg.RenewInterval)
	defer cancel()
	sent := e.clock.Now()
	t.sent[0] = sent
	rev, err := kv.Create(cctx, e.cfg.Key, data, jetstream.KeyTTL(e.cfg.TTL))
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err):
		return nil, nil
	default:
		// Ambiguous: the create may have landed. Read back.
		if rev, ok := e.readBack(ctx, kv, t); ok {
			t.term, t.rev, t.seq = rev, rev, 0
			t.validUntil = sent.Add(e.cfg.TTL - e.cfg.Margin)
			break
		}
		return nil, err
	}
	if t.term == 0 {
		t.term, t.rev = rev, rev
		t.validUntil = sent.Add(e.cfg.TTL - e.cfg.Margin)
	}
	return t, nil
}

// readBack reads the key and reports whether its latest revision is a
// write of ours (see adopt).
func (e *Elector) readBack(ctx context.Context, kv jetstream.KeyValue, t *term) (uint64, bool) {
	gctx, cancel := context.WithTimeout(ctx, e.cfg.RenewInterval)
	defer cancel()
	entry, err := kv.Get(gctx, e.cfg.Key)
	if err != nil {
		return 0, false
	}
	return e.adopt(entry, t)
}

// adopt reports whether entry is a write of ours; if so it returns its
// revision and extends validUntil from the send time of that write (the
// server stored it after we sent it, so it cannot expire earlier than
// send time + TTL).
func (e *Elector) adopt(entry jetstream.KeyValueEntry, t *term) (uint64, bool) {
	var v Value
	if json.Unmarshal(entry.Value(), &v) != nil || v.ID != e.cfg.ID || v.Nonce != t.nonce {
		return 0, false
	}
	sent, ok := t.sent[v.Seq]
	if !ok {
		return 0, false
	}
	if v.Seq >= t.seq {
		t.seq = v.Seq
		if until := sent.Add(e.cfg.TTL - e.cfg.Margin); until.After(t.validUntil) {
			t.validUntil = until
		}
	}
	return entry.Revision(), true
}

// errLost means the key is no longer ours.
var errLost = errors.New("election: leadership lost")

// leadTerm runs lead while renewing, until leadership ends.
func (e *Elector) leadTerm(ctx context.Context, kv jetstream.KeyValue, t *term, lead LeadFunc) error {
	e.log.Info("won election", "term", t.term)
	e.setStatus(Status{Role: RoleLeader, Term: t.term, Leader: e.cfg.ID})
	e.setValid(t.validUntil)
	leadCtx, stopLead := context.WithCancel(ctx)
	leadDone := make(chan error, 1)
	go func() { leadDone <- lead(leadCtx, t.term) }()

	var leadErr error
	leadReturned := false
	nextRenew := e.clock.Now().Add(e.cfg.RenewInterval)
	reason := "context ended"
loop:
	for {
		now := e.clock.Now()
		if !now.Before(t.validUntil) {
			reason = "not renewed before the deadline"
			break
		}
		if now.Before(nextRenew) {
			timer := e.clock.NewTimer(min(nextRenew.Sub(now), t.validUntil.Sub(now)))
			select {
			case <-ctx.Done():
				timer.Stop()
				break loop
			case leadErr = <-leadDone:
				timer.Stop()
				leadReturned = true
				reason = "leader work ended"
				if leadErr != nil {
					reason = "leader work failed: " + leadErr.Error()
				}
				break loop
			case <-timer.C():
				continue
			}
		}
		err := e.renew(ctx, kv, t)
		e.setValid(t.validUntil)
		switch {
		case err == nil:
			nextRenew = e.clock.Now().Add(e.cfg.RenewInterval)
		case errors.Is(err, errLost):
			reason = "key lost"
			break loop
		case ctx.Err() != nil:
			break loop
		default:
			// Transient: retry a few times before validUntil.
			now := e.clock.Now()
			left := t.validUntil.Sub(now)
			e.log.Warn("renewal failed; retrying", "err", err, "valid_for", left.Round(time.Millisecond))
			nextRenew = now.Add(max(min(e.cfg.RenewInterval/4, left/3), 10*time.Millisecond))
		}
	}
	stopLead()
	if !leadReturned {
		leadErr = <-leadDone
	}
	e.log.Info("leadership ended", "term", t.term, "reason", reason)
	e.setStatus(Status{Role: RoleFollower})
	if ctx.Err() != nil || leadErr != nil {
		e.resign(kv, t)
	}
	if e.js.Conn().IsClosed() {
		return fmt.Errorf("election: %w", nats.ErrConnectionClosed)
	}
	if leadErr != nil && ctx.Err() == nil {
		e.sleep(ctx, e.cfg.CampaignInterval)
	}
	return nil
}

// renew writes the next revision with the TTL, expecting our last one.
// Every step is bounded by validUntil.
func (e *Elector) renew(ctx context.Context, kv jetstream.KeyValue, t *term) error {
	seq := t.seq + 1
	for s := range t.sent {
		if s < t.seq {
			delete(t.sent, s)
		}
	}
	data, _ := json.Marshal(Value{ID: e.cfg.ID, Term: t.term, Nonce: t.nonce, Seq: seq, Since: t.since.UTC()})
	rctx, cancel := context.WithDeadline(ctx, t.validUntil)
	defer cancel()
	pctx, pcancel := context.WithTimeout(rctx, e.cfg.RenewInterval)
	defer pcancel()
	sent := e.clock.Now()
	t.sent[seq] = sent
	msg := &nats.Msg{Subject: "$KV." + e.cfg.Bucket + "." + e.cfg.Key, Data: data}
	pa, err := e.js.PublishMsg(pctx, msg, jetstream.WithMsgTTL(e.cfg.TTL), jetstream.WithExpectLastSequencePerSubject(t.rev))
	if err == nil {
		t.rev, t.seq = pa.Sequence, seq
		t.validUntil = sent.Add(e.cfg.TTL - e.cfg.Margin)
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	if e.js.Conn().IsClosed() {
		return errLost // for good: stop leading now
	}
	// A mismatch (an earlier ambiguous renewal landed, or someone else
	// owns the key) or an ambiguous failure: read the key back, within a
	// renewal interval too, so that a read stuck behind a reconnect does
	// not hold up the next attempt.
	gctx, gcancel := context.WithTimeout(rctx, e.cfg.RenewInterval)
	defer gcancel()
	entry, gerr := kv.Get(gctx, e.cfg.Key)
	switch {
	case errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted):
		return errLost
	case gerr != nil:
		return fmt.Errorf("election: renewal %d: %w (read back: %w)", seq, err, gerr)
	}
	if rev, ok := e.adopt(entry, t); ok {
		t.rev = rev
		if t.seq == seq {
			return nil // this very renewal landed
		}
		return fmt.Errorf("election: renewal %d not confirmed: %w", seq, err)
	}
	return errLost // readable, and not ours
}

// resign deletes our key if it still holds our latest revision.
func (e *Elector) resign(kv jetstream.KeyValue, t *term) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewInterval)
	defer cancel()
	if err := kv.Delete(ctx, e.cfg.Key, jetstream.LastRevision(t.rev)); err != nil {
		e.log.Warn("resign failed; the key will expire", "term", t.term, "err", err)
		return
	}
	e.log.Info("resigned", "term", t.term)
}
