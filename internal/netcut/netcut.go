// Package netcut relays TCP connections to a target and can cut them:
// tests and simulations put it on a leaf-node link to cut and restore
// the link without reloading the server's options (a reload races with
// the server's own readers of its options under the race detector). It
// can also delay what goes to the target, to make a link slow without
// making it fail.
package netcut

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Relay accepts connections on a loopback port and relays each to the
// target address until it is cut.
type Relay struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	delay time.Duration // what goes to the target is held this long
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// New starts a relay to target (host:port) on a random loopback port.
func New(target string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netcut: listen: %w", err)
	}
	r := &Relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the relay's address (host:port).
func (r *Relay) Addr() string { return r.ln.Addr().String() }

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.cut {
			r.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			r.mu.Unlock()
			_ = c.Close()
			continue
		}
		r.conns[c], r.conns[up] = struct{}{}, struct{}{}
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(c, up, false)
		go r.pipe(up, c, true)
	}
}

func (r *Relay) pipe(dst, src net.Conn, toTarget bool) {
	defer r.wg.Done()
	if toTarget {
		r.delayedCopy(dst, src)
	} else {
		_, _ = io.Copy(dst, src)
	}
	_ = dst.Close()
	_ = src.Close()
	r.mu.Lock()
	delete(r.conns, dst)
	delete(r.conns, src)
	r.mu.Unlock()
}

// chunk is what one read from a connection got, and when to pass it on.
type chunk struct {
	at   time.Time
	data []byte
}

// delayedCopy copies src to dst, each read held for the delay in force
// when it was read. The reads go on meanwhile, so a delay makes the link
// slow, not narrow: bytes arrive in order, each the delay late.
func (r *Relay) delayedCopy(dst, src net.Conn) {
	ch := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range ch {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.data); err != nil {
				_ = src.Close() // ends the reads below
				for range ch {
				}
				return
			}
		}
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			d := r.delay
			r.mu.Unlock()
			ch <- chunk{at: time.Now().Add(d), data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			break
		}
	}
	close(ch)
	<-done
}

// SetDelay holds whatever is relayed to the target d long (0: none), on
// the connections open now and later; what goes back is not delayed, so a
// request and its reply take d more.
func (r *Relay) SetDelay(d time.Duration) {
	r.mu.Lock()
	r.delay = d
	r.mu.Unlock()
}

// Cut closes every relayed connection and refuses new ones until Restore.
func (r *Relay) Cut() {
	r.mu.Lock()
	r.cut = true
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
}

// Restore accepts connections again.
func (r *Relay) Restore() {
	r.mu.Lock()
	r.cut = false
	r.mu.Unlock()
}

// Close stops the relay and closes its connections.
func (r *Relay) Close() error {
	err := r.ln.Close()
	r.Cut()
	r.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
