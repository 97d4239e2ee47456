package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/envoywire"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/quotaserver"
)

// quotaSnippet is the shipped subject mapping of the quota partitions, and
// its partition count.
const (
	quotaSnippet    = "nats/quota/partitions.conf"
	quotaPartitions = 4
)

// TestQuotaMappingMatchesCode: the shipped snippet is what
// quotaserver.Mappings and domainwire.Mappings write for node root and 4
// partitions (allot coordinator --quota-partitions serves both), so the
// docs and `allot up` route alike.
func TestQuotaMappingMatchesCode(t *testing.T) {
	data, err := os.ReadFile(quotaSnippet)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*"([^"]+)":\s*"([^"]+)"`).FindAllStringSubmatch(string(data), -1) {
		got[m[1]] = m[2]
	}
	want := quotaserver.Mappings("root", quotaPartitions)
	maps.Copy(want, domainwire.Mappings("root", quotaPartitions))
	maps.Copy(want, envoywire.Mappings("root", quotaPartitions))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s maps\n%v\nwant (quotaserver.Mappings)\n%v", quotaSnippet, got, want)
	}
}

// TestQuotaMapping starts a server from a config that includes the shipped
// snippet, runs one quota replica per partition, and checks that bucket
// subjects of many namespaces are all answered, by every partition in
// turn, and that the plain subject reaches them too.
func TestQuotaMapping(t *testing.T) {
	dir := t.TempDir()
	snippet, err := os.ReadFile(quotaSnippet)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "quota"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "quota", "partitions.conf"), snippet, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("listen: 127.0.0.1:-1\njetstream { store_dir: %q }\ninclude quota/partitions.conf\n", filepath.Join(dir, "store"))
	if err := os.WriteFile(filepath.Join(dir, "server.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startConfig(t, filepath.Join(dir, "server.conf"))
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	spec := &quota.Spec{Algorithm: quota.TokenBucket, Size: 10, FillRate: 1, MaxDebt: time.Second, MaxTokensPerRequest: 10}
	cfg := &quota.Config{Namespaces: map[string]*quota.Namespace{}}
	var names []string
	for i := range 16 {
		ns := fmt.Sprintf("tenant%d", i)
		names = append(names, ns)
		cfg.Namespaces[ns] = &quota.Namespace{Name: ns, Dynamic: spec, MaxDynamicBuckets: 10}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var reps []*quotaserver.Replica
	done := make(chan struct{}, quotaPartitions)
	for p := range quotaPartitions {
		r, err := quotaserver.NewReplica(nc, quotaserver.ReplicaOptions{Options: quotaserver.Options{
			ServerID: fmt.Sprintf("r%d", p), Partition: p, Partitions: quotaPartitions,
			Config: sources.QuotaFunc(func() *quota.Config { return cfg }), Logger: slog.New(slog.DiscardHandler)}})
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, r)
		go func() {
			defer func() { done <- struct{}{} }()
			if err := r.Run(ctx); err != nil {
				t.Errorf("partition %d: %v", p, err)
			}
		}()
	}
	defer func() {
		cancel()
		for range quotaPartitions {
			<-done
		}
	}()
	poll.For(t, 15*time.Second, poll.Interval, func() error {
		serving := 0
		for _, r := range reps {
			if r.Status().Serving {
				serving++
			}
		}
		if serving != quotaPartitions {
			return fmt.Errorf("%d of %d partitions serving", serving, quotaPartitions)
		}
		return nil
	})
	for _, ns := range names {
		for _, subject := range []string{quotaserver.BucketSubject("root", "take", ns, "k"), quotaserver.TakeSubject("root")} {
			m, err := nc.Request(subject, []byte(`{"bucket":"`+ns+`:k"}`), 30*time.Second)
			if err != nil {
				t.Fatalf("take %s:k on %s: %v", ns, subject, err)
			}
			var r struct{ Status string }
			if err := json.Unmarshal(m.Data, &r); err != nil || r.Status != "OK" {
				t.Fatalf("take %s:k on %s: %s (%v)", ns, subject, m.Data, err)
			}
		}
	}
	for p, r := range reps {
		if st := r.Server().Stats(); st.Takes == 0 {
			t.Errorf("partition %d decided nothing: the mapping does not reach it", p)
		}
	}
}
