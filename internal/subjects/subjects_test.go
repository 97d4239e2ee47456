package subjects

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// contract is subjects.md and the deployment notes, with runs of white
// space made one space, so a name broken over lines still matches.
func contract(t *testing.T) string {
	t.Helper()
	var all []string
	for _, f := range []string{"../../subjects.md", "../../deploy/README.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, strings.Join(strings.Fields(string(b)), " "))
	}
	return strings.Join(all, "\n")
}

// TestContract pins every name against the spelling the contract
// documents: each is built with the documented placeholders as arguments
// (partition 7 stands for <i>) and must read as the contract writes it.
// A doc ending in … documents a prefix; one with a quote is a NATS
// configuration snippet that quotes the name.
func TestContract(t *testing.T) {
	const n, i = "<node>", 7
	doc := contract(t)
	ph := func(s string) string { return strings.ReplaceAll(s, ".7", ".<i>") }
	for _, c := range []struct{ got, doc string }{
		{Coordinator(n, CapacityGet), "allot.<node>.capacity.get"},
		{Coordinator(n, CapacityRefresh), "allot.<node>.capacity.refresh"},
		{Coordinator(n, CapacityRelease), "allot.<node>.capacity.release"},
		{Coordinator(n, ServerGet), "allot.<node>.server.get"},
		{Coordinator(n, ServerGet+".*"), "allot.<node>.server.get.*"},
		{Coordinator(n, ReplicaStatus), "allot.<node>.replica.status"},
		{Coordinator(n, "capacity.*"), "allot.<node>.capacity.*"},
		{ChildServerGet("<parent>", "<child>"), "allot.<parent>.server.get.<child>"},
		{TenantCoordinator("<tenant>", n, CapacityRefresh), "allot.t.<tenant>.<node>.capacity.refresh"},
		{TenantCoordinator("*", n, "capacity.*"), "allot.t.*.<node>.capacity.*"},
		{TenantCoordinator("<tenant>", n, "capacity.*"), "allot.t.<tenant>.<node>.capacity.*"},
		{TenantExport, `exports [{service: "allot.t.*.>"`},
		{TenantImport("TENANT_A"), `subject: "allot.t.TENANT_A.>"}, to: "allot.>"`},
		{All, `to: "allot.>"`},
		{Quota(n, QuotaTake), "allot.<node>.quota.take"},
		{Quota(n, QuotaReport), "allot.<node>.quota.report"},
		{QuotaBucket(n, QuotaTake, "<namespace>", "<name>"), "allot.<node>.quota.take.<namespace>.<name>"},
		{QuotaBucket(n, QuotaReport, "<namespace>", "<name>"), "allot.<node>.quota.report.<namespace>.<name>"},
		{QuotaBucket("root", QuotaTake, "logins", "alice"), "allot.root.quota.take.logins.alice"},
		{ph(QuotaPartition(n, i)) + ".>", "allot.<node>.quota.p.<i>.>"},
		{ph(QuotaElectionKey(n, i)), "<node>.quota.<i>"},
		{FoundedKey(ph(QuotaElectionKey(n, i))), "<node>.quota.<i>.founded"},
		{Tenant("<tenant>", Quota(n, QuotaTake)), "allot.t.<tenant>.<node>.quota.…"},
		{Domain(n, "<op>", "<namespace>", "<resource>"), "allot.<node>.domain.<op>.<namespace>.<resource>"},
		{TenantDomain("<tenant>", n, "<op>", "<namespace>", "<resource>"), "allot.t.<tenant>.<node>.domain.…"},
		{ph(DomainPartition(n, i)) + ".t.<tenant>.", "allot.<node>.domain.p.<i>.t.<tenant>.…"},
		{ph(DomainElectionKey(n, i)), "<node>.domain.<i>"},
		{ph(DomainTransfersKey(n, i)), "<node>.domain.<i>.transfers"},
		{DomainSealKey(n), "<node>.domain.seal"},
		{EnvoyCountSubject(n, "<token>"), "allot.<node>.envoy.count.<token>"},
		{EnvoyCountSubject(n, "*"), "allot.<node>.envoy.count.*"},
		{EnvoyCountSubject("root", "edge"), "allot.root.envoy.count.edge"},
		{ph(EnvoyPartition(n, i)) + ".>", "allot.<node>.envoy.p.<i>.>"},
		{ph(EnvoyElectionKey(n, i)), "<node>.envoy.<i>"},
		{ConfigBucket, "allot_config"},
		{StateBucket, "allot_state"},
		{ElectionBucket, "allot_election"},
		{LeaseRecordKey(n, 0, 1), "<node>.leases"},
		{ph(LeaseRecordKey(n, i, 8)), "<node>.leases.<i>"},
		{ph(LeaseElectionKey(n, i, 8)), "<node>.lease.<i>"},
		{ph(LeaseSubject(n, CapacityGet, i, 8)), "allot.<node>.capacity.p.<i>.get"},
		{ph(LeaseSubject(n, CapacityRefresh, i, 8)), "allot.<node>.capacity.p.<i>.refresh"},
		{ph(LeaseSubject(n, CapacityRelease, i, 8)), "allot.<node>.capacity.p.<i>.release"},
		{ph(LeaseSubject(n, ServerGet, i, 8)), "allot.<node>.server.p.<i>.get"},
		{FoundedKey(n), "<node>.founded"},
		{ConfigStatusKey(n, "<key>"), "<node>.config.<key>"},
		{ConfigStatusKey("root", "templates.db"), "root.config.templates.db"},
		{MirrorDurable("<child domain>"), "allot_mirror_<child domain>"},
		{MirrorDeliver("<child domain>", ConfigBucket), "allot.mirror.<child domain>.allot_config"},
	} {
		want, prefix := strings.CutSuffix(c.doc, "…")
		if ok := c.got == want || prefix && strings.HasPrefix(c.got, want) || strings.Contains(want, `"`+c.got+`"`); !ok {
			t.Errorf("built %q, the contract says %q", c.got, c.doc)
		}
		if !strings.Contains(doc, c.doc) {
			t.Errorf("%q is not in the contract", c.doc)
		}
	}
}

