// Package quotatest runs the real quota service for tests and examples:
// namespaces put into a real allot_config KV bucket, the configuration
// watcher following it, and a quotaserver.Server answering from the
// watcher's current set, as `allot up` runs them.
package quotatest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/quotaserver"
)

// Service is a running quota service and its configuration.
type Service struct {
	nc *nats.Conn
	kv jetstream.KeyValue
	w  *configkv.Watcher

	partitions int
	now        func() time.Time // the servers' clock; nil: the real one

	mu   sync.Mutex
	srvs []*quotaserver.Server
}

// Start is New for a test: it fails the test on error and closes the
// service when the test ends.
func Start(tb testing.TB, nc *nats.Conn, namespaces map[string]string) *Service {
	tb.Helper()
	s, err := New(nc, namespaces)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// StartClocked is Start with the quota server reading the time from now
// (quotaserver.Options.Now): a test that wants exact bucket contents
// stops its clock, or moves it, so that no token fills between two
// requests however slow the machine is.
func StartClocked(tb testing.TB, nc *nats.Conn, now func() time.Time, namespaces map[string]string) *Service {
	tb.Helper()
	s, err := NewClocked(nc, now, namespaces)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// NewClocked is New with the quota server reading the time from now, for
// a runnable example whose output must not depend on the machine's
// speed.
func NewClocked(nc *nats.Conn, now func() time.Time, namespaces map[string]string) (*Service, error) {
	return newService(nc, 1, now, namespaces)
}

// New puts namespaces (name → JSON or YAML document) into the
// configuration bucket reached through nc, starts a watcher on it and a
// quota server (node "root", one partition) on nc, and returns once every
// namespace is served.
func New(nc *nats.Conn, namespaces map[string]string) (*Service, error) {
	return NewPartitioned(nc, 1, namespaces)
}

// NewPartitioned is New with n partitions, each its own server on nc. For
// n > 1 the NATS server must map the bucket subjects to them
// (embed.Options.Mappings = quotaserver.Mappings("root", n)), as `allot
// up --quota-partitions n` does.
func NewPartitioned(nc *nats.Conn, n int, namespaces map[string]string) (*Service, error) {
	return newService(nc, n, nil, namespaces)
}

// newService is NewPartitioned with the servers' clock (nil: the real
// one).
func newService(nc *nats.Conn, n int, now func() time.Time, namespaces map[string]string) (*Service, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := configkv.OpenBucket(ctx, js, "", true)
	if err != nil {
		return nil, err
	}
	s := &Service{nc: nc, kv: kv, w: configkv.NewWatcher(kv, nil, slog.New(slog.DiscardHandler)), partitions: n, now: now}
	if err := s.w.Start(ctx); err != nil {
		return nil, err
	}
	for ns, doc := range namespaces {
		if err := s.Put(ns, doc); err != nil {
			s.w.Stop()
			return nil, err
		}
	}
	if err := s.Restart(); err != nil {
		s.w.Stop()
		return nil, err
	}
	return s, nil
}

// Put writes namespace ns's document and waits until that revision is
// served.
func (s *Service) Put(ns, doc string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rev, err := s.kv.Put(ctx, config.NamespaceKey(ns), []byte(doc))
	if err != nil {
		return err
	}
	for {
		if n := s.w.Current().Quota().Namespaces[ns]; n != nil && n.Revision == rev {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("quotatest: namespace %s revision %d not served: %v", ns, rev, s.w.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Stop stops the quota servers: requests get no responders.
func (s *Service) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, srv := range s.srvs {
		srv.Stop()
	}
	s.srvs = nil
}

// Restart starts new quota servers (stopping the running ones); their
// buckets start afresh.
func (s *Service) Restart() error {
	s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for p := range s.partitions {
		srv, err := quotaserver.New(s.nc, quotaserver.Options{
			Partition: p, Partitions: s.partitions,
			Config: sources.QuotaFunc(func() *quota.Config { return s.w.Current().Quota() }),
			Logger: slog.New(slog.DiscardHandler), Now: s.now,
		})
		if err == nil {
			err = srv.Start(ctx)
		}
		if err != nil {
			s.Stop()
			return fmt.Errorf("quotatest: partition %d: %w", p, err)
		}
		s.mu.Lock()
		s.srvs = append(s.srvs, srv)
		s.mu.Unlock()
	}
	return nil
}

// Close stops the server and the watcher.
func (s *Service) Close() {
	s.Stop()
	s.w.Stop()
}

// Stats returns each running partition's counters, by partition.
func (s *Service) Stats() []quotaserver.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]quotaserver.Stats, len(s.srvs))
	for i, srv := range s.srvs {
		out[i] = srv.Stats()
	}
	return out
}
