package deploy

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

// checkBootstrap decodes an Envoy bootstrap (YAML) strictly with
// go-control-plane's types, as Envoy reads it, and runs Envoy's own
// validation rules on it and on every typed config inside it.
func checkBootstrap(t *testing.T, what string, doc []byte) *bootstrapv3.Bootstrap {
	t.Helper()
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("%s: not an Envoy bootstrap: %v", what, err)
	}
	validate(t, what, b.ProtoReflect())
	return &b
}

// validate runs m's ValidateAll and that of every message packed in an
// Any under it (ValidateAll does not look inside an Any).
func validate(t *testing.T, what string, m protoreflect.Message) {
	t.Helper()
	if v, ok := m.Interface().(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %s: %v", what, m.Descriptor().FullName(), err)
		}
	}
	eachMessage(m, func(sub protoreflect.Message) {
		a, ok := sub.Interface().(*anypb.Any)
		if !ok {
			return
		}
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Errorf("%s: %s: %v", what, a.GetTypeUrl(), err)
			return
		}
		validate(t, what, inner.ProtoReflect())
	})
}

// eachMessage calls f with every message under m, not looking inside an
// Any (f gets the Any).
func eachMessage(m protoreflect.Message, f func(protoreflect.Message)) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		var subs []protoreflect.Message
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				subs = append(subs, v.List().Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				subs = append(subs, mv.Message())
				return true
			})
		case fd.Message() != nil && !fd.IsMap():
			subs = append(subs, v.Message())
		}
		for _, sub := range subs {
			f(sub)
			if _, isAny := sub.Interface().(*anypb.Any); !isAny {
				eachMessage(sub, f)
			}
		}
		return true
	})
}

// TestEnvoySidecarManifest: the shipped sidecar manifest's Envoy
// bootstrap is valid as Envoy checks it, sends ShouldRateLimit and RLQS
// to allot_rls, and that cluster is where the allot container's agent
// listens.
func TestEnvoySidecarManifest(t *testing.T) {
	data, err := os.ReadFile("kubernetes/envoy-sidecar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var bootstrap, agentAddr string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var obj struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name string   `json:"name"`
							Args []string `json:"args"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		switch obj.Kind {
		case "ConfigMap":
			bootstrap = obj.Data["envoy.yaml"]
		case "Deployment":
			for _, c := range obj.Spec.Template.Spec.Containers {
				if c.Name == "allot" && len(c.Args) > 0 && c.Args[0] == "agent" {
					for i, a := range c.Args {
						if a == "--rls-addr" && i+1 < len(c.Args) {
							agentAddr = c.Args[i+1]
						}
					}
				}
			}
		}
	}
	b := checkBootstrap(t, "envoy-sidecar.yaml", []byte(bootstrap))
	js, _ := protojson.Marshal(b)
	for _, want := range []string{`"clusterName":"allot_rls"`, "envoy.extensions.filters.http.ratelimit.v3.RateLimit", "envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig"} {
		if !strings.Contains(string(js), want) {
			t.Errorf("the bootstrap lacks %s", want)
		}
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != "allot_rls" {
			continue
		}
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if agentAddr != sa.GetAddress()+":"+strconv.Itoa(int(sa.GetPortValue())) {
			t.Errorf("allot_rls is %s:%d, the agent listens on %q", sa.GetAddress(), sa.GetPortValue(), agentAddr)
		}
	}
}

// TestEnvoyDocBootstraps: every Envoy bootstrap in docs/envoy.md (a yaml
// block starting with static_resources) is valid as Envoy checks it.
func TestEnvoyDocBootstraps(t *testing.T) {
	data, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(static_resources:.*?)```").FindAllStringSubmatch(string(data), -1)
	if len(blocks) == 0 {
		t.Fatal("docs/envoy.md has no Envoy bootstrap")
	}
	for i, m := range blocks {
		checkBootstrap(t, "docs/envoy.md bootstrap "+strconv.Itoa(i+1), []byte(m[1]))
	}
}