// TestMappings pins the partition mappings against the contract's, with
// partition count 9 standing for N.
func TestMappings(t *testing.T) {
	doc := contract(t)
	for name, m := range map[string]map[string]string{
		"quota": QuotaMappings("<node>", 9), "domain": DomainMappings("<node>", 9), "envoy": EnvoyMappings("<node>", 9)} {
		if len(m) == 0 {
			t.Fatalf("%s: no mappings", name)
		}
		for _, src := range slices.Sorted(maps.Keys(m)) {
			line := src + " → " + m[src]
			line = strings.ReplaceAll(line, "(9,", "(N,")
			if !strings.Contains(doc, line) {
				t.Errorf("%s: %q is not in the contract", name, line)
			}
		}
	}
	all := Mappings("root", 4)
	if want := len(QuotaMappings("root", 4)) + len(DomainMappings("root", 4)) + len(EnvoyMappings("root", 4)); len(all) != want || want != 4+2+1 {
		t.Errorf("Mappings: %d mappings, want %d (4 quota, 2 domain, 1 envoy)", len(all), want)
	}
	for _, n := range []int{-1, 0, 1} {
		if m := Mappings("root", n); m != nil {
			t.Errorf("Mappings(root, %d) = %v, want none", n, m)
		}
	}
}

func TestTenant(t *testing.T) {
	for _, c := range []struct{ subject, tenant string }{
		{Tenant("TENANT_A", Quota("root", QuotaTake)), "TENANT_A"},
		{TenantDomain("B", "root", DomainReserve, "app", "x"), "B"},
		{TenantCoordinator("C", "root", CapacityGet), "C"},
		{Quota("root", QuotaTake), ""},
		{"allot.t.", ""},
	} {
		if got := TenantOf(c.subject); got != c.tenant {
			t.Errorf("TenantOf(%q) = %q, want %q", c.subject, got, c.tenant)
		}
	}
	if got := Tenant("TENANT_A", "allot.root.quota.take"); got != "allot.t.TENANT_A.root.quota.take" {
		t.Errorf("Tenant = %q", got)
	}
	for _, s := range []string{"allot.root.capacity.get", "allot.eu.capacity.p.3.refresh"} {
		if got := Untenant(Tenant("A", s)); got != s {
			t.Errorf("Untenant(Tenant(%q)) = %q", s, got)
		}
		if got := Untenant(s); got != s {
			t.Errorf("Untenant(%q) = %q", s, got)
		}
	}
}

// TestDomainMappingsKeepPartitions: the one mapping per subject form sends
// every operation on a resource to the partition a mapping per operation
// does (nats-server's own transform decides both), so a NATS config that
// still lists the six operations and `allot up` place holds alike.
func TestDomainMappingsKeepPartitions(t *testing.T) {
	const n = 5
	perOp := map[string]string{}
	for _, op := range DomainOps() {
		partitioned{service: "domain", names: 2, by: []int{1, 2}, tenants: true}.add(perOp, "root", op, n)
	}
	transform := func(m map[string]string, subject string) string {
		t.Helper()
		for src, dst := range m {
			tr, err := server.NewSubjectTransform(src, dst)
			if err != nil {
				t.Fatalf("%s → %s: %v", src, dst, err)
			}
			if out, err := tr.Match(subject); err == nil {
				return out
			}
		}
		return ""
	}
	one := DomainMappings("root", n)
	seen := map[string]bool{}
	for r := range 40 {
		for _, op := range DomainOps() {
			for _, subject := range []string{Domain("root", op, "app", fmt.Sprint("pool", r)),
				TenantDomain("TENANT_A", "root", op, fmt.Sprint("ns", r), "x")} {
				want, got := transform(perOp, subject), transform(one, subject)
				if want == "" || got != want {
					t.Fatalf("%s: mapped to %q, want %q", subject, got, want)
				}
				seen[strings.Split(got, ".")[4]] = true
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("partitions reached %v, want all %d", seen, n)
	}
	if got := transform(one, Domain("root", "nosuchop", "app", "x")); !strings.HasPrefix(got, "allot.root.domain.p.") || !strings.HasSuffix(got, ".nosuchop.app.x") {
		t.Fatalf("an unknown operation maps to %q, want a partition's subject", got)
	}
}
