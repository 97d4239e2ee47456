package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/internal/config"
)

// configCommand is one `allot config` subcommand.
type configCommand struct {
	name, synopsis, summary string
	run                     func(ctx context.Context, env *cliEnv, args []string) error
}

func configCommands() []configCommand {
	return []configCommand{
		{"put", "NAME FILE|-", "validate a template (JSON or YAML) and store it as templates.NAME", configPut},
		{"get", "NAME", "print the stored template document", configGet},
		{"list", "", "list templates with their revision, glob, algorithm and validity", configList},
		{"delete", "NAME", "delete templates.NAME (its resources fall back to the next match)", configDelete},
		{"history", "NAME", "print the stored revisions of templates.NAME", configHistory},
		{"validate", "FILE|-", "check a template file offline and print its normalized form", configValidate},
		{"explain", "RESOURCE_ID", "show which template a resource gets, and every candidate in precedence order", configExplain},
		{"status", "", "show which revision of each template every coordinator serves", configStatus},
	}
}

// runConfig dispatches `allot config <subcommand>`.
func runConfig(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		configUsage(env.stdout)
		if len(args) == 0 {
			return errors.New("missing subcommand")
		}
		return nil
	}
	for _, c := range configCommands() {
		if c.name == args[0] {
			return c.run(ctx, env, args[1:])
		}
	}
	configUsage(env.stderr)
	return fmt.Errorf("unknown subcommand %q", args[0])
}

func configUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: allot config <subcommand> [flags] [args]")
	fmt.Fprintln(w, "\nTemplates live in the JetStream KV bucket "+config.DefaultBucket+", one per key "+config.KeyPrefix+"<name>.")
	fmt.Fprintln(w, "\nSubcommands:")
	for _, c := range configCommands() {
		fmt.Fprintf(w, "  %-9s %-12s %s\n", c.name, c.synopsis, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'allot config <subcommand> -h' for its flags. See docs/configuration.md.")
}

// configFlags are the flags every online subcommand takes.
type configFlags struct {
	conn    connFlags
	bucket  string
	timeout time.Duration
}

func (c *configFlags) register(fs *flag.FlagSet) {
	c.conn.register(fs)
	fs.StringVar(&c.bucket, "bucket", config.DefaultBucket, "KV bucket holding resource templates")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "timeout for NATS operations")
}

// parseConfigFlags parses flags and checks the positional argument count.
func parseConfigFlags(fs *flag.FlagSet, args []string, nargs int) error {
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != nargs {
		fs.Usage()
		return fmt.Errorf("want %d argument(s), got %d", nargs, fs.NArg())
	}
	return nil
}

// connect bounds ctx by the --timeout, connects and opens the
// configuration bucket; done releases all of it.
func (c *configFlags) connect(ctx context.Context, create bool) (context.Context, jetstream.KeyValue, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	kv, nc, err := c.open(ctx, create)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, kv, func() { nc.Close(); cancel() }, nil
}

// open connects and opens the configuration bucket; close nc to release it.
func (c *configFlags) open(ctx context.Context, create bool) (kv jetstream.KeyValue, nc *nats.Conn, err error) {
	nc, err = c.conn.dial("allot config", nats.Timeout(c.timeout))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	kv, err = config.OpenBucket(ctx, js, c.bucket, create)
	if err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil, fmt.Errorf("%w (no template was ever stored; `allot config put` or `allot up` creates it)", err)
		}
		return nil, nil, err
	}
	return kv, nc, nil
}

func readInput(env *cliEnv, file string) ([]byte, error) {
	var r io.Reader = env.stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, config.MaxTemplateSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	return data, nil
}

func printNotes(w io.Writer, notes []string) {
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func configPut(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "config put", "NAME FILE|-")
	var cf configFlags
	cf.register(fs)
	expect := fs.Uint64("revision", 0, "store only if the key's current revision is this (0: any); with -create-only, ignored")
	createOnly := fs.Bool("create-only", false, "store only if the key does not exist")
	if err := parseConfigFlags(fs, args, 2); err != nil {
		return err
	}
	name, file := fs.Arg(0), fs.Arg(1)
	data, err := readInput(env, file)
	if err != nil {
		return err
	}
	t, notes, err := config.ParseAndCompile(name, 0, data)
	if err != nil {
		return fmt.Errorf("refusing invalid template %s: %w", name, err)
	}
	printNotes(env.stderr, notes)
	ctx, kv, done, err := cf.connect(ctx, true)
	if err != nil {
		return err
	}
	defer done()
	key := config.Key(name)
	var rev uint64
	switch {
	case *createOnly:
		rev, err = kv.Create(ctx, key, data)
	case *expect > 0:
		rev, err = kv.Update(ctx, key, data, *expect)
	default:
		rev, err = kv.Put(ctx, key, data)
	}
	if err != nil {
		return fmt.Errorf("store %s: %w", key, err)
	}
	fmt.Fprintf(env.stdout, "stored %s revision %d (glob %q, %s, capacity %g)\n", key, rev, t.Glob, t.Algorithm, t.Capacity)
	return nil
}

