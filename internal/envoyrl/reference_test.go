package envoyrl_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/envoyrl"
)

// The reference's replies to scenarios(), recorded by TestRecordReference
// against envoyproxy/ratelimit and compared with the Limiter's by
// TestReferenceRecording.
const (
	recordingPath    = "testdata/reference/recording.json"
	referenceConfig  = "testdata/reference/config"
	referenceVersion = "github.com/envoyproxy/ratelimit v1.4.1-0.20260122083618-3fb702589d36"
)

type recording struct {
	Reference string             `json:"reference"`
	Note      string             `json:"note"`
	Profiles  map[string]string  `json:"profiles"`
	Scenarios []recordedScenario `json:"scenarios"`
}

type recordedScenario struct {
	Name    string         `json:"name"`
	Profile string         `json:"profile"`
	Steps   []recordedStep `json:"steps"`
}

type recordedStep struct {
	What     string          `json:"what"`
	Unix     int64           `json:"unix"`
	Request  json.RawMessage `json:"request"`
	Response json.RawMessage `json:"response,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// loadConfigDir parses and compiles every file of dir, as the reference
// loads its runtime directory.
func loadConfigDir(t testing.TB, dir string) *envoyrl.Config {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var domains []envoyrl.Domain
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		ds, err := envoyrl.Parse(e.Name(), data, envoyrl.ParseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		domains = append(domains, ds...)
	}
	cfg, err := envoyrl.NewConfig(domains, envoyrl.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func marshalProto(t testing.TB, m proto.Message) json.RawMessage {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// readJSON decodes the JSON file at path into v.
func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestReferenceRecording(t *testing.T) {
	var rec recording
	readJSON(t, recordingPath, &rec)
	compareRecording(t, &rec)
}

// compareRecording replays every recorded step against a Limiter at the
// recorded second and compares its answer with the reference's.
func compareRecording(t *testing.T, rec *recording) {
	cfg := loadConfigDir(t, referenceConfig)
	scs := scenarios()
	if len(rec.Scenarios) != len(scs) {
		t.Fatalf("the recording has %d scenarios, the code %d: record again (TestRecordReference)", len(rec.Scenarios), len(scs))
	}
	for i, sc := range scs {
		r := rec.Scenarios[i]
		if r.Name != sc.Name || r.Profile != sc.Profile || len(r.Steps) != len(sc.Steps) {
			t.Fatalf("scenario %d is %q/%s with %d steps in the code, %q/%s with %d in the recording: record again",
				i, sc.Name, sc.Profile, len(sc.Steps), r.Name, r.Profile, len(r.Steps))
		}
		t.Run(sc.Name, func(t *testing.T) {
			lim := envoyrl.NewLimiter(cfg, &envoyrl.MemoryStore{}, profiles[sc.Profile].Opts)
			for j, st := range r.Steps {
				var recReq rlspb.RateLimitRequest
				if err := protojson.Unmarshal(st.Request, &recReq); err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(&recReq, sc.Steps[j].Req) {
					t.Fatalf("step %d (%s): the recorded request differs from the code's: record again", j, st.What)
				}
				got, err := lim.ShouldRateLimit(context.Background(), time.Unix(st.Unix, 0), sc.Steps[j].Req)
				label := fmt.Sprintf("step %d (%s) at %d", j, st.What, st.Unix)
				compareStep(t, label, st, got, err)
			}
		})
	}
}

func compareStep(t *testing.T, label string, st recordedStep, got *rlspb.RateLimitResponse, err error) {
	t.Helper()
	if st.Error != "" {
		if err == nil {
			t.Errorf("%s: the reference failed (%s), the Limiter answered %v", label, st.Error, got)
			return
		}
		var re *envoyrl.RequestError
		if errors.As(err, &re) && !strings.Contains(st.Error, re.Msg) {
			t.Errorf("%s: error %q, the reference's %q", label, re.Msg, st.Error)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: error %v, the reference answered %s", label, err, st.Response)
		return
	}
	var want rlspb.RateLimitResponse
	if err := protojson.Unmarshal(st.Response, &want); err != nil {
		t.Fatal(err)
	}
	for _, diff := range diffResponses(&want, got) {
		t.Errorf("%s: %s", label, diff)
	}
}

// diffResponses lists, field by field, how got differs from want.
func diffResponses(want, got *rlspb.RateLimitResponse) []string {
	var diffs []string
	add := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	if want.GetOverallCode() != got.GetOverallCode() {
		add("overall_code %v, the reference's %v", got.GetOverallCode(), want.GetOverallCode())
	}
	if len(want.GetStatuses()) != len(got.GetStatuses()) {
		add("%d statuses, the reference's %d", len(got.GetStatuses()), len(want.GetStatuses()))
		return diffs
	}
	for i, w := range want.GetStatuses() {
		g := got.GetStatuses()[i]
		if w.GetCode() != g.GetCode() {
			add("statuses[%d].code %v, the reference's %v", i, g.GetCode(), w.GetCode())
		}
		if !proto.Equal(w.GetCurrentLimit(), g.GetCurrentLimit()) {
			add("statuses[%d].current_limit %v, the reference's %v", i, g.GetCurrentLimit(), w.GetCurrentLimit())
		}
		if w.GetLimitRemaining() != g.GetLimitRemaining() {
			add("statuses[%d].limit_remaining %d, the reference's %d", i, g.GetLimitRemaining(), w.GetLimitRemaining())
		}
		if !proto.Equal(w.GetDurationUntilReset(), g.GetDurationUntilReset()) {
			add("statuses[%d].duration_until_reset %v, the reference's %v", i, g.GetDurationUntilReset(), w.GetDurationUntilReset())
		}
	}
	headers := func(r *rlspb.RateLimitResponse) string {
		var hs []string
		for _, h := range r.GetResponseHeadersToAdd() {
			hs = append(hs, h.GetKey()+": "+h.GetValue())
		}
		return strings.Join(hs, ", ")
	}
	if headers(want) != headers(got) {
		add("response_headers_to_add [%s], the reference's [%s]", headers(got), headers(want))
	}
	if len(diffs) == 0 && !proto.Equal(want, got) {
		add("responses differ beyond the compared fields: %v, the reference's %v", got, want)
	}
	return diffs
}

// TestRecordReference sends scenarios() to running reference servers and
// writes what they answer to recordingPath, then compares. It runs only
// when ALLOT_ENVOY_REFERENCE names the servers, one per profile
// ("default=127.0.0.1:18081,shadowstop=127.0.0.1:18082,quota=127.0.0.1:18083"),
// each started with its profile's Env, with RUNTIME_* settings that load
// testdata/reference/config, on one Redis that ALLOT_ENVOY_REFERENCE_REDIS
// names (host:port; it is flushed before each scenario).
func TestRecordReference(t *testing.T) {
	spec := os.Getenv("ALLOT_ENVOY_REFERENCE")
	redisAddr := os.Getenv("ALLOT_ENVOY_REFERENCE_REDIS")
	if spec == "" || redisAddr == "" {
		t.Skip("ALLOT_ENVOY_REFERENCE and ALLOT_ENVOY_REFERENCE_REDIS name no running reference; the recording is compared by TestReferenceRecording")
	}
	clients := map[string]rlspb.RateLimitServiceClient{}
	for _, p := range strings.Split(spec, ",") {
		name, addr, ok := strings.Cut(p, "=")
		if _, known := profiles[name]; !ok || !known {
			t.Fatalf("ALLOT_ENVOY_REFERENCE: %q is not profile=host:port with a known profile", p)
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients[name] = rlspb.NewRateLimitServiceClient(conn)
	}
	rec := &recording{
		Reference: referenceVersion,
		Note:      "Replies of envoyproxy/ratelimit (Redis backend) to scenarios(); written by TestRecordReference.",
		Profiles:  map[string]string{},
	}
	for name, p := range profiles {
		rec.Profiles[name] = p.Env
	}
	for _, sc := range scenarios() {
		client := clients[sc.Profile]
		if client == nil {
			t.Fatalf("scenario %q needs profile %q, which ALLOT_ENVOY_REFERENCE does not name", sc.Name, sc.Profile)
		}
		var got *recordedScenario
		for attempt := 0; attempt < 3 && got == nil; attempt++ {
			got = recordScenario(t, client, redisAddr, sc)
		}
		if got == nil {
			t.Fatalf("scenario %q: a request straddled a second three times", sc.Name)
		}
		rec.Scenarios = append(rec.Scenarios, *got)
	}
	out, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(recordingPath, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	compareRecording(t, rec)
}

// recordScenario runs one scenario on flushed counters; nil when a
// request's second could not be known (sent and answered in different
// seconds), so that the caller tries again.
func recordScenario(t *testing.T, client rlspb.RateLimitServiceClient, redisAddr string, sc scenario) *recordedScenario {
	t.Helper()
	flushRedis(t, redisAddr)
	// Start with at least 10 s left in the minute, so that the scenario's
	// minute windows do not roll over unless it waits for that.
	if now := time.Now(); now.Second() >= 50 {
		sleepUntil(now.Truncate(time.Minute).Add(time.Minute + 20*time.Millisecond))
	}
	out := &recordedScenario{Name: sc.Name, Profile: sc.Profile}
	for _, st := range sc.Steps {
		now := time.Now()
		switch st.Wait {
		case nextSecond:
			sleepUntil(now.Truncate(time.Second).Add(time.Second + 20*time.Millisecond))
		case nextMinute:
			sleepUntil(now.Truncate(time.Minute).Add(time.Minute + 20*time.Millisecond))
		default:
			if now.Sub(now.Truncate(time.Second)) > 900*time.Millisecond {
				sleepUntil(now.Truncate(time.Second).Add(time.Second + 20*time.Millisecond))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t0 := time.Now()
		resp, err := client.ShouldRateLimit(ctx, st.Req)
		t1 := time.Now()
		cancel()
		if t0.Unix() != t1.Unix() {
			return nil
		}
		rs := recordedStep{What: st.What, Unix: t0.Unix(), Request: marshalProto(t, st.Req)}
		if err != nil {
			s := status.Convert(err)
			rs.Error = s.Code().String() + ": " + s.Message()
		} else {
			rs.Response = marshalProto(t, resp)
		}
		out.Steps = append(out.Steps, rs)
	}
	return out
}

func sleepUntil(when time.Time) { time.Sleep(time.Until(when)) }

// flushRedis empties the reference's Redis, speaking RESP directly.
func flushRedis(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("*1\r\n$8\r\nFLUSHALL\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || line != "+OK\r\n" {
		t.Fatalf("FLUSHALL: %q, %v", line, err)
	}
}
