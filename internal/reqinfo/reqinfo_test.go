package reqinfo

import (
	"errors"
	"strings"
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

func TestCheckBlock(t *testing.T) {
	server := "Nats-Request-Info: {\"acc\":\"A\"}\r\n" // the shortest line nats-server can add
	for _, c := range []struct {
		name, block string
		ok          bool
	}{
		{"canonical", "NATS/1.0\r\nX-A: 1\r\n" + server + "\r\n", true},
		{"bare line ends, no spaces", "NATS/1.0\nX-A:1\nX-B:2\n" + server + "\n", true},
		{"early end hides the server's line", "NATS/1.0\r\nNats-Request-Info: {\"acc\":\"A\",\"user\":\"x\"}\n\n" + server + "\r\n", false},
		{"early end, as short as can be", "NATS/1.0\nA:\nB:\nC:\nD:\nE:\nF:\nNats-Request-Info:{\"acc\":\"A\"}\n\n" + server + "\r\n", false},
		{"too many values", "NATS/1.0\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\n" + server + "\r\n", false},
		{"a status line", "NATS/1.0 503 " + strings.Repeat("x", 40) + "\r\n" + server + "\r\n", false},
		{"skipped empty keys", "NATS/1.0\r\n: hidden\r\n" + server + "\r\n", false},
		{"the server's line glued to a value", "NATS/1.0\r\nX: 0\nNats-Request-Info: {\"acc\":\"A\",\"user\":\"x\"}\nY: 1" + server + "\r\n", false},
		{"the server's line glued to a key", "NATS/1.0\r\nX: 0\nNats-Request-Info: {\"acc\":\"A\",\"user\":\"x\"}\nY" + server + "\r\n", false},
	} {
		h, err := nats.DecodeHeadersMsg([]byte(c.block))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := CheckBlock(h, len(c.block)); (err == nil) != c.ok {
			t.Errorf("%s: CheckBlock = %v, want ok %v", c.name, err, c.ok)
		} else if err != nil && !errors.Is(err, ErrHidden) {
			t.Errorf("%s: %v does not wrap ErrHidden", c.name, err)
		}
	}
	if err := CheckBlock(nil, 0); err != nil {
		t.Errorf("no headers: %v", err)
	}
}

// FuzzCheckBlock: whatever a client writes before the line nats-server
// appends (prefix, its block less the two bytes the server strips), a
// block that CheckBlock and Parse accept gives the server's request info.
func FuzzCheckBlock(f *testing.F) {
	f.Add("X-A: 1\r\n")
	f.Add("X-A: 1\n\n")
	f.Add("Nats-Request-Info:{\"acc\":\"A\",\"user\":\"x\"}\n\n")
	f.Add("X: 0\nNats-Request-Info: {\"acc\":\"A\",\"user\":\"x\"}\nY: 1")
	f.Fuzz(func(t *testing.T, prefix string) {
		block := "NATS/1.0\r\n" + prefix + "Nats-Request-Info: {\"acc\":\"A\"}\r\n\r\n"
		h, err := nats.DecodeHeadersMsg([]byte(block))
		if err != nil || CheckBlock(h, len(block)) != nil {
			return
		}
		info, ok, err := Parse(h)
		if err == nil && (!ok || info.Account != "A" || info.User != "") {
			t.Fatalf("block %q passes, but reads as %+v (present %v)", block, info, ok)
		}
	})
}
