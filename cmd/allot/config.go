package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/envoyrl"
	"github.com/allot/allot/internal/opstatus"
	"github.com/allot/allot/internal/quota"
)

// configCommand is `allot config` and its subcommands.
func configCommand(env *cliEnv) *cobra.Command {
	c := group(env, "config", "manage templates, quota and domains namespaces and Envoy domains in the configuration bucket",
		leaf(env, "put KEY FILE|-", "validate a template, quota namespace, domains namespace (JSON or YAML) or Envoy domain (envoyproxy/ratelimit's YAML) and store it under KEY", defineConfigPut),
		leaf(env, "get KEY", "print the stored document", defineConfigGet),
		leaf(env, "list", "list templates, quota and domains namespaces and Envoy domains with their revision and validity", defineConfigList),
		leaf(env, "delete KEY", "delete KEY (a template's resources fall back to the next match)", defineConfigDelete),
		leaf(env, "history KEY", "print the stored revisions of KEY", defineConfigHistory),
		leaf(env, "validate FILE|-", "check a template or namespace file offline and print its normalized form", defineConfigValidate),
		leaf(env, "explain ID|NS:NAME|envoy.DOMAIN [KEY=VALUE...]", "show which template a resource gets, which bucket answers a quota bucket, or an Envoy domain's limits", defineConfigExplain),
		leaf(env, "status", "show which revision of each template every replica (leader and followers) serves", defineConfigStatus),
	)
	c.Long = "Templates, namespaces and Envoy domains live in the JetStream KV bucket " + configkv.DefaultBucket + ", one per key.\n" +
		"KEY is a template name (stored as " + config.KeyPrefix + "<name>), " + config.NamespacePrefix + "<namespace> (a quota namespace, docs/quota.md),\n" +
		config.DomainsPrefix + "<namespace> (domain limits, docs/domains.md) or " + config.EnvoyPrefix + "<domain> (an Envoy rate limit domain\n" +
		"in envoyproxy/ratelimit's YAML, docs/envoy.md). See docs/configuration.md."
	return c
}

// configFlags are the flags every online subcommand takes.
type configFlags struct {
	conn    connFlags
	bucket  string
	timeout time.Duration
}

func (c *configFlags) register(fs *pflag.FlagSet) {
	c.conn.register(fs)
	fs.StringVar(&c.bucket, "bucket", configkv.DefaultBucket, "KV bucket holding templates, namespaces, domains and Envoy domains")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "timeout for NATS operations")
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

// loadAll connects and reads every key of the configuration bucket.
func (c *configFlags) loadAll(ctx context.Context) ([]configkv.Entry, error) {
	ctx, kv, done, err := c.connect(ctx, false)
	if err != nil {
		return nil, err
	}
	defer done()
	return configkv.LoadAll(ctx, kv)
}

// connectOrigin is connect for writes: at a child level of the tree, whose
// bucket is a mirror, it opens the root's bucket (following mirrors), where
// templates are written; domain names the root's JetStream domain then.
// opts say how a bucket created (create) is made.
func (c *configFlags) connectOrigin(ctx context.Context, create bool, opts ...configkv.BucketOption) (_ context.Context, kv jetstream.KeyValue, domain string, done func(), err error) {
	if err := positiveFlag("timeout", c.timeout); err != nil {
		return nil, nil, "", nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	nc, err := c.conn.dial("allot config", nats.Timeout(c.timeout))
	if err != nil {
		cancel()
		return nil, nil, "", nil, err
	}
	kv, domain, err = configkv.OpenOrigin(ctx, nc, c.bucket, create, opts...)
	if err != nil {
		nc.Close()
		cancel()
		return nil, nil, "", nil, bucketError(err)
	}
	return ctx, kv, domain, func() { nc.Close(); cancel() }, nil
}

// bucketError adds a hint to a missing-bucket error.
func bucketError(err error) error {
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("%w: check --bucket for a typo; `allot up` and `allot config put --create-bucket` create it", err)
	}
	return err
}

