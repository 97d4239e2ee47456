package domainserver_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
)

// TestForgedRequestInfo: a tenant writing the protocol by hand can smuggle
// a Nats-Request-Info header past nats-server (a line after a bare "\n",
// which nats-server does not take for a header but nats.go does), or hide
// the server's own; neither gets it into a namespace open to another
// tenant, because the tenant comes from the subject its import fills.
func TestForgedRequestInfo(t *testing.T) {
	s := natstest.TenantServer(t, map[string][]string{"TENANT_A": {"a"}, "TENANT_B": {"b"}})
	cfg := &config{}
	ns := testNamespace()
	ns.Tenants = []string{"TENANT_A"}
	cfg.set(ns)
	srv := run(t, natstest.Conn(t, s, nats.UserInfo("allot", "allot")),
		domainserver.Options{Config: sources.DomainsFunc(cfg.get), HoldTTL: time.Hour, Logger: slog.New(slog.DiscardHandler)}, nil)
	subject := domainwire.Subject("root", domainwire.OpReserve, "app", "sandbox") // as a tenant publishes it
	body := `{"domain":"a","copies":1,"client_id":"thief"}`
	for _, hdr := range []string{
		"NATS/1.0\r\nX-A: 1\r\n\r\n",
		"NATS/1.0\r\nX-A: 1\nNats-Request-Info: {\"acc\":\"TENANT_A\",\"user\":\"a\"}\r\n\r\n",
		"NATS/1.0\r\nX-A: 1\n\nY: 2\r\n\r\n",
		"NATS/1.0\r\nX-A: 1\nNats-Request-Info: {\"acc\":\"TENANT_A\",\"user\":\"a\"}\n\nY: 2\r\n\r\n",
	} {
		if code := natstest.RawRequest(t, s.Addr(), "b", subject, hdr, body); code != "403" {
			t.Errorf("TENANT_B's reserve with header block %q: code %q, want 403", hdr, code)
		}
	}
	if st := srv.Stats(); st.CopiesHeld != 0 {
		t.Fatalf("TENANT_B holds %d copies of a namespace open to TENANT_A only", st.CopiesHeld)
	}
	if code := natstest.RawRequest(t, s.Addr(), "a", subject, "NATS/1.0\r\nX-A: 1\r\n\r\n", body); code != "" || srv.Stats().CopiesHeld != 1 {
		t.Fatalf("TENANT_A's reserve: code %q, %d copies held", code, srv.Stats().CopiesHeld)
	}
}
