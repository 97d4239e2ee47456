package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/proto/allotpb"
)

// Limits of the quota subjects (allot.<node>.quota.take and .report).
const (
	// MaxQuotaTakeRequest bounds a QuotaTakeRequest payload in either
	// encoding; a larger one is refused with ErrTooLarge (413). The
	// largest valid request, with both names and the client id at their
	// longest and every character of the client id escaped as \uXXXX, is
	// under 2 KiB.
	MaxQuotaTakeRequest = 4 << 10
	// MaxQuotaTokens bounds tokens in a take or a report (and a bucket's
	// size and limit in the configuration), so that no sum of them
	// overflows int64.
	MaxQuotaTokens = quota.MaxCount
	// MaxQuotaWait bounds max_wait: a longer one is refused (400) rather
	// than clamped, as a sign of a unit mistake. It is also the longest
	// wait_timeout a bucket can be configured with, so every max_wait
	// that can matter is accepted.
	MaxQuotaWait = 31 * 24 * time.Hour
	// MaxQuotaReportsPerBatch bounds the reports one quota.report message
	// carries; the ones after it are ignored and counted.
	MaxQuotaReportsPerBatch = 10000
)

// QuotaTake is a validated QuotaTakeRequest.
type QuotaTake struct {
	// Bucket is "namespace:name" as sent; Namespace and Name are its
	// parts (substrings of Bucket).
	Bucket, Namespace, Name string
	// Request is the decision core's view: Tokens (1 when unset; 0 peeks),
	// MaxWait (-1 when unset), Sheddable, ClientID.
	Request quota.Request
}

// rawTake is a QuotaTakeRequest's fields as decoded, before validation:
// the form both decoders produce, so that one validation serves both.
type rawTake struct {
	bucket      string
	tokens      int64
	hasTokens   bool
	hasMaxWait  bool
	waitSeconds int64
	waitNanos   int32
	clientID    string
	criticality int32
}

func rawFromProto(pb *allotpb.QuotaTakeRequest) rawTake {
	r := rawTake{bucket: pb.GetBucket(), clientID: pb.GetClientId(), criticality: int32(pb.GetCriticality())}
	if pb.Tokens != nil {
		r.tokens, r.hasTokens = pb.GetTokens(), true
	}
	if d := pb.GetMaxWait(); d != nil {
		r.hasMaxWait, r.waitSeconds, r.waitNanos = true, d.GetSeconds(), d.GetNanos()
	}
	return r
}

// DecodeQuotaTake decodes and validates a QuotaTakeRequest in encoding e
// into out. Errors wrap ErrBadRequest (400) or ErrTooLarge (413); out is
// then unspecified.
//
// JSON is protojson, strictly (unknown and duplicate fields are errors);
// binary protobuf rejects unknown fields too. A request in the common
// shape, in either encoding, takes a fast path that allocates only the
// bucket and client id strings, and accepts and rejects exactly what the
// strict decoders do (fuzz tests compare them).
//
// Validation: bucket is "namespace:name", both parts 1 to MaxQuotaNameLen
// characters of [A-Za-z0-9_]; tokens (default 1) in [0, MaxQuotaTokens];
// max_wait a valid duration in [0, MaxQuotaWait]; client_id empty or a
// valid id (ValidateID); criticality unset, CRITICAL or SHEDDABLE.
func DecodeQuotaTake(e Encoding, data []byte, out *QuotaTake) error {
	r, err := decodeTakeRaw(e, data)
	if err != nil {
		return err
	}
	return validateTake(&r, out)
}

// decodeTakeRaw decodes a QuotaTakeRequest without validating it.
func decodeTakeRaw(e Encoding, data []byte) (rawTake, error) {
	if len(data) > MaxQuotaTakeRequest {
		return rawTake{}, fmt.Errorf("%w: %d bytes; a quota take request is at most %d bytes", ErrTooLarge, len(data), MaxQuotaTakeRequest)
	}
	var r rawTake
	if e != JSON || !decodeTakeFast(data, &r) {
		return decodeTakeStrict(e, data)
	}
	return r, nil
}

// decodeTakeStrict decodes what the JSON fast path leaves: with
// protojson, or in binary protobuf by hand when the request has the
// common shape (decodeTakeProtoFast), else with proto.Unmarshal.
func decodeTakeStrict(e Encoding, data []byte) (rawTake, error) {
	var r rawTake
	if e == Protobuf && decodeTakeProtoFast(data, &r) {
		return r, nil
	}
	return decodeTakeSlow(e, data)
}