// open connects and opens the configuration bucket; close nc to release it.
func (c *configFlags) open(ctx context.Context, create bool) (kv jetstream.KeyValue, nc *nats.Conn, err error) {
	if err := positiveFlag("timeout", c.timeout); err != nil {
		return nil, nil, err
	}
	nc, err = c.conn.dial("allot config", nats.Timeout(c.timeout))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	kv, err = configkv.OpenBucket(ctx, js, c.bucket, create)
	if err != nil {
		nc.Close()
		return nil, nil, bucketError(err)
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
	data, err := io.ReadAll(io.LimitReader(r, max(config.MaxTemplateSize, domainlimit.MaxDocumentSize)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	return data, nil
}

// configKey is a KEY argument resolved: a template name ("mysql-main" or
// "templates.mysql-main"), a quota namespace key ("namespaces.logins") or
// a domains namespace key ("domains.shop").
type configKey struct {
	key, name string
	namespace bool
	domains   bool
	envoy     bool
}

func parseConfigKey(arg string) configKey {
	if ns, ok := strings.CutPrefix(arg, config.NamespacePrefix); ok {
		return configKey{key: arg, name: ns, namespace: true}
	}
	if ns, ok := strings.CutPrefix(arg, config.DomainsPrefix); ok {
		return configKey{key: arg, name: ns, domains: true}
	}
	if d, ok := strings.CutPrefix(arg, config.EnvoyPrefix); ok {
		return configKey{key: arg, name: d, envoy: true}
	}
	name := strings.TrimPrefix(arg, config.KeyPrefix)
	return configKey{key: config.Key(name), name: name}
}

// what names the kind of document k holds, for messages.
func (k configKey) what() string {
	if k.namespace {
		return "namespace"
	}
	if k.domains {
		return "domains namespace"
	}
	if k.envoy {
		return "Envoy domain"
	}
	return "template"
}

// otherKind names, for a document that is invalid as the template k
// names, the key it is valid under and what it is there: a quota or
// domains namespace, or an Envoy domain, given as a template name with
// its prefix forgotten. It returns "" when k has a prefix or the
// document is none of them.
func otherKind(k configKey, file string, data []byte) (key, what string) {
	if k.namespace || k.domains || k.envoy {
		return "", ""
	}
	name := k.name
	if file == "-" || config.ValidateNamespaceName(name) != nil {
		name = "<namespace>"
	}
	if _, _, err := config.ParseNamespace("validate", 0, data); err == nil {
		return config.NamespacePrefix + name, "a valid quota namespace"
	}
	if _, _, err := config.ParseDomains("validate", 0, data); err == nil {
		return config.DomainsPrefix + name, "a valid domains namespace"
	}
	if ds, err := envoyrl.Parse(file, data, envoyrl.ParseOptions{}); err == nil && len(ds) == 1 {
		return config.EnvoyKey(ds[0].Name), fmt.Sprintf("envoyproxy/ratelimit's configuration of domain %q", ds[0].Name)
	}
	return "", ""
}

func printNotes(w io.Writer, notes []string) {
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// putRefused explains a put of key that failed with err: with
// --create-only or --revision, the key's revision now, which the
// JetStream error ("wrong last sequence") does not say in those words.
func putRefused(ctx context.Context, kv jetstream.KeyValue, key string, createOnly bool, expect uint64, err error) error {
	conflict := createOnly && errors.Is(err, jetstream.ErrKeyExists) ||
		!createOnly && expect > 0 && errors.Is(err, jetstream.ErrKeyRevisionMismatch)
	if !conflict {
		return fmt.Errorf("store %s: %w", key, err)
	}
	e, gerr := kv.Get(ctx, key)
	switch {
	case gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound):
		return fmt.Errorf("store %s: %w", key, err)
	case createOnly && gerr == nil:
		return fmt.Errorf("store %s: %s exists (revision %d): --create-only stores only a key that does not (%w)", key, key, e.Revision(), err)
	case createOnly:
		return fmt.Errorf("store %s: %w", key, err)
	case gerr != nil:
		return fmt.Errorf("store %s: %s does not exist, not at --revision %d (%w)", key, key, expect, err)
	}
	return fmt.Errorf("store %s: %s is at revision %d, not --revision %d: it changed since; 'allot config history %s' shows its revisions (%w)", key, key, e.Revision(), expect, key, err)
}

func defineConfigPut(fs *pflag.FlagSet) runFunc {
	var cf configFlags
	cf.register(fs)
	expect := fs.Uint64("revision", 0, "store only if the key's current revision is this (0: any); with --create-only, ignored")
	createOnly := fs.Bool("create-only", false, "store only if the key does not exist")
	createBucket := fs.Bool("create-bucket", false, "create the bucket if it does not exist (otherwise a missing bucket, e.g. a typo in --bucket, is an error)")
	replicas := fs.Int("bucket-replicas", 1, "with --create-bucket: replicas of the bucket created (3 on a three-server cluster, as the coordinators' --bucket-replicas)")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if err := exactArgs(args, 2, "KEY and FILE (- for stdin)"); err != nil {
			return err
		}
		if *replicas < 1 {
			return fmt.Errorf("--bucket-replicas %d: want at least 1", *replicas)
		}
		k, file := parseConfigKey(args[0]), args[1]
		data, err := readInput(env, file)
		if err != nil {
			return err
		}
		notes, err := config.CheckValue(k.key, 0, data)
		if err != nil {
			err = fmt.Errorf("refusing invalid %s %s: %w", k.what(), k.name, err)
			if key, what := otherKind(k, file, data); key != "" {
				err = fmt.Errorf("%w\n(it is %s: a key without a prefix names a template; store it with 'allot config put %s %s')", err, what, key, file)
			}
			return err
		}
		printNotes(env.stderr, notes)
		ctx, kv, domain, done, err := cf.connectOrigin(ctx, *createBucket, configkv.Replicas(*replicas))
		if err != nil {
			return err
		}
		defer done()
		key := k.key
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
			return putRefused(ctx, kv, key, *createOnly, *expect, err)
		}
		fmt.Fprintf(env.stdout, "stored %s revision %d (%s)\n", key, rev, summarize(k, data))
		if domain != "" {
			fmt.Fprintf(env.stdout, "in the root's bucket (JetStream domain %s); the levels below receive it through their mirrors\n", domain)
		}
		return nil
	}
}

// summarize describes a valid document of key k in a few words.
func summarize(k configKey, data []byte) string {
	if k.envoy {
		d, err := config.ParseEnvoy(k.name, 0, data)
		if err != nil {
			return err.Error()
		}
		return "Envoy domain: " + describeEnvoy(d.Domain)
	}
	if k.domains {
		ns, _, err := config.ParseDomains(k.name, 0, data)
		if err != nil {
			return err.Error()
		}
		return "domains namespace: " + describeDomains(ns)
	}
	if k.namespace {
		ns, _, err := config.ParseNamespace(k.name, 0, data)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("quota namespace: %d named buckets, default bucket %v, dynamic buckets %v", len(ns.Buckets), ns.Default != nil, ns.Dynamic != nil)
	}
	t, _, err := config.ParseAndCompile(k.name, 0, data)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("glob %q, %s, capacity %s", t.Glob, t.Algorithm, number(t.Capacity))
}

// normalize returns a valid document of key k with every default
// explicit.
func normalize(k configKey, rev uint64, data []byte) ([]byte, []string, error) {
	if k.envoy {
		// The reference's YAML has no defaults to make explicit: show the
		// tree it makes.
		d, err := config.ParseEnvoy(k.name, rev, data)
		if err != nil {
			return nil, nil, err
		}
		var b strings.Builder
		err = envoyTree(&b, d.Domain, nil)
		return []byte(strings.TrimRight(b.String(), "\n")), nil, err
	}
	if k.domains {
		ns, notes, err := config.ParseDomains(k.name, rev, data)
		if err != nil {
			return nil, nil, err
		}
		doc, err := domainlimit.MarshalNamespace(ns)
		return doc, notes, err
	}
	if k.namespace {
		ns, notes, err := config.ParseNamespace(k.name, rev, data)
		if err != nil {
			return nil, nil, err
		}
		doc, err := config.MarshalNamespaceJSON(ns)
		return doc, notes, err
	}
	t, notes, err := config.ParseAndCompile(k.name, rev, data)
	if err != nil {
		return nil, nil, err
	}
	doc, err := config.MarshalTemplateJSON(t)
	return doc, notes, err
}

func defineConfigGet(fs *pflag.FlagSet) runFunc {
	var cf configFlags
	cf.register(fs)
	normalized := fs.Bool("normalized", false, "print the normalized template (every default explicit) instead of the stored document")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if err := exactArgs(args, 1, "KEY"); err != nil {
			return err
		}
		ctx, kv, done, err := cf.connect(ctx, false)
		if err != nil {
			return err
		}
		defer done()
		k := parseConfigKey(args[0])
		key := k.key
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
		doc, notes, err := normalize(k, e.Revision(), e.Value())
		if err != nil {
			return fmt.Errorf("%s revision %d is invalid (coordinators keep serving the previous valid revision): %w", key, e.Revision(), err)
		}
		printNotes(env.stderr, notes)
		fmt.Fprintln(env.stdout, string(doc))
		return nil
	}
}

