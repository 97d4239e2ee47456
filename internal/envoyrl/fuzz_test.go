package envoyrl_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/envoyrl"
)

// FuzzParse: any input parses or fails with a *ConfigError, never panics;
// what parses compiles and decides; what allot accepts the reference
// accepts, unless it uses allot's extensions.
func FuzzParse(f *testing.F) {
	for _, doc := range parseCaseDocs() {
		f.Add([]byte(doc))
	}
	files, _ := filepath.Glob(filepath.Join(referenceConfig, "*.yaml"))
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var strictOK bool
		for _, ref := range []bool{false, true} {
			ds, err := envoyrl.Parse("f.yaml", data, envoyrl.ParseOptions{Reference: ref})
			var ce *envoyrl.ConfigError
			if err != nil {
				if !errors.As(err, &ce) {
					t.Fatalf("reference=%t: %T %v, want a *ConfigError", ref, err, err)
				}
				if ref && strictOK && !bytes.Contains(data, []byte("unit_multiplier")) &&
					!bytes.Contains(data, []byte("---")) && !bytes.Contains(data, []byte("...")) {
					t.Fatalf("allot accepts what the reference refuses: %v", err)
				}
				continue
			}
			if !ref {
				strictOK = true
			}
			cfg, err := envoyrl.NewConfig(ds, envoyrl.ConfigOptions{MergeDomains: true})
			if err != nil {
				if !errors.As(err, &ce) {
					t.Fatalf("NewConfig: %T %v, want a *ConfigError", err, err)
				}
				continue
			}
			lim := envoyrl.NewLimiter(cfg, &envoyrl.MemoryStore{}, envoyrl.Options{Headers: envoyrl.DefaultHeaderNames()})
			for _, d := range ds {
				req := &rlspb.RateLimitRequest{Domain: d.Name}
				for _, desc := range d.Descriptors {
					req.Descriptors = append(req.Descriptors, pathTo(desc))
				}
				if len(req.Descriptors) == 0 {
					continue
				}
				if _, err := lim.ShouldRateLimit(context.Background(), time.Unix(1_700_000_000, 0), req); err != nil {
					t.Fatalf("ShouldRateLimit on a parsed configuration: %v", err)
				}
			}
		}
	})
}

// pathTo is a request descriptor that walks from desc down its first
// children.
func pathTo(desc envoyrl.Descriptor) *rlv3.RateLimitDescriptor {
	out := &rlv3.RateLimitDescriptor{}
	for {
		out.Entries = append(out.Entries, &rlv3.RateLimitDescriptor_Entry{Key: desc.Key, Value: desc.Value})
		if len(desc.Descriptors) == 0 {
			return out
		}
		desc = desc.Descriptors[0]
	}
}

// FuzzShouldRateLimit: any request, as bytes off the wire, is answered or
// refused with a *RequestError or a store error, never a panic.
func FuzzShouldRateLimit(f *testing.F) {
	for _, sc := range scenarios() {
		for _, st := range sc.Steps {
			b, err := proto.Marshal(st.Req)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, int64(1_795_786_620))
		}
	}
	cfg := loadConfigDir(f, referenceConfig)
	f.Fuzz(func(t *testing.T, data []byte, unix int64) {
		var req rlspb.RateLimitRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		for _, opts := range []envoyrl.Options{
			{Headers: envoyrl.XRateLimitHeaderNames()},
			{GlobalShadowMode: true, StopIncrementWhenOverLimit: true, Reference: true},
		} {
			lim := envoyrl.NewLimiter(cfg, &envoyrl.MemoryStore{}, opts)
			resp, err := lim.ShouldRateLimit(context.Background(), time.Unix(unix, 0), &req)
			if err != nil {
				continue
			}
			if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
				t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
			}
		}
	})
}
