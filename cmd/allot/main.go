// Command allot runs allot's coordinator, an embedded NATS deployment for
// development, and operator tools. Run `allot help` for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

// command is one subcommand of the allot binary.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *cliEnv, args []string) error
}

// cliEnv carries the process's streams so commands stay testable.
type cliEnv struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
}

func commands() []command {
	return []command{
		{"up", "start an embedded NATS server with JetStream and a coordinator (development default)", runUp},
		{"coordinator", "run a coordinator against an existing NATS deployment", runCoordinator},
		{"agent", "run a sidecar agent: Envoy's rate limit service from leases (--rls-addr) and a local HTTP allow endpoint (--http-addr)", runAgent},
		{"status", "show each node's coordinator leader, term and followers", runStatus},
		{"get", "ask a coordinator for capacity and print the lease", runGet},
		{"release", "release leases held by a client id", runRelease},
		{"config", "manage resource templates in the configuration bucket", runConfig},
		{"secure", "write development credentials for the secure NATS configuration (secure init --dir DIR)", runSecure},
		{"bench", "run the benchmarks: load, quota, charon, envoy, scale, agent, sim, sim7 or all (see bench/README.md)", runBench},
		{"version", "print the version", runVersion},
	}
}

// version may be set at build time with -ldflags "-X main.version=…";
// otherwise the module version from the build information is reported.
var version = ""

func main() {
	env := &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, env, os.Args[1:]))
}

func run(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(env.stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(ctx, env, args[1:])
			if err == nil || errors.Is(err, flag.ErrHelp) {
				return 0
			}
			fmt.Fprintf(env.stderr, "allot %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(env.stderr, "allot: unknown command %q\n\n", args[0])
	usage(env.stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "allot: a global, distributed, client-side rate limiter on NATS")
	fmt.Fprintln(w, "\nUsage: allot <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'allot <command> -h' for a command's flags.")
}

func runVersion(_ context.Context, env *cliEnv, _ []string) error {
	fmt.Fprintf(env.stdout, "allot %s (%s)\n", versionString(), runtime.Version())
	return nil
}

// newFlags makes a flag set that reports errors instead of exiting.
func newFlags(env *cliEnv, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("allot "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {
		fmt.Fprintf(env.stderr, "Usage: allot %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}