// decodeTakeSlow decodes with protojson or proto.Unmarshal only: the
// reference the fast paths are checked against.
func decodeTakeSlow(e Encoding, data []byte) (rawTake, error) {
	var pb allotpb.QuotaTakeRequest
	if err := Unmarshal(e, data, &pb); err != nil {
		return rawTake{}, err
	}
	return rawFromProto(&pb), nil
}

func validateTake(r *rawTake, out *QuotaTake) error {
	ns, name, err := SplitBucket(r.bucket)
	if err != nil {
		return err
	}
	*out = QuotaTake{Bucket: r.bucket, Namespace: ns, Name: name, Request: quota.Request{Tokens: 1, MaxWait: -1, ClientID: r.clientID}}
	if r.hasTokens {
		if r.tokens < 0 || r.tokens > MaxQuotaTokens {
			return badf("tokens %d is outside [0, %d] (0 peeks without taking)", r.tokens, int64(MaxQuotaTokens))
		}
		out.Request.Tokens = r.tokens
	}
	if r.hasMaxWait {
		d, err := quotaWait(r.waitSeconds, r.waitNanos)
		if err != nil {
			return err
		}
		out.Request.MaxWait = d
	}
	if r.clientID != "" {
		if err := ValidateID("client_id", r.clientID); err != nil {
			return err
		}
	}
	switch allotpb.Criticality(r.criticality) {
	case allotpb.Criticality_CRITICALITY_UNSPECIFIED, allotpb.Criticality_CRITICAL:
	case allotpb.Criticality_SHEDDABLE:
		out.Request.Sheddable = true
	default:
		return badf("criticality %d is unknown: write CRITICAL or SHEDDABLE", r.criticality)
	}
	return nil
}

// quotaWait checks a max_wait duration.
func quotaWait(sec int64, nanos int32) (time.Duration, error) {
	switch {
	case nanos <= -1e9 || nanos >= 1e9 || sec < 0 && nanos > 0 || sec > 0 && nanos < 0:
		return 0, badf("max_wait: invalid duration (%ds, %dns)", sec, nanos)
	case sec < 0 || nanos < 0:
		return 0, badf("max_wait is negative: write \"0s\" to be answered at once or REJECTED")
	case sec > int64(MaxQuotaWait/time.Second) || sec == int64(MaxQuotaWait/time.Second) && nanos > 0:
		// In seconds on both sides: a wait this long may not fit a
		// time.Duration.
		return 0, badf("max_wait %ds is longer than the limit of %ds (%s)", sec, int64(MaxQuotaWait/time.Second), MaxQuotaWait)
	}
	return time.Duration(sec)*time.Second + time.Duration(nanos), nil
}

// QuotaReport is one valid report of quota.report: tokens charged to a
// bucket after the fact.
type QuotaReport struct {
	// Bucket is "namespace:name"; Namespace and Name are its parts.
	Bucket, Namespace, Name string
	// Tokens is at least 1.
	Tokens int64
}

// QuotaReports is a decoded quota.report message.
type QuotaReports struct {
	// Reports are the valid reports, in order.
	Reports []QuotaReport
	// ClientID is the batch's client_id (QuotaReportBatch), if any.
	ClientID string
	// Ignored counts invalid reports; a payload that cannot be decoded at
	// all counts as one.
	Ignored int
	// Error says why the first ignored report was ignored.
	Error string
	// subject is the bucket of the subject the message arrived on, for
	// reports that leave theirs out (DecodeQuotaReportsOn).
	subject string
}

// setClient keeps a batch's client_id if it is a valid id.
func (q *QuotaReports) setClient(id string) {
	if id == "" {
		return
	}
	if err := ValidateID("client_id", id); err != nil {
		q.ignore("%s", strings.TrimPrefix(err.Error(), ErrBadRequest.Error()+": "))
		return
	}
	q.ClientID = id
}

func (q *QuotaReports) ignore(format string, args ...any) {
	if q.Ignored == 0 {
		q.Error = fmt.Sprintf(format, args...)
	}
	q.Ignored++
}

