package natstest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// RawRequest sends one request as user (password = user name) on a
// connection that writes the NATS protocol by hand, with the header
// block hdr as given, and returns the reply's error code header ("" when
// none). nats.go cannot send such blocks: it normalizes line breaks.
func RawRequest(t testing.TB, addr net.Addr, user, subject, hdr, body string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("no INFO: %q %v", line, err)
	}
	fmt.Fprintf(c, "CONNECT {\"user\":%q,\"pass\":%q,\"headers\":true,\"no_responders\":true,\"protocol\":1,\"verbose\":false}\r\n", user, user)
	fmt.Fprintf(c, "SUB _INBOX.forge 1\r\nHPUB %s _INBOX.forge %d %d\r\n%s%s\r\nPING\r\n", subject, len(hdr), len(hdr)+len(body), hdr, body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the reply: %v", err)
		}
		if strings.HasPrefix(line, "-ERR") {
			t.Fatalf("server: %s", line)
		}
		if !strings.HasPrefix(line, "HMSG ") && !strings.HasPrefix(line, "MSG ") {
			continue
		}
		f := strings.Fields(line)
		total, _ := strconv.Atoi(f[len(f)-1])
		buf := make([]byte, total+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(line, "HMSG ") {
			return ""
		}
		hlen, _ := strconv.Atoi(f[len(f)-2])
		h, err := nats.DecodeHeadersMsg(buf[:hlen])
		if err != nil {
			t.Fatal(err)
		}
		return h.Get("Nats-Service-Error-Code")
	}
}
