// Package jsretry retries the JetStream API calls a service makes as it
// starts (opening or creating its buckets) while JetStream is not ready
// to answer them: a fresh cluster still electing its meta leader, a
// server that has not yet enabled JetStream, a loaded machine on which a
// request is lost. A service that gave up at the first such failure
// stopped for good unless a supervisor started it again, and a request
// the cluster dropped held it for its caller's whole deadline.
package jsretry

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// AttemptTimeout bounds one attempt, so that a request nobody answers is
// sent again rather than waited on until the caller's deadline.
const AttemptTimeout = 5 * time.Second

// pause is the wait between attempts.
const pause = 250 * time.Millisecond

// Transient reports whether err may pass once JetStream is ready: a
// time-out, no responders, JetStream not (yet) enabled, no stream
// response, or a cluster that cannot place a replicated bucket for now
// (on a loaded machine its meta leader briefly takes a server that
// missed its heartbeats for offline) or says it is temporarily
// unavailable.
func Transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == errNoPeers || api.ErrorCode == errUnavailable)
}

// JetStream API error codes of a cluster not ready (nats-server's
// JSClusterNoPeersErrF and JSClusterNotAvailErr).
const (
	errNoPeers     jetstream.ErrorCode = 10005
	errUnavailable jetstream.ErrorCode = 10008
)

// Do calls f with a context that ends after at most AttemptTimeout, until
// f succeeds, fails with an error that is not Transient, or ctx ends. It
// returns f's last error (nil on success).
func Do(ctx context.Context, f func(context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		err := f(actx)
		cancel()
		if err == nil || !Transient(err) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}
