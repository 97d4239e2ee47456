package configkv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/allot/allot/internal/subjects"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// maxTreeDepth bounds how many mirrors OpenOrigin follows toward the root,
// so that a misconfigured loop of mirrors ends with an error.
const maxTreeDepth = 16

// domainAPIPrefix is the JetStream API prefix of a domain, as a mirror's
// External.APIPrefix names it.
func domainAPIPrefix(domain string) string { return "$JS." + domain + ".API" }

// MirrorOriginWait bounds how long OpenMirror waits for the parent's
// bucket to be reachable before it creates a new mirror.
const MirrorOriginWait = 10 * time.Second

// waitOrigin waits up to limit (and while ctx lasts) until bucket can be
// read in domain, and reports whether it could.
func waitOrigin(ctx context.Context, nc *nats.Conn, bucket, domain string, limit time.Duration) bool {
	pjs, err := jetstream.NewWithDomain(nc, domain)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		tctx, tcancel := context.WithTimeout(ctx, time.Second)
		_, err := pjs.KeyValue(tctx, bucket)
		tcancel()
		if err == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// OpenMirror returns the configuration bucket of a child level of the
// tree: a KV mirror, in js's (the child's) domain, of the bucket of the
// same name in the parent's domain, so that templates edited once at the
// root reach every level (a mirror of a mirror down the tree) and a level
// cut off from its parent keeps serving the last version it received.
// A missing mirror is created (with opts), after waiting up to
// MirrorOriginWait for the parent's bucket; it fills once the parent is
// reachable. An existing bucket is used only if it is such a mirror: a
// plain bucket, or a mirror of another domain, is an error that says how
// to replace it, because its templates would silently shadow the root's.
//
// The mirror names the parent's API prefix ($JS.<parent>.API) in
// External rather than setting StreamSource.Domain, as the nats CLI's
// `--mirror-domain` does; nats.go turns Domain into the same prefix.
func OpenMirror(ctx context.Context, js jetstream.JetStream, bucket, parentDomain string, opts ...BucketOption) (jetstream.KeyValue, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	if parentDomain == "" {
		return nil, errors.New("configuration mirror: the parent's domain is empty")
	}
	want := domainAPIPrefix(parentDomain)
	kv, err := js.KeyValue(ctx, bucket)
	if err == nil {
		return kv, checkMirror(ctx, kv, bucket, want, parentDomain)
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open configuration bucket %q: %w", bucket, err)
	}
	// A mirror created while its origin cannot be reached starts syncing
	// only after nats-server's setup request times out (30s) and its retry
	// backoff passes (about 40s in all, up to minutes): wait a while for
	// the origin first, then create the mirror in any case.
	source := &jetstream.StreamSource{Name: bucket, External: &jetstream.ExternalStream{APIPrefix: want}}
	if waitOrigin(ctx, js.Conn(), bucket, parentDomain, MirrorOriginWait) {
		source.Consumer = durableMirrorConsumer(ctx, js, bucket, parentDomain)
	}
	cfg := jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: BucketDescription + "; a mirror of " + bucket + " in domain " + parentDomain,
		History:     BucketHistory,
		Storage:     jetstream.FileStorage,
		Mirror:      source,
	}
	for _, o := range opts {
		o(&cfg)
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) { // lost a race with another creator
		if kv, err = js.KeyValue(ctx, bucket); err == nil {
			return kv, checkMirror(ctx, kv, bucket, want, parentDomain)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create configuration bucket %q as a mirror of domain %s: %w", bucket, parentDomain, err)
	}
	return kv, nil
}

// MirrorConsumer is the durable consumer, on the parent's stream of
// bucket, through which the configuration mirror of the child level in
// JetStream domain child sources: durable allot_mirror_<child>, delivering
// to allot.mirror.<child>.<bucket>, acknowledged by flow control. The
// child's coordinator creates it when it creates the mirror, unless the
// parent's operator did beforehand (a secure tree, where the child's link
// may read this consumer's info but not create consumers).
func MirrorConsumer(bucket, child string) jetstream.ConsumerConfig {
	if bucket == "" {
		bucket = DefaultBucket
	}
	return jetstream.ConsumerConfig{
		Durable:        subjects.MirrorDurable(child),
		Description:    "allot: the configuration mirror of domain " + child + " sources through it",
		DeliverSubject: subjects.MirrorDeliver(child, bucket),
		AckPolicy:      jetstream.AckFlowControlPolicy,
		FlowControl:    true,
		IdleHeartbeat:  time.Second, // what nats-server requires of sourcing consumers
		MaxAckPending:  1024,
	}
}

// durableMirrorConsumer returns the durable consumer at the parent that
// a mirror of bucket in js's domain sources from (MirrorConsumer), for the
// mirror's config: the one that exists if it delivers where the mirror
// listens with flow-control acknowledgements, else one it creates or
// updates; nil if neither (a nats-server before 2.14, no permission), and
// the mirror then uses nats-server's own consumer.
//
// Why: nats-server's own mirror consumer is ephemeral. A link cut for
// more than its 10s health check makes the mirror set up a new one with
// requests that time out and back off (up to 2 minutes): changes made at
// the root reached a child minutes after the link came back. With a
// durable consumer the mirror only repositions it, and a probe on its
// delivery subject retries as soon as the link carries it again: changes
// arrive within a second or so of the restore.
func durableMirrorConsumer(ctx context.Context, js jetstream.JetStream, bucket, parentDomain string) *jetstream.StreamConsumerSource {
	info, err := js.AccountInfo(ctx)
	if err != nil || info.Domain == "" {
		return nil
	}
	pjs, err := jetstream.NewWithDomain(js.Conn(), parentDomain)
	if err != nil {
		return nil
	}
	cfg := MirrorConsumer(bucket, info.Domain)
	src := &jetstream.StreamConsumerSource{Name: cfg.Durable, DeliverSubject: cfg.DeliverSubject}
	if c, err := pjs.PushConsumer(ctx, "KV_"+bucket, cfg.Durable); err == nil {
		if got := c.CachedInfo().Config; got.DeliverSubject == cfg.DeliverSubject && got.AckPolicy == jetstream.AckFlowControlPolicy {
			return src
		}
	}
	if _, err := pjs.CreateOrUpdatePushConsumer(ctx, "KV_"+bucket, cfg); err != nil {
		return nil
	}
	return src
}

// checkMirror reports an error unless kv mirrors bucket through the API
// prefix want.
func checkMirror(ctx context.Context, kv jetstream.KeyValue, bucket, want, parentDomain string) error {
	m, err := mirrorOf(ctx, kv)
	if err != nil {
		return err
	}
	fix := fmt.Sprintf("delete it (nats kv del %s) to let allot create the mirror, or run: nats kv add %s --mirror %s --mirror-domain %s", bucket, bucket, bucket, parentDomain)
	if m == nil {
		return fmt.Errorf("configuration bucket %q exists in this domain but is not a mirror of domain %s: its templates would shadow the root's; %s", bucket, parentDomain, fix)
	}
	got := ""
	if m.External != nil {
		got = m.External.APIPrefix
	}
	if strings.TrimPrefix(m.Name, "KV_") != bucket || got != want {
		return fmt.Errorf("configuration bucket %q mirrors %s through %q, not %s in domain %s; %s", bucket, m.Name, got, bucket, parentDomain, fix)
	}
	return nil
}

// mirrorOf returns the mirror source of kv's stream, or nil if it is not
// a mirror.
func mirrorOf(ctx context.Context, kv jetstream.KeyValue) (*jetstream.StreamSource, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("configuration bucket %q: %w", kv.Bucket(), err)
	}
	kst, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return nil, nil
	}
	return kst.StreamInfo().Config.Mirror, nil
}

