package faults

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/proto/allotpb"
)

// ServiceError is an error reply of the coordinator.
type ServiceError struct {
	Code        int
	Description string
}

func (e *ServiceError) Error() string {
	return fmt.Sprintf("coordinator error %d: %s", e.Code, e.Description)
}

// GetRequest encodes a JSON GetCapacity request of client for wants of
// resource, as the nats CLI or `allot get` would send it.
func GetRequest(client, resource string, wants float64) []byte {
	data, err := protojson.Marshal(&allotpb.GetCapacityRequest{
		ClientId: client,
		Resource: []*allotpb.ResourceRequest{{ResourceId: resource, Wants: wants}},
	})
	if err != nil {
		panic(err) // a fixed, valid message
	}
	return data
}

// ReleaseRequest encodes a JSON ReleaseCapacity request.
func ReleaseRequest(client, resource string) []byte {
	data, err := protojson.Marshal(&allotpb.ReleaseCapacityRequest{ClientId: client, ResourceId: []string{resource}})
	if err != nil {
		panic(err)
	}
	return data
}

// DecodeReply decodes a JSON reply into resp, or returns the error reply
// as a *ServiceError.
func DecodeReply(m *nats.Msg, resp proto.Message) error {
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		n, _ := strconv.Atoi(code)
		return &ServiceError{Code: n, Description: m.Header.Get("Nats-Service-Error")}
	}
	if err := protojson.Unmarshal(m.Data, resp); err != nil {
		return fmt.Errorf("decode reply %q: %w", m.Data, err)
	}
	return nil
}

// Get asks for wants of resource as client, in JSON, and returns the reply.
func Get(ctx context.Context, nc *nats.Conn, client, resource string, wants float64) (*allotpb.GetCapacityResponse, error) {
	m, err := nc.RequestWithContext(ctx, subjects.Coordinator("root", subjects.CapacityGet), GetRequest(client, resource, wants))
	if err != nil {
		return nil, fmt.Errorf("get %s for %s: %w", resource, client, err)
	}
	resp := &allotpb.GetCapacityResponse{}
	if err := DecodeReply(m, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// Granted returns the capacity the single-resource reply grants, or the
// resource's own error.
func Granted(resp *allotpb.GetCapacityResponse) (float64, error) {
	if len(resp.GetResponse()) != 1 {
		return 0, fmt.Errorf("reply has %d resources, want 1", len(resp.GetResponse()))
	}
	rr := resp.GetResponse()[0]
	if rr.GetError() != "" {
		return 0, &ServiceError{Code: int(rr.GetErrorCode()), Description: rr.GetError()}
	}
	if rr.GetGets() == nil {
		return 0, errors.New("reply grants no lease")
	}
	return rr.GetGets().GetCapacity(), nil
}

// Release releases client's lease of resource.
func Release(ctx context.Context, nc *nats.Conn, client, resource string) error {
	m, err := nc.RequestWithContext(ctx, subjects.Coordinator("root", subjects.CapacityRelease), ReleaseRequest(client, resource))
	if err != nil {
		return fmt.Errorf("release %s for %s: %w", resource, client, err)
	}
	return DecodeReply(m, &allotpb.ReleaseCapacityResponse{})
}

// Template returns a FAIR_SHARE template document for the exact resource
// id; extra is spliced into the top-level object (e.g. `,"safe_capacity":7`).
func Template(resource string, capacity float64, lease, refresh time.Duration, extra string) []byte {
	return fmt.Appendf(nil, `{"identifier_glob":%q,"capacity":%v,"algorithm":{"kind":"FAIR_SHARE","lease_length":%q,"refresh_interval":%q}%s}`,
		resource, capacity, lease.String(), refresh.String(), extra)
}

// PutTemplate stores data under templates.<name> in the configuration
// bucket, unchecked, as `nats kv put` would; it returns the revision.
func PutTemplate(tb testing.TB, nc *nats.Conn, name string, data []byte) uint64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	kv, err := configkv.OpenBucket(ctx, js, configkv.DefaultBucket, true)
	if err != nil {
		tb.Fatal(err)
	}
	rev, err := kv.Put(ctx, config.Key(name), data)
	if err != nil {
		tb.Fatalf("put template %s: %v", name, err)
	}
	return rev
}

// StartAgents starts n agents on nc, named prefix-0..n-1, each wanting
// wants of resource (a rate) with opts; the test's cleanup closes them.
func StartAgents(tb testing.TB, nc *nats.Conn, prefix string, n int, resource string, wants float64, opts ...agent.Option) []*agent.Agent {
	tb.Helper()
	out := make([]*agent.Agent, 0, n)
	for i := range n {
		o := append([]agent.Option{agent.WithClientID(fmt.Sprintf("%s-%d", prefix, i)), agent.WithLogger(TestLogger(tb))}, opts...)
		a, err := agent.New(nc, o...)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, a)
		if _, err := a.Rate(resource, agent.WithWants(wants)); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() { CloseAgents(out) })
	return out
}

// CloseAgents closes agents concurrently (each may wait for its release).
func CloseAgents(as []*agent.Agent) {
	var wg sync.WaitGroup
	for _, a := range as {
		wg.Go(func() { _ = a.Close() })
	}
	wg.Wait()
}

// Leased reports whether every agent holds an unexpired lease of resource
// with a positive capacity.
func Leased(as []*agent.Agent, resource string) bool {
	now := time.Now()
	for _, a := range as {
		ok := false
		for _, st := range a.Status() {
			if st.ResourceID == resource && st.Leased && now.Before(st.Expiry) && st.Granted > 0 {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// Load is a set of agents that each want capacity of one resource, and
// the sampler watching them.
type Load struct {
	Resource string
	Agents   []*agent.Agent
	Sampler  *Sampler
}

// StartLoad starts n agents on nc (named prefix-i) that each want wants of
// resource, samples their capacity in force against capacity, and waits
// until every agent holds a lease.
func StartLoad(tb testing.TB, nc *nats.Conn, prefix string, n int, resource string, capacity, wants float64) *Load {
	tb.Helper()
	l := &Load{Resource: resource, Agents: StartAgents(tb, nc, prefix, n, resource, wants), Sampler: NewSampler(resource, capacity)}
	l.Sampler.Add(l.Agents...)
	l.Sampler.Start(tb)
	poll.Until(tb, 10*time.Second, "every agent to hold a lease", l.Leased)
	return l
}

// Leased reports whether every agent of the load holds an unexpired,
// positive lease.
func (l *Load) Leased() bool { return Leased(l.Agents, l.Resource) }

// WaitAnswered waits until a GetCapacity request is answered on nc and
// returns the term of the answer.
func WaitAnswered(tb testing.TB, nc *nats.Conn, timeout time.Duration) uint64 {
	tb.Helper()
	var term uint64
	poll.Until(tb, timeout, "a coordinator to answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := Get(ctx, nc, "probe", "probe", 0)
		if err == nil {
			term = resp.GetTerm()
		}
		return err == nil
	})
	return term
}

// AskConcurrently sends n GetCapacity requests at once, from clients
// prefix-0..n-1 each wanting 1 of resource, and returns the errors of those
// not answered within timeout.
func AskConcurrently(nc *nats.Conn, prefix, resource string, n int, timeout time.Duration) []error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			if _, err := Get(ctx, nc, fmt.Sprintf("%s-%d", prefix, i), resource, 1); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}
