package wire

import (
	"errors"
	"testing"
)

func TestDecodeQuotaTakeOn(t *testing.T) {
	var q QuotaTake
	for _, body := range []string{`{}`, `{"bucket":"logins:alice"}`, `{"tokens":2}`} {
		if err := DecodeQuotaTakeOn(JSON, []byte(body), "logins", "alice", &q); err != nil || q.Bucket != "logins:alice" || q.Namespace != "logins" || q.Name != "alice" {
			t.Errorf("%s: %+v, %v", body, q, err)
		}
	}
	for _, body := range []string{`{"bucket":"logins:bob"}`, `{"bucket":"login:salice"}`, `{"bucket":"logins:alice:"}`, `{"bucket":`} {
		if err := DecodeQuotaTakeOn(JSON, []byte(body), "logins", "alice", &q); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want a bad request", body, err)
		}
	}
	if err := DecodeQuotaTakeOn(JSON, []byte(`{}`), "log ins", "alice", &q); !errors.Is(err, ErrBadRequest) {
		t.Errorf("a malformed subject bucket: %v, want a bad request", err)
	}
}

func TestDecodeQuotaReportsOn(t *testing.T) {
	q, err := DecodeQuotaReportsOn(JSON, []byte(`[{"tokens":3},{"bucket":"batch:job","tokens":2},{"tokens":-1}]`), "batch", "job")
	if err != nil || len(q.Reports) != 2 || q.Reports[0].Bucket != "batch:job" || q.Ignored != 1 {
		t.Fatalf("%+v, %v: want two reports for batch:job and one ignored", q, err)
	}
	if q, err := DecodeQuotaReportsOn(JSON, []byte(`{"reports":[{"tokens":3},{"bucket":"batch:other","tokens":2}]}`), "batch", "job"); !errors.Is(err, ErrBadRequest) || len(q.Reports) != 0 {
		t.Fatalf("a report for another bucket: %+v, %v; want a bad request and nothing", q, err)
	}
}