// OpenOrigin returns the bucket that the configuration bucket reached
// through nc mirrors, following mirrors of mirrors up to the root's
// bucket, where templates are written: a put through a mirror two levels
// down would reach only the mirror in the level above, which stores
// nothing. If the bucket is not a mirror, it is returned as it is. The
// second result names the origin's domain ("" for nc's own). create and
// opts are OpenBucket's, for the bucket reached through nc.
func OpenOrigin(ctx context.Context, nc *nats.Conn, bucket string, create bool, opts ...BucketOption) (jetstream.KeyValue, string, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, "", fmt.Errorf("jetstream: %w", err)
	}
	kv, err := OpenBucket(ctx, js, bucket, create, opts...)
	if err != nil {
		return nil, "", err
	}
	domain := ""
	var path []string
	for range maxTreeDepth {
		m, err := mirrorOf(ctx, kv)
		if err != nil {
			return nil, "", err
		}
		if m == nil {
			return kv, domain, nil
		}
		if m.External == nil || m.External.APIPrefix == "" {
			return nil, "", fmt.Errorf("configuration bucket %q is a mirror of %s in its own domain: write templates there", kv.Bucket(), m.Name)
		}
		d, ok := strings.CutSuffix(strings.TrimPrefix(m.External.APIPrefix, "$JS."), ".API")
		if !ok || d == "" || !strings.HasPrefix(m.External.APIPrefix, "$JS.") {
			return nil, "", fmt.Errorf("configuration bucket %q mirrors through API prefix %q, which names no domain", kv.Bucket(), m.External.APIPrefix)
		}
		domain = d
		path = append(path, d)
		pjs, err := jetstream.NewWithDomain(nc, d)
		if err != nil {
			return nil, "", fmt.Errorf("jetstream domain %s: %w", d, err)
		}
		if kv, err = pjs.KeyValue(ctx, strings.TrimPrefix(m.Name, "KV_")); err != nil {
			return nil, "", fmt.Errorf("configuration bucket %q is a mirror; its origin %s in domain %s (path %s) cannot be reached: %w", bucket, m.Name, d, strings.Join(path, " -> "), err)
		}
	}
	return nil, "", fmt.Errorf("configuration bucket %q: more than %d mirrors toward the root (path %s): a loop?", bucket, maxTreeDepth, strings.Join(path, " -> "))
}

