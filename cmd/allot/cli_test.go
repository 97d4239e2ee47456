package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/natstest"
)

// unreachable is a NATS URL nothing listens on: a command that fails with
// an error naming its own command line must not have tried it.
const unreachable = "nats://127.0.0.1:1"

// Every connecting command's help names the arguments of the connection
// flags: a back-quoted word in a usage string is the argument's name, so
// "as `allot secure init` writes" once made it "-nkey allot secure init".
func TestHelpNamesFlagArguments(t *testing.T) {
	for _, cmd := range [][]string{
		{"coordinator"}, {"agent"}, {"status"}, {"get"}, {"release"},
		{"config", "put"}, {"config", "get"}, {"config", "list"}, {"config", "delete"},
		{"config", "history"}, {"config", "explain"}, {"config", "status"},
	} {
		code, out, errs := runCLI(t, "", append(cmd, "-h")...)
		if code != 0 || errs != "" {
			t.Errorf("%q -h: exit %d, stderr %q", cmd, code, errs)
		}
		for _, want := range []string{"--nkey FILE", "--nats URL", "--creds FILE", "--tls-ca FILE", "--inbox-prefix PREFIX", "Usage:\n  allot " + strings.Join(cmd, " ")} {
			if !strings.Contains(out, want) {
				t.Errorf("%q -h lacks %q:\n%s", cmd, want, out)
			}
		}
		if strings.Contains(out, "--nkey allot") {
			t.Errorf("%q -h names --nkey's argument after a quoted command:\n%s", cmd, out)
		}
	}
}

// A bad flag is reported once, with where to find the usage and the flags
// closest to it, instead of the error twice around the whole usage; a Go
// style single-dash long flag is pointed to its two-dash spelling.
func TestBadFlagSuggests(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--jsn"}, "allot status: unknown flag: --jsn (did you mean --json?)\nRun 'allot status --help' for usage.\n"},
		{[]string{"get", "db", "--wnats", "2"}, "allot get: unknown flag: --wnats (did you mean --nats?)\nRun 'allot get --help' for usage.\n"},
		{[]string{"config", "validate", "-name", "namespaces.x", "-"}, "allot config validate: unknown shorthand flag: 'n' in -name (long flags take two dashes: --name)\nRun 'allot config validate --help' for usage.\n"},
		{[]string{"bench", "load", "--in-proces"}, "allot bench load: unknown flag: --in-proces (did you mean --in-process?)\n"},
		{[]string{"up", "--replicas", "many"}, `allot up: invalid argument "many" for "--replicas" flag`},
	} {
		code, out, errs := runCLI(t, "", tc.args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errs, tc.want)
		}
		if strings.Count(errs, "unknown") > 1 || strings.Contains(errs, "--tls-ca") {
			t.Errorf("%q: the error is repeated or the usage printed:\n%s", tc.args, errs)
		}
	}
}

// A mistyped command or subcommand gets the names closest to it.
func TestUnknownCommandSuggests(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stauts"}, `allot: unknown command "stauts" (did you mean status?)`},
		{[]string{"config", "lsit", "--nats", unreachable}, `allot config: unknown command "lsit" (did you mean list?)`},
		{[]string{"config", "frobnicate"}, `allot config: unknown command "frobnicate"` + "\n"},
		{[]string{"bench", "chron"}, `allot bench: unknown command "chron" (did you mean charon?)`},
		{[]string{"secure", "int"}, `allot secure: unknown command "int" (did you mean init?)`},
		{[]string{"config"}, "allot config: missing subcommand\nRun 'allot config --help' for usage."},
	} {
		code, _, errs := runCLI(t, "", tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// `allot --help` lists every command, and `allot bench --help` every
// benchmark, each runnable as its own subcommand.
func TestHelpListsEveryCommand(t *testing.T) {
	code, out, _ := runCLI(t, "", "--help")
	for _, c := range []string{"up", "coordinator", "agent", "status", "get", "release", "config", "secure", "bench", "version", "completion"} {
		if code != 0 || !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("allot --help (exit %d) does not list %s:\n%s", code, c, out)
		}
	}
	code, out, _ = runCLI(t, "", "bench", "--help")
	for _, b := range benchmarks {
		if code != 0 || !strings.Contains(out, "\n  "+b.name+" ") {
			t.Errorf("allot bench --help (exit %d) does not list %s:\n%s", code, b.name, out)
		}
	}
	for _, c := range []string{"put", "get", "list", "delete", "history", "validate", "explain", "status"} {
		if _, out, _ := runCLI(t, "", "config", "--help"); !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("allot config --help does not list %s:\n%s", c, out)
		}
	}
}

