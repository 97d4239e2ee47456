// Package headless drives a headless Chromium for tests of web pages: it
// starts the browser with --remote-debugging-pipe and speaks the Chrome
// DevTools protocol over that pipe (JSON messages ended by a NUL byte on
// file descriptors 3 and 4), so it needs no port, no websocket and no
// dependency beyond the browser binary.
package headless

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Find returns the path of a Chromium binary: $ALLOT_CHROMIUM if set,
// else the first of chromium, chromium-browser, google-chrome-stable and
// google-chrome on $PATH; "" if there is none.
func Find() string {
	if p := os.Getenv("ALLOT_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Browser is a running headless Chromium with one page attached.
type Browser struct {
	cmd     *exec.Cmd
	w       *os.File // our end of the browser's fd 3 (commands)
	r       *os.File // our end of the browser's fd 4 (replies)
	stderr  *lockedBuffer
	session string

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan reply
	readErr error
	done    chan struct{}
}

type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Options configure Start.
type Options struct {
	// Width and Height are the page's viewport in CSS pixels; default
	// 1280×900.
	Width, Height int
	// UserDataDir is the browser profile's directory; use a test's
	// TempDir. Required.
	UserDataDir string
}

// Start launches the browser at path and attaches to a blank page.
func Start(ctx context.Context, path string, opts Options) (*Browser, error) {
	if opts.UserDataDir == "" {
		return nil, errors.New("headless: no user data directory")
	}
	if opts.Width == 0 {
		opts.Width, opts.Height = 1280, 900
	}
	// fd 3: the browser reads commands; fd 4: it writes replies.
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("headless: pipe: %w", err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		cmdR.Close()
		cmdW.Close()
		return nil, fmt.Errorf("headless: pipe: %w", err)
	}
	cmd := exec.Command(path,
		"--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--hide-scrollbars", "--mute-audio",
		fmt.Sprintf("--window-size=%d,%d", opts.Width, opts.Height),
		"--user-data-dir="+opts.UserDataDir, "about:blank")
	cmd.ExtraFiles = []*os.File{cmdR, repW}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{cmdR, cmdW, repR, repW} {
			f.Close()
		}
		return nil, fmt.Errorf("headless: start %s: %w", path, err)
	}
	cmdR.Close()
	repW.Close()
	b := &Browser{cmd: cmd, w: cmdW, r: repR, stderr: stderr, pending: map[int64]chan reply{}, done: make(chan struct{})}
	go b.read()
	if err := b.attach(ctx, opts); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// attach opens a page target and a flat session on it.
func (b *Browser) attach(ctx context.Context, opts Options) error {
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return err
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		return err
	}
	b.session = att.SessionID
	if err := b.call(ctx, b.session, "Page.enable", nil, nil); err != nil {
		return err
	}
	return b.call(ctx, b.session, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": opts.Width, "height": opts.Height, "deviceScaleFactor": 1, "mobile": false}, nil)
}

// read dispatches the browser's replies to their callers; events are
// dropped.
func (b *Browser) read() {
	br := bufio.NewReader(b.r)
	var err error
	for {
		var msg []byte
		if msg, err = br.ReadBytes(0); err != nil {
			break
		}
		var m struct {
			ID int64 `json:"id"`
			reply
		}
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil || m.ID == 0 {
			continue
		}
		b.mu.Lock()
		ch := b.pending[m.ID]
		delete(b.pending, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m.reply
		}
	}
	b.mu.Lock()
	b.readErr = fmt.Errorf("headless: browser closed its pipe: %w; stderr: %s", err, b.stderr.String())
	b.mu.Unlock()
	close(b.done)
}

// call sends one command (on session, "" for the browser) and decodes its
// result into out (if not nil).
func (b *Browser) call(ctx context.Context, session, method string, params any, out any) error {
	ch := make(chan reply, 1)
	b.mu.Lock()
	if b.readErr != nil {
		err := b.readErr
		b.mu.Unlock()
		return err
	}
	b.nextID++
	id := b.nextID
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("headless: %s: %w", method, err)
	}
	if _, err := b.w.Write(append(data, 0)); err != nil {
		return fmt.Errorf("headless: send %s: %w", method, err)
	}
	select {
	case rep := <-ch:
		if rep.Error != nil {
			return fmt.Errorf("headless: %s: %s (%d)", method, rep.Error.Message, rep.Error.Code)
		}
		if out != nil {
			if err := json.Unmarshal(rep.Result, out); err != nil {
				return fmt.Errorf("headless: %s result: %w", method, err)
			}
		}
		return nil
	case <-b.done:
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.readErr
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return fmt.Errorf("headless: %s: %w", method, ctx.Err())
	}
}

// Navigate loads url in the page (returning once navigation committed,
// not once the page finished loading).
func (b *Browser) Navigate(ctx context.Context, url string) error {
	var res struct {
		ErrorText string `json:"errorText"`
	}
	if err := b.call(ctx, b.session, "Page.navigate", map[string]any{"url": url}, &res); err != nil {
		return err
	}
	if res.ErrorText != "" {
		return fmt.Errorf("headless: navigate to %s: %s", url, res.ErrorText)
	}
	return nil
}

// Eval evaluates a JavaScript expression in the page and decodes its
// value (JSON-serializable) into out.
func (b *Browser) Eval(ctx context.Context, expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := b.call(ctx, b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res); err != nil {
		return err
	}
	if e := res.ExceptionDetails; e != nil {
		return fmt.Errorf("headless: evaluate: %s %s", e.Text, e.Exception.Description)
	}
	if out == nil || len(res.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(res.Result.Value, out)
}

// Screenshot returns a PNG of the whole page.
func (b *Browser) Screenshot(ctx context.Context) ([]byte, error) {
	var res struct {
		Data string `json:"data"`
	}
	if err := b.call(ctx, b.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &res); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(res.Data)
}

// Close asks the browser to exit and waits for it (killing it if it has
// not exited after a few seconds).
func (b *Browser) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = b.call(ctx, "", "Browser.close", nil, nil)
	b.w.Close()
	exited := make(chan struct{})
	go func() {
		_ = b.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-exited
	}
	b.r.Close()
}

// lockedBuffer keeps the browser's stderr (the last 64 KiB) for errors.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > 64<<10 {
		l.buf = l.buf[len(l.buf)-64<<10:]
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

var _ io.Writer = (*lockedBuffer)(nil)
