package jsretry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestDo: transient failures are tried again, a request nobody answers
// is given up on after AttemptTimeout (not the caller's deadline) and
// sent again, and other errors or the caller's end stop it.
func TestDo(t *testing.T) {
	denied := errors.New("permission denied")
	for _, tc := range []struct {
		name string
		fail []error // the attempts' errors before one succeeds; nil: block until the attempt's context ends
		want error   // Do's error (nil: success)
		took time.Duration
	}{
		{name: "success", took: 0},
		{name: "no responders", fail: []error{nats.ErrNoResponders, fmt.Errorf("wrapped: %w", jetstream.ErrJetStreamNotEnabled)}, took: 2 * pause},
		{name: "unanswered request", fail: []error{nil, nil}, took: 2 * (AttemptTimeout + pause)},
		{name: "no placement yet", fail: []error{&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"}}, took: pause},
		{name: "not transient", fail: []error{nats.ErrTimeout, denied}, want: denied, took: pause},
		{name: "bad request", fail: []error{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest}}, want: &jetstream.APIError{ErrorCode: jetstream.JSErrCodeBadRequest}, took: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				calls := 0
				start := time.Now()
				err := Do(ctx, func(ctx context.Context) error {
					calls++
					if calls > len(tc.fail) {
						return nil
					}
					if e := tc.fail[calls-1]; e != nil {
						return e
					}
					<-ctx.Done()
					return ctx.Err()
				})
				if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
					t.Fatalf("Do: %v, want %v", err, tc.want)
				}
				if took := time.Since(start); took != tc.took {
					t.Errorf("took %v, want %v", took, tc.took)
				}
			})
		})
	}
	t.Run("caller's end", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 12*time.Second)
			defer cancel()
			calls := 0
			err := Do(ctx, func(ctx context.Context) error { calls++; <-ctx.Done(); return ctx.Err() })
			if !errors.Is(err, context.DeadlineExceeded) || calls != 3 {
				t.Fatalf("Do: %v after %d calls, want a deadline after 3 (5s, 5s, then the caller's last 1.5s)", err, calls)
			}
		})
	})
}