func defineConfigList(fs *pflag.FlagSet) runFunc {
	var cf configFlags
	cf.register(fs)
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		entries, err := cf.loadAll(ctx)
		if err != nil {
			return err
		}
		if len(entries) == 0 {
			fmt.Fprintf(env.stdout, "no templates in bucket %s\n", cf.bucket)
			return nil
		}
		tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tREVISION\tGLOB\tALGORITHM\tCAPACITY\tLEASE\tREFRESH\tSTATE")
		var namespaces, domains, envoy []configkv.Entry
		for _, e := range entries {
			if e.IsEnvoy() {
				envoy = append(envoy, e)
				continue
			}
			if e.IsNamespace() {
				namespaces = append(namespaces, e)
				continue
			}
			if e.IsDomains() {
				domains = append(domains, e)
				continue
			}
			if e.Err != nil {
				serving := "nothing serves in its name"
				switch {
				case e.Serving != nil:
					serving = fmt.Sprintf("revision %d serves", e.Serving.Revision)
				case e.Refusal != nil:
					serving = fmt.Sprintf("the resources its glob %q would serve are refused", e.Refusal.Glob)
				}
				fmt.Fprintf(tw, "%s\t%d\t\t\t\t\t\tINVALID (%s): %v\n", e.Name, e.Revision, serving, e.Err)
				continue
			}
			t := e.Template
			state := "ok"
			if len(e.Notes) > 0 {
				state = fmt.Sprintf("ok (%d normalization notes)", len(e.Notes))
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.Revision, t.Glob, t.Algorithm, number(t.Capacity), t.LeaseLength, t.RefreshInterval, state)
		}
		if len(namespaces) > 0 {
			fmt.Fprintln(tw, "\nQUOTA NAMESPACE\tREVISION\tBUCKETS\tDEFAULT\tDYNAMIC\tSTATE")
		}
		for _, e := range namespaces {
			ns, state := servingOf(e.Namespace, e.ServingNamespace, e.Err, func(n *quota.Namespace) uint64 { return n.Revision }, "its keys get the global default")
			if ns == nil {
				fmt.Fprintf(tw, "%s\t%d\t\t\t\t%s\n", e.Key, e.Revision, state)
				continue
			}
			dynamic := "-"
			if ns.Dynamic != nil {
				dynamic = fmt.Sprintf("%s, at most %d", ns.Dynamic.Algorithm, ns.MaxDynamicBuckets)
			}
			def := "-"
			if ns.Default != nil {
				def = ns.Default.Algorithm.String()
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", e.Key, e.Revision, len(ns.Buckets), def, dynamic, state)
		}
		listDomains(tw, domains)
		listEnvoy(tw, envoy)
		return tw.Flush()
	}
}

