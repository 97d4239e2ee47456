package quotaserver_test

import (
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

// BenchmarkTake measures a binary take through an embedded server, one
// request at a time, against an echo responder of the same payload on the
// same server ("echo"): the difference is the serving path's own cost.
func BenchmarkTake(b *testing.B) {
	s := natstest.Server(b)
	nc := natstest.Conn(b, s)
	cfg := namespaces(&quota.Namespace{Name: "api", Dynamic: &quota.Spec{Algorithm: quota.TokenBucket,
		Size: 1 << 40, FillRate: 1 << 30, WaitTimeout: time.Second, MaxDebt: time.Second, MaxTokensPerRequest: 10}, MaxDynamicBuckets: 10})
	r, _ := runReplica(b, natstest.Conn(b, s), "a", 0, 1, sources.QuotaFunc(func() *quota.Config { return cfg }))
	waitServing(b, r)
	if _, err := natstest.Conn(b, s).Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		b.Fatal(err)
	}
	data, err := proto.Marshal(&allotpb.QuotaTakeRequest{})
	if err != nil {
		b.Fatal(err)
	}
	h := nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}}
	for _, subject := range []string{"echo", quotaserver.BucketSubject("root", "take", "api", "k")} {
		b.Run(subject, func(b *testing.B) {
			for b.Loop() {
				m, err := nc.RequestMsg(&nats.Msg{Subject: subject, Header: h, Data: data}, 5*time.Second)
				if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
					b.Fatalf("%v %v", err, m.Header)
				}
			}
		})
	}
}