// WaitMirrorSynced waits until the mirror kv has heard from its origin
// and caught up (no lag), so that a level starting under its parent
// serves the root's templates rather than an empty bucket, or until ctx
// ends: then it returns ctx's error, and the mirror keeps filling once the
// parent is reachable. A bucket that is not a mirror is synced at once.
func WaitMirrorSynced(ctx context.Context, kv jetstream.KeyValue) error {
	// A mirror reports no lag before its first message has arrived, too:
	// an empty mirror counts as synced only once it has stayed so for
	// emptySettle (an empty origin costs that much at startup).
	const emptySettle = time.Second
	var emptySince time.Time
	for {
		st, err := kv.Status(ctx)
		if err != nil {
			return fmt.Errorf("configuration mirror %q: %w", kv.Bucket(), err)
		}
		kst, ok := st.(*jetstream.KeyValueBucketStatus)
		if !ok || kst.StreamInfo().Config.Mirror == nil {
			return nil
		}
		if m := kst.StreamInfo().Mirror; m != nil && m.Active >= 0 && m.Lag == 0 && m.Error == nil {
			if kst.StreamInfo().State.LastSeq > 0 {
				return nil
			}
			if emptySince.IsZero() {
				emptySince = time.Now()
			} else if time.Since(emptySince) >= emptySettle {
				return nil
			}
		} else {
			emptySince = time.Time{}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("configuration mirror %q has not caught up with its origin: %w", kv.Bucket(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
