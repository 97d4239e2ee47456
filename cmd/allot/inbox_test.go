package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// A refused subscription to the replies ends `allot get` with what to do
// on the command line, and only that: the agent's log line about it
// gives advice for Go programs (nats.CustomInboxPrefix), which a user of
// the command cannot follow. Other refusals are still logged.
func TestInboxRefusalIsNotLoggedTwice(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var cause error
	ctx, end := context.WithCancelCause(context.Background())
	defer end(nil)
	var o nats.Options
	if err := inboxRefused("", end, log)(&o); err != nil {
		t.Fatal(err)
	}
	o.AsyncErrorCB(nil, nil, fmt.Errorf("%w: Permissions Violation for Subscription to \"_INBOX.abc.*\"", nats.ErrPermissionViolation))
	if cause = context.Cause(ctx); !errors.Is(cause, errInboxRefused) || !strings.Contains(cause.Error(), "--inbox-prefix") {
		t.Fatalf("request ended with %v; want the --inbox-prefix advice", cause)
	}
	if logs.Len() != 0 {
		t.Fatalf("the refusal was logged besides: %s", logs.String())
	}
	o.AsyncErrorCB(nil, nil, fmt.Errorf("%w: Permissions Violation for Publish to \"allot.x\"", nats.ErrPermissionViolation))
	if !strings.Contains(logs.String(), "refused a permission") {
		t.Fatalf("another refusal was not logged: %q", logs.String())
	}
}
