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
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/subjects"
)

// cliEnv carries the process's streams so commands stay testable.
type cliEnv struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
	// upMetricsAddr, if set, replaces defaultUpMetricsAddr as `allot
	// up`'s default metrics address: tests hold a port of their own
	// rather than a fixed one any other process on the host may hold.
	upMetricsAddr string
}

// runFunc is a command's body: it runs once the command's flags are
// parsed, with the positional arguments left.
type runFunc func(ctx context.Context, env *cliEnv, args []string) error

// defineFunc registers a command's flags on fs and returns its body,
// which reads the flags' variables.
type defineFunc func(fs *pflag.FlagSet) runFunc

// newRoot builds the command tree, writing to env's streams.
func newRoot(env *cliEnv) *cobra.Command {
	root := group(env, "allot", "a global, distributed, client-side rate limiter on NATS",
		leaf(env, "up", "start an embedded NATS server with JetStream and a coordinator (development default)", defineUp),
		leaf(env, "coordinator", "run a coordinator against an existing NATS deployment", defineCoordinator),
		leaf(env, "agent", "run a sidecar agent: Envoy's rate limit service from leases (--rls-addr) and a local HTTP allow endpoint (--http-addr)", defineAgent),
		leaf(env, "status", "show each node's coordinator leader, term and followers", defineStatus),
		leaf(env, "get RESOURCE [RESOURCE...]", "ask a coordinator for capacity and print the lease", defineGet),
		leaf(env, "release RESOURCE [RESOURCE...] --client ID", "release leases held by a client id", defineRelease),
		configCommand(env),
		group(env, "secure", "write development credentials for the secure NATS configuration",
			leaf(env, "init --dir DIR", "write development credentials for deploy/nats/secure (see docs/security.md)", defineSecureInit)),
		benchCommand(env),
		leaf(env, "version", "print the version", defineVersion),
	)
	root.Long = "allot: a global, distributed, client-side rate limiter on NATS.\nSee README.md and docs/ for how to deploy and configure it."
	root.SetIn(env.stdin)
	root.SetOut(env.stdout)
	root.SetErr(env.stderr)
	root.SetFlagErrorFunc(flagError)
	root.CompletionOptions.HiddenDefaultCmd = false
	return root
}

// leaf makes a command that runs the body define returns; use is its
// name followed by its arguments' synopsis.
func leaf(env *cliEnv, use, short string, define defineFunc) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short}
	body := define(c.Flags())
	c.RunE = func(cmd *cobra.Command, args []string) error {
		return body(cmd.Context(), env, args)
	}
	return c
}

// group makes a command that only holds subcommands. Without one it
// prints its help; a word that names none is refused with the names
// closest to it (cobra does that only for the root).
func group(env *cliEnv, use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use: use, Short: short,
		Args:                       cobra.ArbitraryArgs,
		SuggestionsMinimumDistance: 2,
		// An unknown subcommand's flags are not the group's: report the
		// subcommand, not its first flag.
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				if !cmd.HasParent() {
					return cmd.Help()
				}
				return usageError{errors.New("missing subcommand")}
			}
			return usageError{fmt.Errorf("unknown command %q%s", args[0], didYouMean(closest(args[0], cmd.SuggestionsFor(args[0]))))}
		},
	}
	c.AddCommand(subs...)
	_ = env // the streams are the root's, inherited
	return c
}

// usageError is a command line that does not say what to do: its
// message is followed by where to find the command's usage.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// didYouMean formats suggestions after an error message.
func didYouMean(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(" (did you mean %s?)", names[0])
	}
	return fmt.Sprintf(" (did you mean %s or %s?)", strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// closest keeps the names nearest to typed.
func closest(typed string, names []string) []string {
	best := -1
	var out []string
	for _, n := range names {
		switch d := config.EditDistance(typed, n); {
		case best < 0 || d < best:
			best, out = d, []string{n}
		case d == best:
			out = append(out, n)
		}
	}
	return out
}

// exactArgs refuses a command line without n positional arguments,
// described in the message by what.
func exactArgs(args []string, n int, what string) error {
	if len(args) != n {
		return usageError{fmt.Errorf("want %d argument(s), %s; got %d", n, what, len(args))}
	}
	return nil
}

// positiveFlag refuses a zero or negative duration given to --flag: a
// request or a wait of no time cannot be answered, and what follows (the
// NATS client's "timeout invalid", replicas reported as not serving) does
// not say why.
func positiveFlag(flag string, d time.Duration) error {
	if d <= 0 {
		return usageError{fmt.Errorf("--%s %v: want a positive duration, such as 5s", flag, d)}
	}
	return nil
}

// nodeFlag refuses a --node that cannot name the subjects allot.<node>.*.
func nodeFlag(node string) error {
	if err := subjects.ValidateNode(node); err != nil {
		return usageError{fmt.Errorf("--node %q: %w", node, err)}
	}
	return nil
}

// noArgs refuses positional arguments.
func noArgs(args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", args)}
	}
	return nil
}

func main() {
	env := &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, env, os.Args[1:]))
}

// run runs the command line args and returns the exit code: 0, 1 for a
// command that failed, 2 for a command line that did not say what to do.
// Each error is printed once, after the command's name.
func run(ctx context.Context, env *cliEnv, args []string) int {
	root := newRoot(env)
	root.SetArgs(args)
	root.SilenceErrors = true
	root.SilenceUsage = true
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(env.stderr, "%s: %v\n", cmd.CommandPath(), err)
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(env.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return 2
	}
	return 1
}

func defineVersion(*pflag.FlagSet) runFunc {
	return func(_ context.Context, env *cliEnv, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "allot %s\n", versionString())
		return nil
	}
}

// flagError makes a flag parsing error a usage error, naming the flags
// the command has that come closest to a mistyped one. Go's flag package
// took single-dash long flags (-nats); pflag reads those as shorthands,
// so such a flag is pointed to its double-dash spelling.
func flagError(cmd *cobra.Command, err error) error {
	var missing *pflag.NotExistError
	if !errors.As(err, &missing) {
		return usageError{err}
	}
	typed := missing.GetSpecifiedName()
	if short := missing.GetSpecifiedShortnames(); short != "" {
		if len(short) > 1 && cmd.Flags().Lookup(short) != nil {
			return usageError{fmt.Errorf("%w (long flags take two dashes: --%s)", err, short)}
		}
		typed = short
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && closeTo(typed, f.Name) {
			names = append(names, f.Name)
		}
	})
	names = closest(typed, names)
	for i := range names {
		names[i] = "--" + names[i]
	}
	return usageError{fmt.Errorf("%w%s", err, didYouMean(names))}
}

// closeTo reports whether a mistyped name was probably meant to be name:
// within two edits, or a prefix of it.
func closeTo(typed, name string) bool {
	if len(typed) < 2 {
		return false
	}
	return config.EditDistance(typed, name) <= 2 || strings.HasPrefix(name, typed)
}

// goFlag adapts a value of Go's flag package to pflag, naming its
// argument arg in the help.
func goFlag(v flag.Value, arg string) pflag.Value { return namedValue{v, arg} }

type namedValue struct {
	flag.Value
	arg string
}

// Type is what pflag's help prints as the flag's argument.
func (v namedValue) Type() string { return v.arg }
