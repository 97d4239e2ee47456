package reqinfo

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestParse(t *testing.T) {
	got, ok, err := Parse(nats.Header{Header: {`{"acc":"TENANT_A","rtt":1234,"user":"UABC","svc":"ALLOT"}`}})
	if err != nil || !ok || got != (Info{Account: "TENANT_A", User: "UABC"}) {
		t.Fatalf("Parse = %+v, %v, %v", got, ok, err)
	}
	if _, ok, err := Parse(nats.Header{}); ok || err != nil {
		t.Fatalf("Parse of no header = %v, %v", ok, err)
	}
	for _, h := range []nats.Header{
		{Header: {`{"acc":`}},
		{Header: {`{"acc":"A","user":"forged"}`, `{"acc":"A","user":"real"}`}},
	} {
		if _, _, err := Parse(h); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%v) = %v, want ErrMalformed", h, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"acc":"A"}`)
	f.Add(`{"acc":1}`)
	f.Fuzz(func(t *testing.T, v string) {
		if _, _, err := Parse(nats.Header{Header: {v}}); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("unexpected error %v", err)
		}
	})
}
