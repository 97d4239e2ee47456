package envoyrl_test

import (
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allot/allot/internal/envoyrl"
)

// A profile is a setting of the reference server and the Options that
// must answer as it does. The recording names the profile of each
// scenario; the reference for a profile runs with Env (plus the Redis,
// port and RUNTIME_* settings that load testdata/reference/config).
type profile struct {
	Env  string
	Opts envoyrl.Options
}

var profiles = map[string]profile{
	"default": {
		Env: "LIMIT_RESPONSE_HEADERS_ENABLED=true LIMIT_LIMIT_HEADER=x-ratelimit-limit " +
			"LIMIT_REMAINING_HEADER=x-ratelimit-remaining LIMIT_RESET_HEADER=x-ratelimit-reset",
		Opts: envoyrl.Options{Headers: envoyrl.XRateLimitHeaderNames()},
	},
	"shadowstop": {
		Env:  "SHADOW_MODE=true STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true",
		Opts: envoyrl.Options{GlobalShadowMode: true, StopIncrementWhenOverLimit: true},
	},
	"quota": {
		Env:  "QUOTA_MODE=true",
		Opts: envoyrl.Options{GlobalQuotaMode: true},
	},
}

// wait says what a step waits for before it is sent to the reference.
type wait string

const (
	now        wait = ""
	nextSecond wait = "second" // the start of the next second
	nextMinute wait = "minute" // the start of the next minute
)

type step struct {
	What string
	Wait wait
	Req  *rlspb.RateLimitRequest
}

type scenario struct {
	Name    string
	Profile string
	Steps   []step
}

// d builds a descriptor from key, value pairs.
func d(kv ...string) *rlv3.RateLimitDescriptor {
	out := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// hits sets a descriptor's own hits_addend.
func hits(n uint64, desc *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	desc.HitsAddend = wrapperspb.UInt64(n)
	return desc
}

// override sets a descriptor's limit override.
func override(rpu uint32, unit typev3.RateLimitUnit, desc *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	desc.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return desc
}

func req(domain string, descs ...*rlv3.RateLimitDescriptor) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: domain, Descriptors: descs}
}

func reqHits(n uint32, domain string, descs ...*rlv3.RateLimitDescriptor) *rlspb.RateLimitRequest {
	r := req(domain, descs...)
	r.HitsAddend = n
	return r
}

func s(what string, r *rlspb.RateLimitRequest) step { return step{What: what, Req: r} }

func repeat(n int, what string, r *rlspb.RateLimitRequest) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s(what, r)
	}
	return out
}

func steps(parts ...any) []step {
	var out []step
	for _, p := range parts {
		switch p := p.(type) {
		case step:
			out = append(out, p)
		case []step:
			out = append(out, p...)
		}
	}
	return out
}

