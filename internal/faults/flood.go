package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Flood describes a flood of newcomers' capacity.get requests to node
// "root" for For: requests of one resource each from IDs client ids, as
// fast as the server takes them (a flush every 256), and BigPerSecond
// requests of 1,000 resources a second. Each says the sender waits
// Timeout (Allot-Timeout).
type Flood struct {
	For, Timeout      time.Duration
	IDs, BigPerSecond int
}

// FloodCounts is what a flood's requests got back.
type FloodCounts struct {
	Sent, OK, Refused, Limited, Other int64
	// SentIn is how long the sending took.
	SentIn time.Duration
}

// Answered is how many requests got an answer of any kind.
func (c FloodCounts) Answered() int64 { return c.OK + c.Refused + c.Limited + c.Other }

func (c FloodCounts) String() string {
	return fmt.Sprintf("flood=%d sent_in=%s leases=%d refused_503=%d limited_429=%d other=%d unanswered=%d",
		c.Sent, c.SentIn.Round(time.Millisecond), c.OK, c.Refused, c.Limited, c.Other, c.Sent-c.Answered())
}

// envFlood carries a Flood (JSON) to a child process that runs it.
const envFlood = "ALLOT_FAULTS_FLOOD"

// floodReport starts the line on which a flood child reports.
const floodReport = "FLOODCOUNTS "

// FloodChild is a flood running in a child process, so that sending it
// takes no CPU time from the agents and the NATS server of the test.
type FloodChild struct {
	cmd *exec.Cmd
	out *os.File
}

// StartFlood starts f against url in a child process.
func StartFlood(tb testing.TB, url string, f Flood) *FloodChild {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatalf("find test binary: %v", err)
	}
	spec, _ := json.Marshal(f)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envURL+"="+url, envFlood+"="+string(spec))
	out := OutputFile(tb, "flood")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start flood: %v", err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &FloodChild{cmd: cmd, out: out}
}

// Wait waits until the flood has been sent and every request answered
// (or five minutes passed), and returns what they got.
func (c *FloodChild) Wait(tb testing.TB) FloodCounts {
	tb.Helper()
	if err := c.cmd.Wait(); err != nil {
		tb.Fatalf("flood: %v\n%s", err, ReadOutput(c.out))
	}
	out := ReadOutput(c.out)
	i := strings.LastIndex(out, floodReport)
	var counts FloodCounts
	if i < 0 {
		tb.Fatalf("the flood reported nothing:\n%s", out)
	}
	line, _, _ := strings.Cut(out[i+len(floodReport):], "\n")
	if err := json.Unmarshal([]byte(line), &counts); err != nil {
		tb.Fatalf("flood report %q: %v", line, err)
	}
	return counts
}

// runFlood is a flood child's work: it sends the flood, waits until
// every request is answered or five minutes have passed, and reports.
func runFlood(url, spec string) error {
	var f Flood
	if err := json.Unmarshal([]byte(spec), &f); err != nil {
		return fmt.Errorf("flood spec: %w", err)
	}
	nc, err := nats.Connect(url, nats.Name("faults flood"))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	defer nc.Close()
	var rs Replies
	inbox := nats.NewInbox()
	sub, err := nc.Subscribe(inbox+".*", rs.Count)
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	hdr := nats.Header{wire.HeaderContentType: {wire.ContentProtobuf}, wire.HeaderTimeout: {strconv.FormatInt(f.Timeout.Milliseconds(), 10)}}
	subject := coordinator.Subject("root", "capacity.get")
	big := &allotpb.GetCapacityRequest{}
	for k := range wire.MaxResourcesPerReq {
		big.Resource = append(big.Resource, &allotpb.ResourceRequest{ResourceId: "big-" + strconv.Itoa(k), Wants: 1})
	}
	var sent int64
	send := func(req *allotpb.GetCapacityRequest) error {
		data, _ := proto.Marshal(req)
		sent++
		return nc.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox + "." + strconv.FormatInt(sent, 10), Header: hdr, Data: data})
	}
	start := time.Now()
	nextBig := start
	for n := 0; time.Since(start) < f.For; n++ {
		if f.BigPerSecond > 0 && !time.Now().Before(nextBig) {
			big.ClientId = "flood-big-" + strconv.Itoa(n)
			if err := send(big); err != nil {
				return err
			}
			nextBig = nextBig.Add(time.Second / time.Duration(f.BigPerSecond))
		}
		if err := send(&allotpb.GetCapacityRequest{ClientId: "flood-" + strconv.Itoa(n%f.IDs),
			Resource: []*allotpb.ResourceRequest{{ResourceId: "flood-" + strconv.Itoa(n%64), Wants: 1}}}); err != nil {
			return err
		}
		if n%256 == 255 {
			// What the server has taken paces the sender.
			if err := nc.Flush(); err != nil {
				return err
			}
		}
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	sentIn := time.Since(start)
	poll.Ok(5*time.Minute, func() bool { return rs.Total() >= sent })
	b, _ := json.Marshal(FloodCounts{Sent: sent, OK: rs.OK.Load(), Refused: rs.Refused.Load(), Limited: rs.Limited.Load(), Other: rs.Other.Load(), SentIn: sentIn})
	fmt.Println(floodReport + string(b))
	return nil
}

// Replies counts the answers to requests by their micro error code:
// leases (no code), 503 (overloaded), 429 (a tenant over its rate) and
// anything else. Count is a message handler.
type Replies struct{ OK, Refused, Limited, Other atomic.Int64 }

// Count tallies the answer m.
func (r *Replies) Count(m *nats.Msg) {
	switch m.Header.Get(micro.ErrorCodeHeader) {
	case "":
		r.OK.Add(1)
	case "503":
		r.Refused.Add(1)
	case "429":
		r.Limited.Add(1)
	default:
		r.Other.Add(1)
	}
}

// Total is every answer counted.
func (r *Replies) Total() int64 {
	return r.OK.Load() + r.Refused.Load() + r.Limited.Load() + r.Other.Load()
}
