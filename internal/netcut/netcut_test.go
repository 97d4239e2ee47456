package netcut

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err = bufio.NewReader(c).ReadString('\n')
	return err
}

func TestRelayCutRestore(t *testing.T) {
	r, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := roundTrip(r.Addr()); err != nil {
		t.Fatalf("relay does not pass data: %v", err)
	}
	// A connection open across the cut is closed by it.
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond) // let the relay pair it up
	r.Cut()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a relayed connection survived the cut")
	}
	if err := roundTrip(r.Addr()); err == nil {
		t.Fatal("a new connection got through while cut")
	}
	r.Restore()
	if err := roundTrip(r.Addr()); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

func TestRelayDelay(t *testing.T) {
	r, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in := bufio.NewReader(c)
	const d = 200 * time.Millisecond
	r.SetDelay(d)
	// A delay holds bytes back, never drops or reorders them: both lines
	// come back, in order, each at least d after it was sent.
	start := time.Now()
	if _, err := c.Write([]byte("one\ntwo\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for _, want := range []string{"one\n", "two\n"} {
		got, err := in.ReadString('\n')
		if err != nil || got != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	if took := time.Since(start); took < d {
		t.Fatalf("round trip took %v with a delay of %v", took, d)
	}
	r.SetDelay(0)
	if err := roundTrip(r.Addr()); err != nil {
		t.Fatalf("after the delay was lifted: %v", err)
	}
}