// scenarios are the request sequences sent to the reference and to the
// Limiter. Each starts on empty counters. Changing one means recording
// again (see TestRecordReference).
func scenarios() []scenario {
	return []scenario{
		{Name: "counter per value", Profile: "default", Steps: steps(
			repeat(4, "alice: 3 a minute, the 4th over", req("basic", d("client", "alice"))),
			s("bob has his own counter", req("basic", d("client", "bob"))),
			s("vip: the key_value node beats the key node", req("basic", d("client", "vip"))),
			s("an empty value matches the key node", req("basic", d("client", ""))),
		)},
		{Name: "refused hits count", Profile: "default", Steps: steps(
			repeat(3, "carol uses her 3", req("basic", d("client", "carol"))),
			s("carol over, dave counted anyway", req("basic", d("client", "carol"), d("client", "dave"))),
			s("dave check only: 1 used", req("basic", hits(0, d("client", "dave")))),
			s("erin to the limit", req("basic", hits(3, d("client", "erin")))),
			s("erin refused 5", req("basic", hits(5, d("client", "erin")))),
			s("erin check only: the refused 5 were counted", req("basic", hits(0, d("client", "erin")))),
		)},
		{Name: "hits_addend", Profile: "default", Steps: steps(
			s("request hits_addend 2", reqHits(2, "basic", d("client", "frank"))),
			s("request hits_addend 0 counts 1", reqHits(0, "basic", d("client", "frank"))),
			s("descriptor hits_addend beats the request's", reqHits(5, "basic", hits(0, d("client", "frank")), d("client", "gina"))),
			s("per descriptor, larger than the limit", req("basic", hits(4, d("client", "hank")))),
			s("huge hits", req("basic", hits(1<<40, d("client", "ivan")))),
			s("huge hits again", req("basic", hits(1<<40, d("client", "ivan")))),
		)},
		{Name: "unmatched and unlimited", Profile: "default", Steps: steps(
			s("unknown domain", req("nosuchdomain", d("client", "x"))),
			s("unknown key", req("basic", d("other", "x"))),
			s("unlimited", req("basic", d("path", "/health"))),
			s("key_value of an unlimited node only", req("basic", d("path", "/other"))),
			s("no entries", req("basic", &rlv3.RateLimitDescriptor{})),
			s("mixed", req("basic", d("path", "/health"), d("other", "y"), d("client", "jill"))),
		)},
		{Name: "zero requests per unit", Profile: "default", Steps: steps(
			s("refused at once", req("basic", d("zero", "z"))),
			s("check only", req("basic", hits(0, d("zero", "y")))),
		)},
		{Name: "shadow and quota mode", Profile: "default", Steps: steps(
			repeat(3, "shadow: OK, remaining 0", req("basic", d("shadow", "s"))),
			repeat(3, "quota: OK, no reset", req("basic", d("quota", "q"))),
			s("shadow over next to an OK", req("basic", d("client", "kim"), d("shadow", "s"))),
			s("quota over next to an over", req("basic", d("quota", "q"), d("zero", "z"))),
		)},
		{Name: "depth", Profile: "default", Steps: steps(
			s("node without limit", req("basic", d("nolimit", "x"))),
			repeat(3, "its child", req("basic", d("nolimit", "x", "sub", "y"))),
			s("parent alone", req("basic", d("parent", "p"))),
			repeat(2, "parent and child", req("basic", d("parent", "p", "child", "c"))),
			s("parent and unknown child", req("basic", d("parent", "p", "other", "o"))),
			s("longer than a leaf", req("basic", d("leaf", "l", "extra", "e"))),
			s("leaf", req("basic", d("leaf", "l"))),
			s("child key at top level", req("basic", d("child", "c"))),
		)},
		{Name: "same descriptor twice", Profile: "default", Steps: steps(
			s("two hits on one counter", req("basic", d("client", "lou"), d("client", "lou"))),
			s("and again", req("basic", d("client", "lou"), d("client", "lou"))),
		)},
		{Name: "headers", Profile: "default", Steps: steps(
			s("closest to its limit", req("basic", d("client", "mo"), d("client", "vip"), d("sec", "1"))),
			s("ties: the first (limit 3)", req("basic", d("client", "nan"), hits(0, d("leaf", "l")))),
			s("ties: the first (limit 2)", req("basic", hits(0, d("leaf", "l")), d("client", "ola"))),
			s("no limit: no headers", req("basic", d("other", "x"), d("path", "/health"))),
			s("the last over limit", req("basic", d("zero", "a"), d("client", "pat"), d("zero", "b"))),
			s("shadow at remaining 0", req("basic", d("client", "quin"), d("shadow", "t"), d("shadow", "t"))),
		)},
		{Name: "underscore collisions", Profile: "default", Steps: steps(
			s("a=b_c finds a_b=c", req("basic", d("a", "b_c"))),
			s("a_b=c shares its counter", req("basic", d("a_b", "c"))),
		)},
		{Name: "units", Profile: "default", Steps: steps(
			s("second", req("units", d("u", "second"))),
			s("minute", req("units", d("u", "minute"))),
			s("hour", req("units", d("u", "hour"))),
			s("day", req("units", d("u", "day"))),
			s("week", req("units", d("u", "week"))),
			s("month", req("units", d("u", "month"))),
			s("year", req("units", d("u", "year"))),
		)},
		{Name: "second window rolls over", Profile: "default", Steps: steps(
			step{What: "first of a second", Wait: nextSecond, Req: req("basic", d("sec", "x"))},
			repeat(2, "same second", req("basic", d("sec", "x"))),
			step{What: "next second", Wait: nextSecond, Req: req("basic", d("sec", "x"))},
		)},
		{Name: "minute window rolls over", Profile: "default", Steps: steps(
			repeat(4, "to the limit and over", req("basic", d("client", "rex"))),
			step{What: "next minute", Wait: nextMinute, Req: req("basic", d("client", "rex"))},
		)},
		{Name: "limit override", Profile: "default", Steps: steps(
			s("config limit", req("override", d("k", "v"))),
			s("override shares the counter", req("override", override(2, typev3.RateLimitUnit_MINUTE, d("k", "v")))),
			s("config limit again", req("override", d("k", "v"))),
			s("override without a config node", req("override", override(1, typev3.RateLimitUnit_HOUR, d("nokey", "v")))),
			s("override again: over", req("override", override(1, typev3.RateLimitUnit_HOUR, d("nokey", "v")))),
			s("override on an unknown domain", req("nosuchdomain", override(1, typev3.RateLimitUnit_MINUTE, d("k", "v")))),
			s("override without entries", req("override", override(1, typev3.RateLimitUnit_DAY, &rlv3.RateLimitDescriptor{}))),
			s("override with a day unit", req("override", override(10, typev3.RateLimitUnit_DAY, d("k", "w")))),
		)},
		{Name: "wildcards", Profile: "default", Steps: steps(
			repeat(3, "prefix match", req("wildcard", d("path", "/api/x"))),
			s("another value, another counter", req("wildcard", d("path", "/api/y"))),
			s("exact value beats the wildcard", req("wildcard", d("path", "/api/exact"))),
			s("no match falls back to the key", req("wildcard", d("path", "/apix"))),
			s("shared counter a", req("wildcard", d("path", "/shared/a"))),
			s("shared counter b", req("wildcard", d("path", "/shared/b"))),
			s("shared counter c: over", req("wildcard", d("path", "/shared/c"))),
			s("shared below", req("wildcard", d("path", "/nested/a", "method", "GET"))),
			s("shared below, other value", req("wildcard", d("path", "/nested/b", "method", "GET"))),
			s("shared below, other method", req("wildcard", d("path", "/nested/c", "method", "PUT"))),
			s("first wildcard in document order wins", req("wildcard", d("path", "/w/xy"))),
			s("the second wildcard", req("wildcard", d("path", "/w/y"))),
			s("wildcard key", req("wildcard", d("prefix", "x"))),
			s("wildcard key, other key", req("wildcard", d("pre", "y"))),
		)},
		{Name: "replaces", Profile: "default", Steps: steps(
			s("per_user alone", req("replaces", d("user", "u"))),
			s("premium replaces per_user", req("replaces", d("user", "u"), d("premium", "p"))),
			s("mutual: both gone", req("replaces", d("a", "1"), d("b", "1"))),
			s("unlimited replaces too", req("replaces", d("user", "u"), d("free", "f"))),
			s("shadow replaces too", req("replaces", d("user", "u"), d("shadowrep", "s"))),
			s("shadow replacing, again", req("replaces", d("user", "u"), d("shadowrep", "s"))),
		)},
		{Name: "bad requests", Profile: "default", Steps: steps(
			s("no domain", req("", d("client", "x"))),
			s("no descriptors", req("basic")),
			s("hits past 2^63-1: the counter refuses", req("basic", hits(1<<63, d("client", "zed")))),
		)},
		{Name: "global shadow, stop increment", Profile: "shadowstop", Steps: steps(
			repeat(4, "over, but OK overall", req("basic", d("client", "sam"))),
			s("sam would go over: tom not counted", req("basic", d("client", "sam"), d("client", "tom"))),
			s("tom check only", req("basic", hits(0, d("client", "tom")))),
			s("tom alone counts", req("basic", d("client", "tom"))),
			s("huge hits count only where over", req("basic", hits(1<<40, d("client", "uma")), d("client", "vic"))),
			s("uma and vic check", req("basic", hits(0, d("client", "uma")), hits(0, d("client", "vic")))),
			s("shadow limit used up", req("basic", d("shadow", "s"))),
			s("shadow would go over: wyn not counted", req("basic", d("shadow", "s"), d("client", "wyn"))),
			s("wyn check only", req("basic", hits(0, d("client", "wyn")))),
		)},
		{Name: "global quota mode", Profile: "quota", Steps: steps(
			repeat(4, "over reads as OK", req("basic", d("client", "wes"))),
			s("shadow wins over quota", req("basic", d("shadow", "s"), d("shadow", "s"))),
		)},
	}
}
