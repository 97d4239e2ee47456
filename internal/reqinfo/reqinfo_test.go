package reqinfo

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestCheckTenant(t *testing.T) {
	info := func(v string) nats.Header { return nats.Header{Header: {v}} }
	for _, c := range []struct {
		name    string
		h       nats.Header
		tenants []string
		want    error
	}{
		{"open to all", info(`{"acc":"B"}`), nil, nil},
		{"own account", nil, []string{"A"}, nil},
		{"listed", info(`{"acc":"A","user":"UABC"}`), []string{"B", "A"}, nil},
		{"not listed", info(`{"acc":"B"}`), []string{"A"}, ErrNotOpen},
		{"no account", info(`{"user":"x"}`), []string{"A"}, ErrNotOpen},
		{"malformed", info(`{"acc":`), []string{"A"}, ErrMalformed},
		{"malformed but open to all", info(`{"acc":`), nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckTenant(c.h, c.tenants, `namespace "n"`)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("CheckTenant = %v, want %v", err, c.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	got, ok, err := Parse(nats.Header{Header: {`{"acc":"TENANT_A","rtt":1234,"user":"UABC","svc":"ALLOT"}`}})
	if err != nil || !ok || got != (Info{Account: "TENANT_A", User: "UABC"}) {
		t.Fatalf("Parse = %+v, %v, %v", got, ok, err)
	}
	if _, ok, err := Parse(nats.Header{}); ok || err != nil {
		t.Fatalf("Parse of no header = %v, %v", ok, err)
	}
}

func FuzzCheckTenant(f *testing.F) {
	f.Add(`{"acc":"A"}`, "A")
	f.Add(`{"acc":1}`, "")
	f.Fuzz(func(t *testing.T, v, tenant string) {
		err := CheckTenant(nats.Header{Header: {v}}, []string{tenant}, "x")
		if err != nil && !errors.Is(err, ErrNotOpen) && !errors.Is(err, ErrMalformed) {
			t.Fatalf("unexpected error %v", err)
		}
	})
}