// `allot release` without --client is refused before any connection,
// naming the flag, rather than with the server's "client_id is empty".
func TestReleaseNeedsClient(t *testing.T) {
	code, _, errs := runCLI(t, "", "release", "db", "--nats", unreachable)
	if code != 2 || !strings.Contains(errs, "allot release: --client is required") || strings.Contains(errs, "connect") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

// A time-out or wait of no time, or a --node that cannot name subjects, is
// refused before any connection, naming the flag. Before, a negative
// --timeout of get failed with the NATS client's "timeout invalid", an
// empty --node asked allot..capacity.get, and `status --wait 0` printed
// every leader as "not serving" and exited 1.
func TestCLIFlagValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "db", "--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{[]string{"get", "db", "--timeout", "-1s"}, "--timeout -1s: want a positive duration"},
		{[]string{"get", "db", "--node", ""}, `--node "": node name "" must be`},
		{[]string{"get", "db", "--node", "a b"}, `--node "a b": node name "a b" must be`},
		{[]string{"release", "db", "--client", "c", "--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{[]string{"release", "db", "--client", "c", "--node", "a.b"}, `--node "a.b"`},
		{[]string{"status", "--wait", "0s"}, "--wait 0s: want a positive duration"},
		{[]string{"status", "--wait", "-1s"}, "--wait -1s: want a positive duration"},
		{[]string{"config", "status", "--wait", "0s"}, "--wait 0s: want a positive duration"},
		{[]string{"config", "list", "--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{[]string{"config", "get", "db", "--timeout", "-2s"}, "--timeout -2s: want a positive duration"},
		{[]string{"config", "delete", "db", "--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{[]string{"config", "explain", "db", "--wait", "-1s"}, "--wait -1s: want 0 (do not ask) or a positive duration"},
		// A resource id no coordinator would take is not explained as
		// getting a template: every request naming it is a 400.
		{[]string{"config", "explain", ""}, "resource_id is empty"},
		{[]string{"config", "explain", "a b"}, `resource_id "a b" contains a space or control character`},
		{[]string{"config", "explain", "--resource", strings.Repeat("a", 257)}, "resource_id is 257 bytes long; the limit is 256"},
		{[]string{"agent", "--http-addr", "127.0.0.1:0", "--max-leases", "-1"}, "--max-leases -1: want 0 (the default, "},
	} {
		args := append(tc.args, "--nats", unreachable)
		code, _, errs := runCLI(t, "", args...)
		if code != 2 || !strings.Contains(errs, tc.want) || strings.Contains(errs, "connect") {
			t.Errorf("allot %q: exit %d: %s; want exit 2 with %q", args, code, errs, tc.want)
		}
	}
}

// A quota namespace stored under a key without a prefix (which names a
// template) is refused with the key it belongs under, before connecting.
func TestConfigPutSuggestsPrefix(t *testing.T) {
	file := filepath.Join(t.TempDir(), "logins.json")
	if err := os.WriteFile(file, []byte(cliLogins), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, "", "config", "put", "logins2", file, "--nats", unreachable)
	want := "(it is a valid quota namespace: a key without a prefix names a template; store it with 'allot config put namespaces.logins2 " + file + "')"
	if code != 1 || !strings.Contains(errs, want) || strings.Contains(errs, "connect") {
		t.Fatalf("exit %d: %s\nwant %s", code, errs, want)
	}
	code, _, errs = runCLI(t, edgeDomain, "config", "put", "edge", "-", "--nats", unreachable)
	if code != 1 || !strings.Contains(errs, "store it with 'allot config put envoy.edge -'") {
		t.Fatalf("Envoy domain without its prefix: exit %d: %s", code, errs)
	}
}

// The configuration bucket's description names every kind of document it
// holds, not templates alone.
func TestConfigBucketDescription(t *testing.T) {
	srv := natstest.Server(t)
	if code, _, errs := runCLI(t, cliMySQL, "config", "put", "--create-bucket", "mysql-main", "-", "--nats", srv.ClientURL()); code != 0 {
		t.Fatal(errs)
	}
	js, err := jetstream.New(natstest.Conn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), "KV_"+configkv.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	d := s.CachedInfo().Config.Description
	for _, kind := range []string{"templates.", "namespaces.", "domains.", "envoy."} {
		if !strings.Contains(d, kind) {
			t.Errorf("description %q does not name %s", d, kind)
		}
	}
}

// Capacities read to six significant digits, never fewer than their whole
// part, in the replies and tables the CLI prints.
func TestNumbersRounded(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{499.9999650609383, "500"}, {100, "100"}, {0, "0"}, {-2.5, "-2.5"}, {12.3456789, "12.3457"},
		{1234567.8, "1234568"}, {0.000123456789, "0.000123457"}, {0.5, "0.5"},
	} {
		if got := number(tc.in); got != tc.want {
			t.Errorf("number(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
	in := "{\n  \"gets\": {\n    \"capacity\": 499.9999650609383,\n    \"resource_id\": \"v1.123456789\"\n  },\n  \"list\": [\n    0.30000000000000004,\n    7\n  ],\n  \"safe_capacity\": 2.5e-7\n}"
	want := "{\n  \"gets\": {\n    \"capacity\": 500,\n    \"resource_id\": \"v1.123456789\"\n  },\n  \"list\": [\n    0.3,\n    7\n  ],\n  \"safe_capacity\": 2.5e-07\n}"
	if got := string(roundJSON([]byte(in))); got != want {
		t.Errorf("roundJSON:\n%s\nwant\n%s", got, want)
	}
}

// `allot completion SHELL` writes cobra's completion script for each shell
// the README names.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_allot", "zsh": "#compdef allot", "fish": "complete -c allot", "powershell": "Register-ArgumentCompleter"} {
		code, out, errs := runCLI(t, "", "completion", shell)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, %s; want %q in:\n%.300s", shell, code, errs, want, out)
		}
	}
	// Flags complete too: cobra's hidden __complete command answers what
	// the scripts ask.
	code, out, _ := runCLI(t, "", "__complete", "config", "put", "--create-")
	if code != 0 || !strings.Contains(out, "--create-bucket") || !strings.Contains(out, "--create-only") {
		t.Errorf("__complete config put --create-: exit %d:\n%s", code, out)
	}
}
