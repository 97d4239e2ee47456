package natstest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// NatsCLIVersion is the nats CLI the documentation's `nats` commands are
// checked with: CI installs it with
// `go install github.com/nats-io/natscli/nats@<version>`.
const NatsCLIVersion = "v0.5.0"

// RequireNatsCLIEnv, when set to a non-empty value (CI sets it), makes a
// test that needs the nats CLI fail where it cannot find one instead of
// skipping.
const RequireNatsCLIEnv = "ALLOT_REQUIRE_NATS_CLI"

// NatsCLI runs the real nats CLI against one server, as an operator
// would, with no saved context of the user's in the way.
type NatsCLI struct {
	tb   testing.TB
	path string
	url  string
	env  []string
}

// FindNatsCLI returns the path of the nats CLI: in $(go env GOPATH)/bin,
// where `go install` puts it, else on PATH; "" when there is none.
func FindNatsCLI() string {
	var dirs []string
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for d := range strings.SplitSeq(strings.TrimSpace(string(out)), string(os.PathListSeparator)) {
			if d != "" {
				dirs = append(dirs, filepath.Join(d, "bin"))
			}
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, "nats")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	return ""
}

// CLI returns the nats CLI connected to url. Without a binary the test
// is skipped, unless RequireNatsCLIEnv is set (CI), where it fails.
func CLI(tb testing.TB, url string) *NatsCLI {
	tb.Helper()
	p := FindNatsCLI()
	if p == "" {
		msg := "no nats CLI in $(go env GOPATH)/bin or on PATH: go install github.com/nats-io/natscli/nats@" + NatsCLIVersion
		if os.Getenv(RequireNatsCLIEnv) != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	home := tb.TempDir()
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH")}
	return &NatsCLI{tb: tb, path: p, url: url, env: env}
}

// Run runs `nats --server URL args...` and returns its standard output
// and error; err is set when it exits non-zero.
func (c *NatsCLI) Run(args ...string) (stdout, stderr string, err error) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.path, append([]string{"--no-context", "--server", c.url}, args...)...)
	cmd.Env = c.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// MustRun is Run failing the test on a non-zero exit; it returns the
// standard output.
func (c *NatsCLI) MustRun(args ...string) string {
	c.tb.Helper()
	out, errs, err := c.Run(args...)
	if err != nil {
		c.tb.Fatalf("nats %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errs)
	}
	return out
}
