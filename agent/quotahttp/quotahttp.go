// Package quotahttp limits HTTP requests with allot's per-request quota: a
// net/http middleware that takes a token from a bucket chosen per request
// (by API key, user, remote address...) and answers 429 Too Many Requests
// when the bucket refuses.
//
//	a, _ := agent.New(nc)
//	q, _ := quota.New(a)
//	limit := quotahttp.New(q, quotahttp.RemoteIP("api"))
//	http.ListenAndServe(addr, limit(mux))
//
// Every answer carries the bucket's state in the RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset headers (IETF draft
// draft-ietf-httpapi-ratelimit-headers); a 429 adds Retry-After. A bucket
// that answers OK_WAIT holds the request for the wait (bounded by the
// request's context and WithMaxWait) and then passes it on.
package quotahttp

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/allot/allot/agent/quota"
	"github.com/allot/allot/internal/wire"
)

// Header names set by the middleware.
const (
	HeaderLimit      = "RateLimit-Limit"
	HeaderRemaining  = "RateLimit-Remaining"
	HeaderReset      = "RateLimit-Reset"
	HeaderRetryAfter = "Retry-After"
)

// A KeyFunc returns the bucket ("namespace:name") a request takes its
// token from. The empty string exempts the request: it passes unlimited.
type KeyFunc func(*http.Request) string

// OnUnavailable says what the middleware does when the quota service did
// not answer and the namespace has no local fallback (quota.WithFallback),
// that is when Take returns an error wrapping quota.ErrUnavailable.
type OnUnavailable int

const (
	// FailClosed answers 503 Service Unavailable. It is the default: the
	// limit protects something that may not survive unlimited traffic.
	FailClosed OnUnavailable = iota
	// FailOpen passes the request on, unlimited.
	FailOpen
)

type options struct {
	tokens      func(*http.Request) int64
	maxWait     time.Duration
	hasMaxWait  bool
	unavailable OnUnavailable
	sheddable   func(*http.Request) bool
	logger      *slog.Logger
}

// An Option configures the middleware.
type Option func(*options)

// WithTokens sets how many tokens a request takes; the default is 1. A
// negative count, or one above 10^12 (the most a take may ask for), is
// treated as a bad request (400).
func WithTokens(f func(*http.Request) int64) Option {
	return func(o *options) { o.tokens = f }
}

// WithMaxWait bounds how long a request is held when its bucket answers
// OK_WAIT; beyond it the request is refused with 429. 0 never holds a
// request. By default the bucket's wait_timeout (and the request's
// context) bound the wait.
func WithMaxWait(d time.Duration) Option {
	return func(o *options) { o.maxWait, o.hasMaxWait = max(d, 0), true }
}

// WithUnavailable sets what happens when the quota service cannot decide;
// the default is FailClosed.
func WithUnavailable(u OnUnavailable) Option {
	return func(o *options) { o.unavailable = u }
}

// WithSheddable marks the requests f selects as SHEDDABLE, refused before
// critical ones by buckets that reserve capacity for critical requests.
func WithSheddable(f func(*http.Request) bool) Option {
	return func(o *options) { o.sheddable = f }
}

