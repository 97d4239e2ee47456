package rls_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/envoyrl"
)

// The reference's recorded replies (internal/envoyrl, TestRecordReference)
// and the configuration they answer.
const (
	referenceDir    = "../envoyrl/testdata/reference"
	recordingFile   = referenceDir + "/recording.json"
	referenceConfig = referenceDir + "/config"
)

type recording struct {
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

// profiles are the reference's settings of each recorded profile, as
// envoyrl.Options, and the environment they were recorded with.
var profiles = map[string]struct {
	env  string
	opts envoyrl.Options
}{
	"default": {"LIMIT_RESPONSE_HEADERS_ENABLED=true LIMIT_LIMIT_HEADER=x-ratelimit-limit LIMIT_REMAINING_HEADER=x-ratelimit-remaining LIMIT_RESET_HEADER=x-ratelimit-reset",
		envoyrl.Options{Headers: envoyrl.XRateLimitHeaderNames()}},
	"shadowstop": {"SHADOW_MODE=true STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true",
		envoyrl.Options{GlobalShadowMode: true, StopIncrementWhenOverLimit: true}},
	"quota": {"QUOTA_MODE=true", envoyrl.Options{GlobalQuotaMode: true}},
}

func loadRecording(t testing.TB) *recording {
	t.Helper()
	data, err := os.ReadFile(recordingFile)
	if err != nil {
		t.Fatal(err)
	}
	var rec recording
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	for name, env := range rec.Profiles {
		if p, ok := profiles[name]; !ok || p.env != env {
			t.Fatalf("the recording's profile %s (%s) is not the one this test knows", name, env)
		}
	}
	return &rec
}

// step is a recorded step decoded.
type step struct {
	recordedStep
	req  *rlspb.RateLimitRequest
	want *rlspb.RateLimitResponse
}

// steps decodes sc's steps with every domain renamed by rename.
func steps(t testing.TB, sc recordedScenario, rename func(string) string) []step {
	t.Helper()
	out := make([]step, len(sc.Steps))
	for i, st := range sc.Steps {
		out[i].recordedStep = st
		out[i].req = new(rlspb.RateLimitRequest)
		if err := protojson.Unmarshal(st.Request, out[i].req); err != nil {
			t.Fatal(err)
		}
		if d := out[i].req.GetDomain(); d != "" {
			out[i].req.Domain = rename(d)
		}
		if st.Error == "" {
			out[i].want = new(rlspb.RateLimitResponse)
			if err := protojson.Unmarshal(st.Response, out[i].want); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

var domainLine = regexp.MustCompile(`(?m)^domain: *(\S+) *$`)

// configFiles returns the reference's configuration files by domain.
func configFiles(t testing.TB) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(referenceConfig)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(referenceConfig, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m := domainLine.FindSubmatch(data)
		if m == nil {
			t.Fatalf("%s names no domain", e.Name())
		}
		out[string(m[1])] = data
	}
	return out
}

// putDomains stores every reference domain in kv, renamed by rename, under
// envoy.<renamed domain>, as `nats kv put` or `allot config put` would.
func putDomains(t testing.TB, kv jetstream.KeyValue, rename func(string) string) []string {
	t.Helper()
	var names []string
	for domain, data := range configFiles(t) {
		renamed := domainLine.ReplaceAll(data, []byte("domain: "+rename(domain)))
		if _, err := kv.Put(context.Background(), config.EnvoyKey(rename(domain)), renamed); err != nil {
			t.Fatal(err)
		}
		names = append(names, rename(domain))
	}
	sort.Strings(names)
	return names
}

// suffix returns a rename that gives every domain the suffix s: each
// scenario runs on domains of its own, so on counters of its own, as the
// reference ran each on a flushed Redis.
func suffix(s string) func(string) string { return func(d string) string { return d + s } }

// checkReply compares a reply with the reference's, field by field;
// what names the step in failures.
func checkReply(t *testing.T, what string, st step, got *rlspb.RateLimitResponse, err error) {
	t.Helper()
	if st.Error != "" {
		if err == nil {
			t.Errorf("%s: the reference failed (%s), allot answered %v", what, st.Error, got)
			return
		}
		// The reference answers Unknown; allot says whose fault it is.
		// Its request errors have the reference's words.
		if ref, ok := strings.CutPrefix(st.Error, "Unknown: rate limit "); ok && !strings.Contains(status.Convert(err).Message(), ref) {
			t.Errorf("%s: error %v, the reference's %q", what, err, st.Error)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: error %v, the reference answered %s", what, err, st.Response)
		return
	}
	if !proto.Equal(st.want, got) {
		t.Errorf("%s:\n got  %s\n want %s", what, protojson.Format(got), st.Response)
	}
}

// label names a step in failures.
func label(sc recordedScenario, i int, st step) string {
	return fmt.Sprintf("%s, step %d (%s)", sc.Name, i, st.What)
}

// stepClock is a clock tests set to each recorded step's second.
type stepClock struct{ sec atomic.Int64 }

func (c *stepClock) set(sec int64)  { c.sec.Store(sec) }
func (c *stepClock) now() time.Time { return time.Unix(c.sec.Load(), 0) }
