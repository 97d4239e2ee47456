package configkv_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/statekv"
)

// TestOpenBucketsWaitForJetStream: a service started before its server
// has JetStream (a fresh cluster electing its meta leader, a server still
// starting its store) waits for it instead of failing at once, which
// stopped `allot coordinator` for good in a cluster fault test: every
// coordinator gave up on its configuration bucket and none ever served.
func TestOpenBucketsWaitForJetStream(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(natstest.ReadyWait) {
		t.Fatal("nats-server not ready for connections")
	}
	js, err := jetstream.New(natstest.Conn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	type opened struct {
		name string
		err  error
	}
	done := make(chan opened, 2)
	go func() {
		_, err := configkv.OpenBucket(ctx, js, "", true)
		done <- opened{"configuration", err}
	}()
	go func() {
		_, _, err := statekv.Open(ctx, js, statekv.DefaultBucket, 1, nil)
		done <- opened{"state", err}
	}()
	// Each asks, is told JetStream is not enabled, and asks again (or
	// gives up).
	poll.Until(t, 30*time.Second, "the buckets asked for again, or given up on", func() bool { return len(done) > 0 || received(s) >= 4 })
	select {
	case o := <-done:
		t.Fatalf("%s bucket: gave up before JetStream was enabled: %v", o.name, o.err)
	default:
	}
	if err := s.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if o := <-done; o.err != nil {
			t.Fatalf("%s bucket: %v", o.name, o.err)
		}
	}
}

// received is how many messages s has received: the buckets' JetStream
// API requests.
func received(s *server.Server) int64 {
	v, err := s.Varz(nil)
	if err != nil {
		return 0
	}
	return v.InMsgs
}