// WithLogger logs failures to decide (at warning level); the default
// logs nothing, since the quota client already logs the service's outages.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// New returns a middleware that takes tokens with q for every request, in
// the bucket key returns.
//
// A granted request is passed on with RateLimit-Limit, RateLimit-Remaining
// and RateLimit-Reset set (Reset is the seconds it waited, rounded up:
// 0 unless the bucket answered OK_WAIT). A refused one is answered 429
// with those headers and Retry-After, both the seconds until asking again
// can succeed, rounded up. A malformed bucket or token count is a 500 or
// 400 (the key function is the server's code, the token count may come
// from the request). When the quota service cannot decide, see
// OnUnavailable. A request whose context ends while it waits gets no
// answer beyond 503, as the client has gone.
func New(q *quota.Client, key KeyFunc, opts ...Option) func(http.Handler) http.Handler {
	o := options{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			bucket := key(r)
			if bucket == "" {
				next.ServeHTTP(w, r)
				return
			}
			n := int64(1)
			if o.tokens != nil {
				n = o.tokens(r)
			}
			if n < 0 || n > wire.MaxQuotaTokens {
				// The count may come from the request: the client's
				// mistake, not an outage to fail open or closed on.
				http.Error(w, "quotahttp: token count outside [0, 10^12]", http.StatusBadRequest)
				return
			}
			var topts []quota.TakeOption
			if o.hasMaxWait {
				topts = append(topts, quota.WithMaxWait(o.maxWait))
			}
			if o.sheddable != nil && o.sheddable(r) {
				topts = append(topts, quota.Sheddable())
			}
			res, err := q.Take(r.Context(), bucket, n, topts...)
			var qe *quota.RejectedError
			switch {
			case err == nil:
				setHeaders(w.Header(), res.Limit, res.Remaining, res.Wait)
				next.ServeHTTP(w, r)
			case errors.As(err, &qe):
				setHeaders(w.Header(), qe.Limit, qe.Remaining, qe.RetryAfter)
				w.Header().Set(HeaderRetryAfter, strconv.FormatInt(max(seconds(qe.RetryAfter), 1), 10))
				http.Error(w, "rate limited: "+qe.Reason, http.StatusTooManyRequests)
			case errors.Is(err, quota.ErrUnavailable) && o.unavailable == FailOpen:
				o.logger.Warn("quotahttp: quota service unavailable; passing request", "bucket", bucket, "error", err)
				next.ServeHTTP(w, r)
			case errors.Is(err, quota.ErrUnavailable):
				o.logger.Warn("quotahttp: quota service unavailable; refusing request", "bucket", bucket, "error", err)
				http.Error(w, "quota service unavailable", http.StatusServiceUnavailable)
			case r.Context().Err() != nil:
				http.Error(w, "request ended while waiting for quota", http.StatusServiceUnavailable)
			default:
				o.logger.Warn("quotahttp: quota decision failed", "bucket", bucket, "error", err)
				http.Error(w, "quota decision failed", http.StatusInternalServerError)
			}
		})
	}
}

func setHeaders(h http.Header, limit, remaining int64, reset time.Duration) {
	h.Set(HeaderLimit, strconv.FormatInt(max(limit, 0), 10))
	h.Set(HeaderRemaining, strconv.FormatInt(max(remaining, 0), 10))
	h.Set(HeaderReset, strconv.FormatInt(seconds(reset), 10))
}

// seconds rounds d up to whole seconds, as the headers want.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// Name turns any string into a bucket name ([A-Za-z0-9_]+), one to one:
// letters and digits stay, every other byte (the underscore too) becomes
// "_" and two lowercase hex digits; a result over 64 bytes is replaced by
// "_h" and the first 32 hex digits of its SHA-256. The empty string
// becomes "_", which nothing else maps to.
func Name(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	const hexd = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	if b.Len() > 64 {
		sum := sha256.Sum256([]byte(s))
		return "_h" + hex.EncodeToString(sum[:16])
	}
	return b.String()
}

// Header keys the bucket by a request header: namespace:Name(value). A
// request without the header shares the bucket namespace:_ with every
// other one, so leaving the header out does not escape the limit.
func Header(namespace, header string) KeyFunc {
	return func(r *http.Request) string {
		return namespace + ":" + Name(r.Header.Get(header))
	}
}

// RemoteIP keys the bucket by the client's address (r.RemoteAddr without
// the port; behind a proxy, key by its forwarding header with Header
// instead): namespace:10_0_0_1 for 10.0.0.1, the colons of an IPv6
// address also turned into underscores (one to one, as IPv4 addresses
// have no colons). IPv4-mapped IPv6 addresses count as IPv4.
func RemoteIP(namespace string) KeyFunc {
	return func(r *http.Request) string {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return namespace + ":" + Name(host)
		}
		ip = ip.Unmap().WithZone("")
		return namespace + ":" + strings.NewReplacer(".", "_", ":", "_").Replace(ip.String())
	}
}
