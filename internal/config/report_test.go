package config

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/natstest"
)

func sampleStatus(rev uint64, rejected bool) *Status {
	st := &Status{Bucket: DefaultBucket, Generation: 4, Fallback: "builtin:default", Unmatched: UnmatchedDefault,
		Keys: []KeyStatus{
			{Key: "templates.default", Name: "default", Revision: 1, Glob: "*"},
			{Key: "templates.mysql-main", Name: "mysql-main", Revision: rev, Glob: "mysql/main"},
		}}
	if rejected {
		st.Keys[1].Rejected = []Rejection{{Revision: rev + 1, Error: "capacity: -5 is negative", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	}
	return st
}

func TestFormatStatus(t *testing.T) {
	var buf bytes.Buffer
	if err := FormatStatus(&buf, nil); err != nil || !strings.Contains(buf.String(), "no coordinators") {
		t.Errorf("empty: %q %v", buf.String(), err)
	}
	buf.Reset()
	sts := []CoordinatorStatus{
		{Node: "node-a", ServerID: "S1", ID: "i1", Version: "0.1.0", Config: sampleStatus(7, true)},
		{Node: "node-b", ServerID: "S2", ID: "i2", Config: sampleStatus(5, false)},
		{ID: "i3", Err: "reply carries no configuration status"},
	}
	if err := FormatStatus(&buf, sts); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"coordinator node-a server S1 instance i1 version 0.1.0",
		"templates.mysql-main  7",
		"newer revision 8 rejected",
		"rejected templates.mysql-main revision 8 at 2026-01-02T03:04:05Z: capacity: -5 is negative",
		"unmatched resources: builtin:default",
		"coordinator instance i3",
		"error: reply carries no configuration status",
		"coordinators disagree",
		"templates.mysql-main: revision 5 on node-b; revision 7 on node-a",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "templates.default:") {
		t.Error("templates.default reported as diverging")
	}
}

// TestGatherStatus registers micro services that answer STATS like
// coordinators do and gathers their replies.
func TestGatherStatus(t *testing.T) {
	s := natstest.Server(t)
	for i, node := range []string{"node-b", "node-a"} {
		nc := natstest.Conn(t, s)
		data := map[string]any{"node": node, "server_id": s.ID(), "config": sampleStatus(uint64(3+i), false)}
		svc, err := micro.AddService(nc, micro.Config{
			Name: ServiceName, Version: "0.1.0",
			StatsHandler: func(*micro.Endpoint) any { return data },
			Endpoint: &micro.EndpointConfig{Subject: "allot.test." + node,
				Handler: micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(nil) })},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
	}
	// A service of another name must not answer.
	other, err := micro.AddService(natstest.Conn(t, s), micro.Config{Name: "other", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop()

	nc := natstest.Conn(t, s)
	sts, err := GatherStatus(testCtx(t), nc, ServiceName, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 2 || sts[0].Node != "node-a" || sts[1].Node != "node-b" {
		t.Fatalf("gathered %+v", sts)
	}
	if sts[0].Config == nil || sts[0].Config.Keys[1].Revision != 4 || sts[0].ServerID != s.ID() || sts[0].ID == "" {
		t.Errorf("node-a: %+v", sts[0])
	}
	// Nobody listening: no replies, no error.
	none, err := GatherStatus(testCtx(t), nc, "nobody", 200*time.Millisecond)
	if err != nil || len(none) != 0 {
		t.Errorf("no service: %v %v", none, err)
	}
}

func TestDecodeStatsReply(t *testing.T) {
	top := `{"type":"io.nats.micro.v1.stats_response","name":"allot","id":"X","version":"1.0.0","data":{"node":"n","server_id":"S","config":{"bucket":"allot_config","generation":2,"keys":[]}}}`
	cs, err := DecodeStatsReply([]byte(top))
	if err != nil || cs.Node != "n" || cs.Config == nil || cs.Config.Generation != 2 {
		t.Errorf("top-level data: %+v %v", cs, err)
	}
	cs, err = DecodeStatsReply([]byte(`{"id":"Y","endpoints":[{"data":null},{"data":{"x":1}}]}`))
	if err != nil || cs.Err == "" {
		t.Errorf("no config: %+v %v", cs, err)
	}
	if _, err := DecodeStatsReply([]byte(`nope`)); err == nil {
		t.Error("garbage decoded")
	}
}