func configGet(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "config get", "NAME")
	var cf configFlags
	cf.register(fs)
	normalized := fs.Bool("normalized", false, "print the normalized template (every default explicit) instead of the stored document")
	if err := parseConfigFlags(fs, args, 1); err != nil {
		return err
	}
	ctx, kv, done, err := cf.connect(ctx, false)
	if err != nil {
		return err
	}
	defer done()
	key := config.Key(fs.Arg(0))
	e, err := kv.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	fmt.Fprintf(env.stderr, "%s revision %d, stored %s\n", key, e.Revision(), e.Created().UTC().Format(time.RFC3339))
	if !*normalized {
		_, err = env.stdout.Write(e.Value())
		if len(e.Value()) > 0 && e.Value()[len(e.Value())-1] != '\n' {
			fmt.Fprintln(env.stdout)
		}
		return err
	}
	t, notes, err := config.ParseAndCompile(fs.Arg(0), e.Revision(), e.Value())
	if err != nil {
		return fmt.Errorf("%s revision %d is invalid (coordinators keep serving the previous valid revision): %w", key, e.Revision(), err)
	}
	printNotes(env.stderr, notes)
	doc, err := config.MarshalTemplateJSON(t)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.stdout, string(doc))
	return nil
}

func configList(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "config list", "")
	var cf configFlags
	cf.register(fs)
	if err := parseConfigFlags(fs, args, 0); err != nil {
		return err
	}
	ctx, kv, done, err := cf.connect(ctx, false)
	if err != nil {
		return err
	}
	defer done()
	entries, err := config.LoadAll(ctx, kv)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		fmt.Fprintf(env.stdout, "no templates in bucket %s\n", kv.Bucket())
		return nil
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tREVISION\tGLOB\tALGORITHM\tCAPACITY\tLEASE\tREFRESH\tSTATE")
	for _, e := range entries {
		if e.Err != nil {
			fmt.Fprintf(tw, "%s\t%d\t\t\t\t\t\tINVALID: %v\n", e.Name, e.Revision, e.Err)
			continue
		}
		t := e.Template
		state := "ok"
		if len(e.Notes) > 0 {
			state = fmt.Sprintf("ok (%d normalization notes)", len(e.Notes))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%g\t%s\t%s\t%s\n", e.Name, e.Revision, t.Glob, t.Algorithm, t.Capacity, t.LeaseLength, t.RefreshInterval, state)
	}
	return tw.Flush()
}

func configDelete(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "config delete", "NAME")
	var cf configFlags
	cf.register(fs)
	purge := fs.Bool("purge", false, "also remove the key's history")
	if err := parseConfigFlags(fs, args, 1); err != nil {
		return err
	}
	ctx, kv, done, err := cf.connect(ctx, false)
	if err != nil {
		return err
	}
	defer done()
	key := config.Key(fs.Arg(0))
	if _, err := kv.Get(ctx, key); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if *purge {
		err = kv.Purge(ctx, key)
	} else {
		err = kv.Delete(ctx, key)
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	fmt.Fprintf(env.stdout, "deleted %s\n", key)
	return nil
}

func configHistory(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "config history", "NAME")
	var cf configFlags
	cf.register(fs)
	if err := parseConfigFlags(fs, args, 1); err != nil {
		return err
	}
	ctx, kv, done, err := cf.connect(ctx, false)
	if err != nil {
		return err
	}
	defer done()
	name := fs.Arg(0)
	key := config.Key(name)
	entries, err := kv.History(ctx, key)
	if err != nil {
		return fmt.Errorf("history of %s: %w", key, err)
	}
	for _, e := range entries {
		fmt.Fprintf(env.stdout, "revision %d  %s  ", e.Revision(), e.Created().UTC().Format(time.RFC3339))
		if e.Operation() != jetstream.KeyValuePut {
			fmt.Fprintln(env.stdout, strings.ToLower(strings.TrimPrefix(e.Operation().String(), "KeyValue")))
			continue
		}
		if _, _, err := config.ParseAndCompile(name, e.Revision(), e.Value()); err != nil {
			fmt.Fprintf(env.stdout, "put (INVALID: %v)\n", err)
		} else {
			fmt.Fprintln(env.stdout, "put")
		}
		for _, line := range strings.Split(strings.TrimRight(string(e.Value()), "\n"), "\n") {
			fmt.Fprintf(env.stdout, "    %s\n", line)
		}
	}
	return nil
}

