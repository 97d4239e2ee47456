package opstatus

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func sampleStatus(rev uint64, rejected bool) *configkv.Status {
	st := &configkv.Status{Bucket: configkv.DefaultBucket, Generation: 4, Fallback: "builtin:default", Unmatched: config.UnmatchedDefault,
		Keys: []configkv.KeyStatus{
			{Key: "templates.default", Name: "default", Revision: 1, Glob: "*"},
			{Key: "templates.mysql-main", Name: "mysql-main", Revision: rev, Glob: "mysql/main"},
		}}
	if rejected {
		st.Keys[1].Rejected = []configkv.Rejection{{Revision: rev + 1, Error: "capacity: -5 is negative", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
		st.Keys[1].State = "serving revision 7 because revision 8 is invalid: capacity: -5 is negative"
	}
	return st
}

func TestFormat(t *testing.T) {
	var buf bytes.Buffer
	if err := Format(&buf, nil); err != nil || !strings.Contains(buf.String(), "no coordinator replica answered") {
		t.Errorf("empty: %q %v", buf.String(), err)
	}
	buf.Reset()
	rs := []Replica{
		{Node: "root", ServerID: "S1", ID: "i1", Version: "0.1.0", Role: "leader", Serving: true, Term: 3, Config: sampleStatus(7, true)},
		{Node: "root", ServerID: "S2", ID: "i2", Role: "follower", Term: 3, Config: sampleStatus(5, false)},
		{ID: "i3", Err: "reply carries no configuration status"},
	}
	if err := Format(&buf, rs); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"replica S1 of node root: leader, serving term 3 (instance i1, version 0.1.0)",
		"replica S2 of node root: follower, leader's term 3",
		"templates.mysql-main  7",
		"serving revision 7 because revision 8 is invalid",
		"rejected templates.mysql-main revision 8 at 2026-01-02T03:04:05Z: capacity: -5 is negative",
		"unmatched resources: builtin:default",
		"replica instance i3",
		"error: reply carries no configuration status",
		"replicas disagree",
		"templates.mysql-main: revision 5 on S2; revision 7 on S1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "templates.default:") {
		t.Error("templates.default reported as diverging")
	}
}

// addService registers a micro service that answers STATS with data, and
// flushes its connection so that the subscriptions are live at the server
// before another connection asks (without it the test flaked under load).
func addService(t *testing.T, s *server.Server, name string, data any) {
	t.Helper()
	nc := natstest.Conn(t, s)
	svc, err := micro.AddService(nc, micro.Config{
		Name: name, Version: "0.1.0",
		StatsHandler: func(*micro.Endpoint) any { return data },
		Endpoint: &micro.EndpointConfig{Subject: "allot.test." + nc.Opts.Name + t.Name(),
			Handler: micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(nil) })},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestGather registers micro services that answer STATS like replicas
// and coordinators do and gathers their replies.
func TestGather(t *testing.T) {
	s := natstest.Server(t)
	addService(t, s, ReplicaService, map[string]any{"node": "root", "server_id": "b", "role": "follower", "term": 2, "serving": false, "config": sampleStatus(3, false)})
	addService(t, s, ReplicaService, map[string]any{"node": "root", "server_id": "a", "role": "leader", "term": 2, "serving": true, "config": sampleStatus(4, false)})
	// The leader's coordinator answers too; it must not count twice.
	addService(t, s, CoordinatorService, map[string]any{"node": "root", "server_id": "a", "term": 2, "config": sampleStatus(4, false)})
	// A coordinator run without the election answers only as coordinator.
	addService(t, s, CoordinatorService, map[string]any{"node": "other", "server_id": "c", "term": "5", "config": sampleStatus(4, false)})
	// A service of another name must not answer.
	addService(t, s, "other", map[string]any{"node": "x"})

	nc := natstest.Conn(t, s)
	rs, err := Gather(testCtx(t), nc, ReplicaService, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].ServerID != "a" || rs[1].ServerID != "b" {
		t.Fatalf("gathered %+v", rs)
	}
	if a := rs[0]; a.Config == nil || a.Config.Keys[1].Revision != 4 || a.Role != "leader" || !a.Serving || a.Term != 2 || a.ID == "" || a.Service != ReplicaService {
		t.Errorf("a: %+v", a)
	}
	if b := rs[1]; b.Role != "follower" || b.Serving {
		t.Errorf("b: %+v", b)
	}

	all, err := GatherAll(testCtx(t), nc, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[0].ServerID != "c" || !all[0].Serving || all[0].Term != 5 || all[1].Service != ReplicaService || all[2].ServerID != "b" {
		t.Fatalf("GatherAll: %+v", all)
	}

	// Nobody listening: no replies, no error.
	none, err := Gather(testCtx(t), nc, "nobody", 200*time.Millisecond)
	if err != nil || len(none) != 0 {
		t.Errorf("no service: %v %v", none, err)
	}
}

func TestDecodeStatsReply(t *testing.T) {
	top := `{"type":"io.nats.micro.v1.stats_response","name":"allot","id":"X","version":"1.0.0","data":{"node":"n","server_id":"S","term":"3","config":{"bucket":"allot_config","generation":2,"keys":[]}}}`
	rs, err := DecodeStatsReply([]byte(top))
	if err != nil || rs.Node != "n" || rs.Config == nil || rs.Config.Generation != 2 || rs.Term != 3 || !rs.Serving {
		t.Errorf("top-level data: %+v %v", rs, err)
	}
	rs, err = DecodeStatsReply([]byte(`{"id":"Y","endpoints":[{"data":null},{"data":{"x":1}}]}`))
	if err != nil || rs.Err == "" {
		t.Errorf("no config: %+v %v", rs, err)
	}
	rs, err = DecodeStatsReply([]byte(`{"name":"allot-replica","id":"Z","data":{"node":"n","server_id":"S","role":"follower","serving":false}}`))
	if err != nil || rs.Role != "follower" || rs.Err == "" {
		t.Errorf("replica without config: %+v %v", rs, err)
	}
	if _, err := DecodeStatsReply([]byte(`nope`)); err == nil {
		t.Error("garbage decoded")
	}
}
