package quotaserver_test

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/quotaserver"
)

// shadowReply is the JSON reply of a take with the shadow fields.
type shadowReply struct {
	Status       string `json:"status"`
	Wait         string `json:"wait"`
	Reason       string `json:"reason"`
	Shadow       bool   `json:"shadow"`
	ShadowStatus string `json:"shadow_status"`
}

func shadowTake(t *testing.T, nc *nats.Conn, bucket string) shadowReply {
	t.Helper()
	m, code := request(t, nc, quotaserver.TakeSubject("root"), `{"bucket":"`+bucket+`"}`)
	if code != "" {
		t.Fatalf("take %s: error %s", bucket, code)
	}
	var r shadowReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatalf("reply %s: %v", m.Data, err)
	}
	return r
}

// TestShadowNamespace: through the configuration bucket, a namespace with
// "shadow": true answers every take OK while its bucket decides as usual
// and the refusals are counted; another namespace still refuses.
func TestShadowNamespace(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	kv, w := watchConfig(t, nc)
	// A token per 1000s: the takes below find the bucket as the ones
	// before left it, however slow the machine (at 1/s, a second between
	// two takes refilled it).
	putNamespace(t, kv, w, "logins", `{"shadow": true, "buckets": {"alice": {"size": 2, "fill_rate": 0.001, "wait_timeout": "0s"}}}`)
	putNamespace(t, kv, w, "strict", `{"buckets": {"alice": {"size": 2, "fill_rate": 0.001, "wait_timeout": "0s"}}}`)
	r, _ := runReplica(t, nc, "a", 0, 1, sources.WatchedQuota(w))
	waitServing(t, r)
	srv := r.Server()

	for i := range 5 {
		got := shadowTake(t, nc, "logins:alice")
		want := shadowReply{Status: "OK", Wait: "0s", Shadow: true, ShadowStatus: "OK"}
		if i >= 2 {
			want.ShadowStatus, want.Reason = "REJECTED", quota.ReasonNoWait // wait_timeout 0s
		}
		if got != want {
			t.Errorf("shadow take %d: %+v, want %+v", i, got, want)
		}
	}
	for i := range 3 {
		got := shadowTake(t, nc, "strict:alice")
		if want := map[bool]string{true: "OK", false: "REJECTED"}[i < 2]; got.Status != want || got.Shadow || got.ShadowStatus != "STATUS_UNSPECIFIED" {
			t.Errorf("strict take %d: %+v, want %s and no shadow", i, got, want)
		}
	}
	st := srv.Stats()
	if st.Shadow || st.ShadowWouldRefuse != 3 || st.ShadowWouldRefuseByNS["logins"] != 3 || len(st.ShadowWouldRefuseByNS) != 1 {
		t.Errorf("stats: shadow %v, would refuse %d, by namespace %v; want false, 3, logins 3", st.Shadow, st.ShadowWouldRefuse, st.ShadowWouldRefuseByNS)
	}
	// The bucket counted what it decided: quotaservice's events see the
	// refusals.
	if ev := st.Events["logins"]; ev.NoWait != 3 {
		t.Errorf("logins events %+v, want 3 no_wait", ev)
	}
}

// TestShadowServer: Options.Shadow answers every take OK, also one no
// bucket answers (counted, but under no namespace: the request's is not
// configured).
func TestShadowServer(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	// A token per 1000s: the second take finds the bucket empty however
	// slow the machine (at 1/s, a second between the takes refilled it).
	cfg := namespaces(&quota.Namespace{Name: "logins", Buckets: map[string]*quota.Spec{"alice": tokenBucket(1, 0.001, 0)}})
	srv := serve(t, nc, quotaserver.Options{Config: sources.QuotaFunc(func() *quota.Config { return cfg }), Shadow: true, Logger: quiet()})
	for _, tc := range []struct{ bucket, shadowStatus, reason string }{
		{"logins:alice", "OK", ""},
		{"logins:alice", "REJECTED", quota.ReasonNoWait}, // wait_timeout 0
		{"nope:x", "REJECTED", quota.ReasonNoBucket},
	} {
		got := shadowTake(t, nc, tc.bucket)
		if got.Status != "OK" || !got.Shadow || got.ShadowStatus != tc.shadowStatus || got.Reason != tc.reason {
			t.Errorf("%s: %+v, want OK standing for %s %s", tc.bucket, got, tc.shadowStatus, tc.reason)
		}
	}
	st := srv.Stats()
	if !st.Shadow || st.ShadowWouldRefuse != 2 || st.ShadowWouldRefuseByNS["logins"] != 1 || len(st.ShadowWouldRefuseByNS) != 1 {
		t.Errorf("stats: shadow %v, would refuse %d, by namespace %v; want true, 2, logins 1", st.Shadow, st.ShadowWouldRefuse, st.ShadowWouldRefuseByNS)
	}
}