func configValidate(_ context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "config validate", "FILE|-")
	name := fs.String("name", "", "template name to check (default: the file name without extension)")
	if err := parseConfigFlags(fs, args, 1); err != nil {
		return err
	}
	file := fs.Arg(0)
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
		if file == "-" || config.ValidateName(*name) != nil {
			*name = "validate"
		}
	}
	data, err := readInput(env, file)
	if err != nil {
		return err
	}
	t, notes, err := config.ParseAndCompile(*name, 0, data)
	if err != nil {
		return fmt.Errorf("%s is invalid: %w", file, err)
	}
	printNotes(env.stderr, notes)
	doc, err := config.MarshalTemplateJSON(t)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stderr, "%s is valid; as template %q it is, with defaults applied:\n", file, *name)
	fmt.Fprintln(env.stdout, string(doc))
	return nil
}

func configExplain(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "config explain", "RESOURCE_ID")
	var cf configFlags
	cf.register(fs)
	unmatched := config.UnmatchedDefault
	fs.Var(&unmatched, "unmatched", "the coordinators' policy for unmatched resources: default or reject")
	if err := parseConfigFlags(fs, args, 1); err != nil {
		return err
	}
	ctx, kv, done, err := cf.connect(ctx, false)
	if err != nil {
		return err
	}
	defer done()
	entries, err := config.LoadAll(ctx, kv)
	if err != nil {
		return err
	}
	return explain(env.stdout, fs.Arg(0), entries, unmatched.Fallback())
}

// explain reports which template id gets, given the bucket's entries.
func explain(w io.Writer, id string, entries []config.Entry, fallback *config.Template) error {
	set := config.SetFromEntries(entries, fallback)
	cands := set.Explain(id)
	if len(cands) == 0 {
		fmt.Fprintf(w, "resource %q matches no template and unmatched resources are rejected\n", id)
	} else {
		t := cands[0].Template
		fmt.Fprintf(w, "resource %q gets template %s", id, t.Name)
		if t.Revision > 0 {
			fmt.Fprintf(w, " (revision %d)", t.Revision)
		}
		fmt.Fprintf(w, ": %s, capacity %g, lease %s, refresh %s, learning mode %s\n",
			t.Algorithm, t.Capacity, t.LeaseLength, t.RefreshInterval, t.LearningModeDuration)
		fmt.Fprintln(w, "\nCandidates in precedence order:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for i, c := range cands {
			mark := " "
			if c.Chosen {
				mark = "*"
			}
			fmt.Fprintf(tw, "%s %d.\t%s\t%q\t%s\n", mark, i+1, c.Template.Name, c.Template.Glob, c.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	var bad []config.Entry
	for _, e := range entries {
		if e.Err != nil {
			bad = append(bad, e)
		}
	}
	if len(bad) > 0 {
		fmt.Fprintln(w, "\nInvalid keys (not considered here; coordinators serve their last valid revision, if they saw one):")
		for _, e := range bad {
			fmt.Fprintf(w, "  %s revision %d: %v\n", e.Key, e.Revision, e.Err)
		}
	}
	return nil
}

func configStatus(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "config status", "")
	var cf configFlags
	cf.register(fs)
	wait := fs.Duration("wait", time.Second, "how long to collect replies from coordinators")
	asJSON := fs.Bool("json", false, "print the replies as JSON")
	if err := parseConfigFlags(fs, args, 0); err != nil {
		return err
	}
	nc, err := cf.conn.dial("allot config", nats.Timeout(cf.timeout))
	if err != nil {
		return err
	}
	defer nc.Close()
	sts, err := config.GatherStatus(ctx, nc, config.ServiceName, *wait)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		if sts == nil {
			sts = []config.CoordinatorStatus{}
		}
		return enc.Encode(sts)
	}
	return config.FormatStatus(env.stdout, sts)
}
