package quotaserver_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
	"github.com/allot/allot/quotaserver"
)

// TestNegativeTokensAre400: negative tokens are a malformed request, a 400
// in every form a take arrives in (JSON on the plain and the bucket's
// subject, binary protobuf), not a decision: nothing is counted, also in
// shadow mode.
func TestNegativeTokensAre400(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	cfg := namespaces(&quota.Namespace{Name: "logins", Buckets: map[string]*quota.Spec{"alice": tokenBucket(5, 1, 0)}})
	srv := serve(t, nc, quotaserver.Options{Config: sources.QuotaFunc(func() *quota.Config { return cfg }), Shadow: true, Logger: quiet()})
	tokens := int64(-1)
	pb, err := proto.Marshal(&allotpb.QuotaTakeRequest{Bucket: "logins:alice", Tokens: &tokens})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*nats.Msg{
		{Subject: quotaserver.TakeSubject("root"), Data: []byte(`{"bucket":"logins:alice","tokens":-1}`)},
		{Subject: quotaserver.BucketSubject("root", "take", "logins", "alice"), Data: []byte(`{"tokens":-3}`)},
		{Subject: quotaserver.TakeSubject("root"), Data: pb, Header: nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}},
	} {
		r, err := nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := r.Header.Get("Nats-Service-Error-Code"); code != "400" || !strings.Contains(r.Header.Get("Nats-Service-Error"), "tokens") {
			t.Errorf("%s %q: code %q, error %q; want 400 about tokens", m.Subject, m.Data, code, r.Header.Get("Nats-Service-Error"))
		}
	}
	if st := srv.Stats(); st.Events["logins"] != (quota.Events{}) || st.ShadowWouldRefuse != 0 {
		t.Errorf("negative takes were counted: %+v, shadow would refuse %d", st.Events, st.ShadowWouldRefuse)
	}
}

// TestDocsNameOnlyWireReasons: every REJECTED reason docs/quota.md names
// is one subjects.md lists for the reply's reason field: a reason the
// server never sends (a malformed request is a 400) must not be promised.
func TestDocsNameOnlyWireReasons(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	subjects, quotaDoc := read("../subjects.md"), read("../docs/quota.md")
	_, row, ok := strings.Cut(subjects, "| `reason` | for `REJECTED`:")
	if !ok {
		t.Fatal("subjects.md has no reason row")
	}
	row, _, _ = strings.Cut(row, "\n")
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(row, -1) {
		listed[m[1]] = true
	}
	named := regexp.MustCompile("REJECTED\\s+`\"([a-z_]+)\"`").FindAllStringSubmatch(quotaDoc, -1)
	if len(named) < 5 {
		t.Fatalf("found %d REJECTED reasons in docs/quota.md; the pattern no longer matches", len(named))
	}
	for _, m := range named {
		if !listed[m[1]] {
			t.Errorf("docs/quota.md says REJECTED %q, which subjects.md does not list as a reason (%v)", m[1], listed)
		}
	}
}