// add validates one report and keeps or ignores it; i is its index in
// the batch, for the error.
func (q *QuotaReports) add(i int, bucket string, tokens int64) {
	if len(q.Reports) >= MaxQuotaReportsPerBatch {
		q.ignore("report %d: more than %d reports in one message", i, MaxQuotaReportsPerBatch)
		return
	}
	if bucket == "" && q.subject != "" {
		bucket = q.subject
	}
	ns, name, err := SplitBucket(bucket)
	if err != nil {
		q.ignore("report %d: %s", i, strings.TrimPrefix(err.Error(), ErrBadRequest.Error()+": "))
		return
	}
	if tokens < 1 || tokens > MaxQuotaTokens {
		q.ignore("report %d: tokens %d is outside [1, %d]", i, tokens, int64(MaxQuotaTokens))
		return
	}
	q.Reports = append(q.Reports, QuotaReport{Bucket: bucket, Namespace: ns, Name: name, Tokens: tokens})
}

// DecodeQuotaReports decodes a quota.report payload: in JSON a single
// QuotaReport object, a QuotaReportBatch object ({"reports": [...],
// "client_id": ...}) or a JSON array of QuotaReport objects; in binary
// protobuf a QuotaReportBatch. Reports are never rejected: an invalid one
// (malformed bucket, tokens outside [1, MaxQuotaTokens], unknown field,
// beyond MaxQuotaReportsPerBatch) is ignored and counted, and a payload
// that cannot be decoded at all, or is above its encoding's size limit
// (CheckSize), counts as one ignored report.
func DecodeQuotaReports(e Encoding, data []byte) QuotaReports {
	var q QuotaReports
	q.decode(e, data)
	return q
}

func (q *QuotaReports) decode(e Encoding, data []byte) {
	if err := CheckSize(e, len(data)); err != nil {
		q.ignore("%v", err)
		return
	}
	if e == Protobuf {
		decodeReportsProto(data, q)
		return
	}
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) == 0:
		q.ignore("empty payload: send a report object, a list of them, or {\"reports\": [...]}")
	case trimmed[0] == '[':
		var list []json.RawMessage
		if err := json.Unmarshal(trimmed, &list); err != nil {
			q.ignore("invalid JSON: %v", err)
			return
		}
		for i, raw := range list {
			addJSONReport(q, i, raw)
		}
	case trimmed[0] == '{':
		var top map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &top); err != nil {
			q.ignore("invalid JSON: %v", err)
			return
		}
		if _, batch := top["reports"]; !batch {
			addJSONReport(q, 0, trimmed)
			return
		}
		var b allotpb.QuotaReportBatch
		if err := jsonIn.Unmarshal(trimmed, &b); err != nil {
			// One bad report must not cost the others: read the list
			// entry by entry, and the client id on its own.
			var list []json.RawMessage
			if err := json.Unmarshal(top["reports"], &list); err != nil {
				q.ignore("reports: want a list of report objects: %v", err)
				return
			}
			for i, raw := range list {
				addJSONReport(q, i, raw)
			}
			for _, k := range slices.Sorted(maps.Keys(top)) {
				v := top[k]
				switch k {
				case "reports":
				case "client_id", "clientId":
					var id string
					if json.Unmarshal(v, &id) != nil {
						q.ignore("client_id: want a string")
					}
					q.setClient(id)
				default:
					q.ignore("unknown field %q in the report batch (known: reports, client_id)", k)
				}
			}
			return
		}
		q.setClient(b.GetClientId())
		for i, r := range b.GetReports() {
			q.add(i, r.GetBucket(), r.GetTokens())
		}
	default:
		q.ignore("invalid JSON: send a report object, a list of them, or {\"reports\": [...]}")
	}
}

func addJSONReport(q *QuotaReports, i int, raw []byte) {
	var r allotpb.QuotaReport
	if err := jsonIn.Unmarshal(raw, &r); err != nil {
		q.ignore("report %d: %v", i, err)
		return
	}
	q.add(i, r.GetBucket(), r.GetTokens())
}

func decodeReportsProto(data []byte, q *QuotaReports) {
	var b allotpb.QuotaReportBatch
	if err := proto.Unmarshal(data, &b); err != nil {
		q.ignore("cannot decode protobuf QuotaReportBatch: %v", err)
		return
	}
	if err := unknownIn(&b); err != nil {
		q.ignore("%v", err)
	}
	q.setClient(b.GetClientId())
	for i, r := range b.GetReports() {
		if err := unknownIn(r); err != nil {
			q.ignore("report %d: %v", i, err)
			continue
		}
		q.add(i, r.GetBucket(), r.GetTokens())
	}
}

// QuotaReportResponse returns the reply to a quota.report message that
// asked for one.
func (q *QuotaReports) QuotaReportResponse() *allotpb.QuotaReportResponse {
	return &allotpb.QuotaReportResponse{Accepted: int32(len(q.Reports)), Ignored: int32(min(q.Ignored, 1<<30)), Error: q.Error}
}
