// Package grpclimit provides gRPC interceptors that keep calls within
// allot rate limits: each call takes a token from the agent's rate limiter
// for its key (the method, or one resource for everything), decided
// locally without touching the network. Server interceptors refuse a call
// beyond the limit with codes.ResourceExhausted and a RetryInfo detail
// saying when a token is next available; client interceptors refuse the
// same way before sending, or with Options.Wait wait for a token.
//
// Adding the limit to a server is one option, given a Limiter l:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(l.StreamServerInterceptor()))
//
// and to a client:
//
//	grpc.NewClient(target, grpc.WithChainUnaryInterceptor(l.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(l.StreamClientInterceptor()), …)
//
// A stream takes one token when it starts; its messages are not counted.
// In shadow mode (a template's "shadow": true, or allot coordinator
// --shadow) calls are admitted as the agent admits them, all of them with
// automatic wants, and the agent counts what would have been refused
// (agent.Status.WouldRefuse).
package grpclimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/keyed"
)

// A KeyFunc names the allot resource a call to fullMethod
// ("/package.Service/Method") is counted against. The empty string
// exempts the call from limiting.
type KeyFunc func(ctx context.Context, fullMethod string) string

// Fixed counts every call against resource id.
func Fixed(id string) KeyFunc {
	return func(context.Context, string) string { return id }
}

// Method counts each method against its own resource: prefix followed by
// the full method name ("grpc/allot.v1.Echo/Say" for prefix "grpc/").
func Method(prefix string) KeyFunc {
	return func(_ context.Context, fullMethod string) string {
		return keyed.ID(prefix, fullMethod[min(1, len(fullMethod)):])
	}
}

// Options configure a Limiter.
type Options struct {
	// Key names each call's resource. Required.
	Key KeyFunc
	// Wait makes calls beyond the limit wait for a token until their
	// context ends (or until it is clear that its deadline cannot be met)
	// instead of failing at once. Either way a call that gets no token
	// fails with codes.ResourceExhausted, unless its context ends while it
	// waits (codes.Canceled or codes.DeadlineExceeded).
	Wait bool
	// MaxKeys bounds the distinct resources the Limiter creates; calls for
	// keys beyond it share the resource Overflow. Default 1000.
	MaxKeys int
	// Overflow is the resource of keys beyond MaxKeys. Default
	// "grpclimit/overflow".
	Overflow string
	// Resource options apply to every limiter created (agent.WithWants,
	// agent.WithBurst, agent.WithPriority).
	Resource []agent.ResourceOption
	// Logger receives errors (a key the agent refuses). Default
	// slog.Default().
	Logger *slog.Logger
	// FirstLeaseWait is how long a call without Wait may wait for its
	// key's first capacity (a new key, or one whose lease decayed while
	// idle; the agent asks for it at once) instead of failing. Default
	// 250ms; negative does not wait.
	FirstLeaseWait time.Duration
}

// Limiter makes the interceptors; create it with New.
type Limiter struct {
	set       *keyed.Set
	key       KeyFunc
	wait      bool
	firstWait time.Duration
	log       *slog.Logger
}

// New returns a Limiter over a's rate limiters. It reports invalid
// options: a nil agent or Key, a negative MaxKeys, an invalid Overflow id.
func New(a *agent.Agent, o Options) (*Limiter, error) {
	if o.Key == nil {
		return nil, errors.New("grpclimit: Options.Key is nil: use Fixed, Method or a KeyFunc of your own")
	}
	if o.MaxKeys < 0 {
		return nil, fmt.Errorf("grpclimit: Options.MaxKeys %d is negative", o.MaxKeys)
	}
	set, err := keyed.New(a, cmp.Or(o.MaxKeys, keyed.DefaultMaxKeys), cmp.Or(o.Overflow, "grpclimit/overflow"), o.Resource)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	return &Limiter{set: set, key: o.Key, wait: o.Wait, firstWait: cmp.Or(o.FirstLeaseWait, keyed.DefaultFirstLeaseWait),
		log: cmp.Or(o.Logger, slog.Default())}, nil
}

// admit takes a token for a call to method, or returns the status error
// the call fails with.
func (l *Limiter) admit(ctx context.Context, method string) error {
	id := l.key(ctx, method)
	if id == "" {
		return nil
	}
	lim, err := l.set.Limiter(id)
	if err != nil {
		return l.unavailable(id, method, err)
	}
	if l.wait {
		err := lim.Wait(ctx)
		if errors.Is(err, agent.ErrClosed) {
			// Closed by the service, or with the agent: the key gets a
			// new limiter, or none once the agent is closed.
			if renewed, rerr := l.set.Renew(id, lim); rerr == nil && renewed != lim {
				lim, err = renewed, renewed.Wait(ctx)
			}
		}
		if err == nil {
			return nil
		}
		switch {
		case errors.Is(err, agent.ErrClosed):
			return status.Error(codes.Unavailable, "rate limiter closed")
		case ctx.Err() != nil && !errors.Is(err, agent.ErrWouldExceedDeadline):
			return status.FromContextError(ctx.Err()).Err()
		}
		return exhausted(id, keyed.Describe(lim, false).RetryAfter)
	}
	d, err := l.set.DecideWait(ctx, id, lim, l.firstWait)
	if err != nil {
		return l.unavailable(id, method, err)
	}
	switch {
	case d.Allowed:
		return nil
	case ctx.Err() != nil:
		// It ended while the call waited for its first capacity, or
		// before: the caller gave up, and a RetryInfo would invite a
		// retry of a call nobody waits for.
		return status.FromContextError(ctx.Err()).Err()
	}
	return exhausted(id, d.RetryAfter)
}

// unavailable is the error of a call whose key has no limiter (a key
// allot refuses, a closed agent): the service's fault, not the caller's.
func (l *Limiter) unavailable(id, method string, err error) error {
	l.log.Error("grpclimit: no rate limiter for the call's key", "key", id, "method", method, "error", err)
	return status.Errorf(codes.Internal, "rate limiter unavailable for %s", method)
}

// exhausted is the error of a refused call: ResourceExhausted with the
// delay until the next token in a RetryInfo detail.
func exhausted(id string, retry time.Duration) error {
	st := status.Newf(codes.ResourceExhausted, "rate limit of %q exceeded", id)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(max(retry, time.Millisecond))}); err == nil {
		st = d
	}
	return st.Err()
}

// UnaryServerInterceptor limits unary calls to a server.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := l.admit(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor limits streams to a server: one token per
// stream.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := l.admit(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// UnaryClientInterceptor limits the unary calls a client makes; a refused
// call is not sent.
func (l *Limiter) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := l.admit(ctx, method); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor limits the streams a client opens: one token
// per stream; a refused stream is not opened.
func (l *Limiter) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if err := l.admit(ctx, method); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}