// servingOf returns what a namespace entry serves and its state for
// `allot config list`: the valid namespace ("ok"), or when the entry is
// invalid (err) the revision serving in its place, or none (then what
// happens instead).
func servingOf[T any](valid, fallback *T, err error, revision func(*T) uint64, none string) (*T, string) {
	switch {
	case err == nil:
		return valid, "ok"
	case fallback == nil:
		return nil, fmt.Sprintf("INVALID: %v; nothing serves in its name (%s)", err, none)
	}
	return fallback, fmt.Sprintf("INVALID: %v; revision %d serves", err, revision(fallback))
}

func defineConfigDelete(fs *pflag.FlagSet) runFunc {
	var cf configFlags
	cf.register(fs)
	purge := fs.Bool("purge", false, "also remove the key's history")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if err := exactArgs(args, 1, "KEY"); err != nil {
			return err
		}
		ctx, kv, _, done, err := cf.connectOrigin(ctx, false)
		if err != nil {
			return err
		}
		defer done()
		key := parseConfigKey(args[0]).key
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
}

func defineConfigHistory(fs *pflag.FlagSet) runFunc {
	var cf configFlags
	cf.register(fs)
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if err := exactArgs(args, 1, "KEY"); err != nil {
			return err
		}
		ctx, kv, done, err := cf.connect(ctx, false)
		if err != nil {
			return err
		}
		defer done()
		key := parseConfigKey(args[0]).key
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
			if _, err := config.CheckValue(key, e.Revision(), e.Value()); err != nil {
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
}

func defineConfigValidate(fs *pflag.FlagSet) runFunc {
	name := fs.String("name", "", "key to check it as: a template name, namespaces.<namespace> for a quota namespace, domains.<namespace> for a domains namespace or envoy.<domain> for an Envoy domain (default: the file name without extension)")
	return func(_ context.Context, env *cliEnv, args []string) error {
		if err := exactArgs(args, 1, "FILE (- for stdin)"); err != nil {
			return err
		}
		file := args[0]
		if *name == "" {
			*name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
			k := parseConfigKey(*name)
			switch {
			case file == "-",
				k.namespace && config.ValidateNamespaceName(k.name) != nil,
				k.domains && !domainlimit.ValidName(k.name),
				k.envoy && k.name == "",
				!k.namespace && !k.domains && !k.envoy && config.ValidateName(k.name) != nil:
				*name = "validate"
			}
		}
		data, err := readInput(env, file)
		if err != nil {
			return err
		}
		k := parseConfigKey(*name)
		doc, notes, err := normalize(k, 0, data)
		if err != nil {
			err = fmt.Errorf("%s is invalid as %s %q: %w", file, k.what(), k.name, err)
			if key, what := otherKind(k, file, data); key != "" {
				err = fmt.Errorf("%w\n(it is %s: check it with --name %s, store it with 'allot config put %s %s')", err, what, key, key, file)
			}
			return err
		}
		printNotes(env.stderr, notes)
		fmt.Fprintf(env.stderr, "%s is valid; as %s %q it is, with defaults applied:\n", file, k.what(), k.name)
		fmt.Fprintln(env.stdout, string(doc))
		return nil
	}
}

func defineConfigStatus(fs *pflag.FlagSet) runFunc {
	var cf configFlags
	cf.register(fs)
	wait := fs.Duration("wait", time.Second, "how long to collect replies from coordinator replicas")
	asJSON := fs.Bool("json", false, "print the replies as JSON")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		if err := errors.Join(positiveFlag("wait", *wait), positiveFlag("timeout", cf.timeout)); err != nil {
			return err
		}
		nc, err := cf.conn.dial("allot config", nats.Timeout(cf.timeout))
		if err != nil {
			return err
		}
		defer nc.Close()
		rs, err := opstatus.GatherAll(ctx, nc, *wait)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(env.stdout)
			enc.SetIndent("", "  ")
			if rs == nil {
				rs = []opstatus.Replica{}
			}
			err = enc.Encode(rs)
		} else {
			err = opstatus.Format(env.stdout, rs)
		}
		if err == nil && len(rs) == 0 {
			err = fmt.Errorf("no coordinator replica answered on %s within %s (none running, another account, or try a longer --wait)", redactURLs(cf.conn.url), *wait)
		}
		return err
	}
}
