package agent

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// connectAllowed connects, with ErrorHandler logging to the returned
// buffer, to a server whose only user may subscribe to allowed alone.
func connectAllowed(t *testing.T, allowed string) (*nats.Conn, *lockedBuffer) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "tenant", Password: "pw", Permissions: &server.Permissions{
			Subscribe: &server.SubjectPermission{Allow: []string{allowed}},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(natstest.ReadyWait) {
		t.Fatal("server not ready")
	}
	var logs lockedBuffer
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("tenant", "pw"),
		nats.ErrorHandler(ErrorHandler(slog.New(slog.NewTextHandler(&logs, nil)))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, &logs
}

// waitLogged waits until logs holds want.
func waitLogged(t *testing.T, logs *lockedBuffer, want string) {
	t.Helper()
	poll.For(t, 30*time.Second, poll.Interval, func() error {
		if l := logs.String(); !strings.Contains(l, want) {
			return fmt.Errorf("no log naming %s: %q", want, l)
		}
		return nil
	})
}

// A user may not subscribe to coordinator subjects: the refusal reaches
// the client only asynchronously, and ErrorHandler logs it as an error that
// names the subject, instead of leaving a silent time-out.
func TestErrorHandlerLogsPermissionViolation(t *testing.T) {
	nc, logs := connectAllowed(t, "_INBOX.>")
	if _, err := nc.SubscribeSync("allot.root.capacity.get"); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	waitLogged(t, logs, "allot.root.capacity.get")
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "permission") {
		t.Fatalf("the refusal is not logged as a permission error: %q", logs.String())
	}
}

// A user that may receive replies only under its own prefix, connected
// without it, is told to connect with nats.CustomInboxPrefix.
func TestErrorHandlerNamesTheInboxPrefix(t *testing.T) {
	nc, logs := connectAllowed(t, "_INBOX_tenant.>")
	_, _ = nc.Request("allot.root.capacity.get", nil, 50*time.Millisecond)
	waitLogged(t, logs, "nats.CustomInboxPrefix")
}
