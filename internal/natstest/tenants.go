package natstest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/allot/allot/internal/subjects"
	"github.com/nats-io/nats-server/v2/server"
)

// AllotAccount is the account TenantServer gives allot's coordinators.
const AllotAccount = "ALLOT"

// TenantServer starts a JetStream-enabled server on a random loopback
// port with the tenant subject scheme of subjects.md: the account ALLOT
// (user "allot", password "allot", JetStream enabled) exports
// allot.t.*.> with account_token_position 3, and each tenant is an
// account importing allot.t.<tenant>.> as allot.> (sharing who sent each
// request), with the users listed, each with its own name as password.
// The configuration is written to a file and loaded like a deployed one.
func TenantServer(tb testing.TB, tenants map[string][]string) *server.Server {
	tb.Helper()
	return MappedTenantServer(tb, tenants, nil)
}

// MappedTenantServer is TenantServer with subject mappings (source →
// destination) in the ALLOT account, such as the quota and domain
// partitions' (quotaserver.Mappings, domainwire.Mappings).
func MappedTenantServer(tb testing.TB, tenants map[string][]string, mappings map[string]string) *server.Server {
	tb.Helper()
	dir := tb.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\naccounts {\n", filepath.Join(dir, "js"))
	fmt.Fprintf(&b, "  %s {\n    jetstream: enabled\n    users [{user: allot, password: allot}]\n", AllotAccount)
	fmt.Fprintf(&b, "    exports [{service: %q, account_token_position: 3}]\n", subjects.TenantExport)
	if len(mappings) > 0 {
		b.WriteString("    mappings {\n")
		for _, src := range slices.Sorted(maps.Keys(mappings)) {
			fmt.Fprintf(&b, "      %q: %q\n", src, mappings[src])
		}
		b.WriteString("    }\n")
	}
	b.WriteString("  }\n")
	names := make([]string, 0, len(tenants))
	for name := range tenants {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "  %s {\n    users [", name)
		for k, u := range tenants[name] {
			if k > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "{user: %q, password: %q}", u, u)
		}
		fmt.Fprintf(&b, "]\n    imports [{service: {account: %s, subject: %q}, to: %q, share: true}]\n  }\n", AllotAccount, subjects.TenantImport(name), subjects.All)
	}
	b.WriteString("}\n")
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		tb.Fatalf("load %s: %v\n%s", conf, err, b.String())
	}
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		tb.Fatalf("start nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(ReadyWait) {
		s.Shutdown()
		tb.Fatal("nats-server not ready for connections")
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}
