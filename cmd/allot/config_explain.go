package main

// allot config explain: which template or bucket answers an id, and what
// the serving replicas say.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spf13/pflag"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/opstatus"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/wire"
)

func defineConfigExplain(fs *pflag.FlagSet) runFunc {
	var cf configFlags
	cf.register(fs)
	unmatched := config.UnmatchedDefault
	fs.Var(goFlag(&unmatched, "POLICY"), "unmatched", "the coordinators' policy for unmatched resources: default or reject (default: what the running replicas report, else default)")
	// Its default is what the replicas report, which the usage says: a
	// printed "(default default)" would say otherwise.
	fs.Lookup("unmatched").DefValue = ""
	wait := fs.Duration("wait", 500*time.Millisecond, "how long to collect what the running replicas serve (0: do not ask)")
	asResource := fs.Bool("resource", false, "explain the argument as a resource id even if it looks like a quota bucket (it has a \":\" and no \"/\")")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if *wait < 0 {
			return usageError{fmt.Errorf("--wait %v: want 0 (do not ask) or a positive duration", *wait)}
		}
		if len(args) > 0 && strings.HasPrefix(args[0], config.EnvoyPrefix) {
			return explainEnvoy(ctx, env, &cf, args)
		}
		if err := exactArgs(args, 1, "a resource id or a quota bucket NAMESPACE:NAME"); err != nil {
			return err
		}
		id := args[0]
		// "namespace:name" is a quota bucket; resource ids are usually paths
		// ("mysql/main"), and --resource forces one that looks like a bucket.
		isBucket := strings.Contains(id, ":") && !strings.Contains(id, "/") && !*asResource
		if !isBucket {
			// An id every coordinator refuses (400) gets no template.
			if err := wire.ValidateID("resource_id", id); err != nil {
				return usageError{err}
			}
		}
		policySet := fs.Changed("unmatched")
		ctx, cancel := context.WithTimeout(ctx, cf.timeout+max(*wait, 0))
		defer cancel()
		kv, nc, err := cf.open(ctx, false)
		if err != nil {
			return err
		}
		defer nc.Close()
		var replicas []opstatus.Replica
		if *wait > 0 {
			if replicas, err = opstatus.GatherAll(ctx, nc, *wait); err != nil {
				return err
			}
		}
		entries, err := configkv.LoadAll(ctx, kv)
		if err != nil {
			return err
		}
		if isBucket {
			if _, _, err := wire.SplitBucket(id); err != nil {
				return fmt.Errorf("%w (to explain %q as a resource id, add --resource)", err, id)
			}
			return explainBucket(env.stdout, id, entries, replicas, *wait > 0)
		}
		policyFrom := "--unmatched"
		if !policySet {
			policyFrom = "the default policy"
			if p, ok := reportedPolicy(replicas); ok {
				unmatched, policyFrom = p, "the policy the running replicas report"
			}
		}
		fmt.Fprintf(env.stdout, "Unmatched resources: %s (%s).\n\n", unmatched, policyFrom)
		set := configkv.SetFromEntries(entries, unmatched.Fallback())
		if err := explain(env.stdout, id, set, entries); err != nil {
			return err
		}
		if *wait > 0 {
			return explainReplicas(ctx, env.stdout, kv, id, replicas)
		}
		return nil
	}
}

// explainBucket reports which bucket answers quota bucket
// ("namespace:name"), its effective configuration and the revisions it
// comes from, as the bucket's entries hold them and as each running
// replica reports serving them.
func explainBucket(w io.Writer, bucket string, entries []configkv.Entry, replicas []opstatus.Replica, asked bool) error {
	set := configkv.SetFromEntries(entries, nil)
	m, err := config.ExplainBucket(set.Quota(), bucket)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Quota bucket %s (lookup order: named, dynamic, namespace default, global default)\n", bucket)
	fmt.Fprintf(w, "answered by: %s\n", m.Source)
	fmt.Fprintln(w, m.String())
	if m.Spec != nil {
		doc, err := json.MarshalIndent(config.BucketDocument(m.Spec), "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\nEffective bucket (every default explicit):\n%s\n", doc)
	}
	fmt.Fprintln(w, "\nConfiguration revisions:")
	for _, ns := range []string{m.Namespace, quota.GlobalDefault} {
		key := config.NamespaceKey(ns)
		state := "not stored"
		for _, e := range entries {
			if e.Key != key {
				continue
			}
			switch {
			case e.Err == nil:
				state = fmt.Sprintf("revision %d", e.Revision)
			case e.ServingNamespace != nil:
				state = fmt.Sprintf("revision %d is INVALID (%v); replicas serve revision %d", e.Revision, e.Err, e.ServingNamespace.Revision)
			default:
				state = fmt.Sprintf("revision %d is INVALID (%v) and no valid revision is in its history: not served", e.Revision, e.Err)
			}
		}
		fmt.Fprintf(w, "  %s: %s\n", key, state)
		if ns == quota.GlobalDefault {
			break
		}
	}
	if !asked {
		return nil
	}
	fmt.Fprintln(w, "\nRunning replicas (revisions of these keys each reports serving):")
	if len(replicas) == 0 {
		fmt.Fprintln(w, "  none answered; the above is what the bucket holds")
	}
	for _, r := range replicas {
		if r.Config == nil {
			fmt.Fprintf(w, "  %s: reports no configuration\n", r.ServerID)
			continue
		}
		var revs []string
		for _, k := range r.Config.Keys {
			if k.Key == config.NamespaceKey(m.Namespace) || k.Key == config.NamespaceKey(quota.GlobalDefault) {
				revs = append(revs, fmt.Sprintf("%s@%d", k.Key, k.Revision))
			}
		}
		if len(revs) == 0 {
			revs = append(revs, "neither key")
		}
		fmt.Fprintf(w, "  %s (generation %d): %s\n", r.ServerID, r.Config.Generation, strings.Join(revs, ", "))
	}
	return nil
}

// reportedPolicy is the unmatched policy every replica that reports its
// configuration agrees on.
func reportedPolicy(rs []opstatus.Replica) (config.UnmatchedPolicy, bool) {
	var p config.UnmatchedPolicy
	for _, r := range rs {
		if r.Config == nil {
			continue
		}
		if p != "" && r.Config.Unmatched != p {
			return "", false
		}
		p = r.Config.Unmatched
	}
	return p, p != ""
}

// explain reports which template id gets from set, built from the
// bucket's entries.
func explain(w io.Writer, id string, set *config.Set, entries []configkv.Entry) error {
	cands := set.Explain(id)
	switch {
	case len(cands) == 0:
		fmt.Fprintf(w, "resource %q matches no template and unmatched resources are rejected\n", id)
	case cands[0].Refused != "":
		fmt.Fprintf(w, "resource %q is refused: %s\n", id, cands[0].Refused)
	default:
		fmt.Fprintf(w, "resource %q gets %s\n", id, describeTemplate(cands[0].Template))
		if t := cands[0].Template; set.Fallback() == nil && t.Glob == "*" {
			fmt.Fprintf(w, "(unmatched resources are rejected, but stored template %s matches every resource, so that policy never applies)\n", t.Name)
		}
	}
	if len(cands) > 0 {
		fmt.Fprintln(w, "\nCandidates in precedence order:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for i, c := range cands {
			mark := " "
			if c.Chosen {
				mark = "*"
			}
			reason := c.Reason
			if c.Refused != "" {
				reason += "; refused: no valid revision"
			}
			fmt.Fprintf(tw, "%s %d.\t%s\t%q\t%s\n", mark, i+1, c.Template.Name, c.Template.Glob, reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	var bad []configkv.Entry
	for _, e := range entries {
		if e.Err != nil {
			bad = append(bad, e)
		}
	}
	if len(bad) > 0 {
		fmt.Fprintln(w, "\nInvalid latest revisions:")
		for _, e := range bad {
			fmt.Fprintf(w, "  %s revision %d: %v\n", e.Key, e.Revision, e.Err)
			switch {
			case e.Serving != nil:
				fmt.Fprintf(w, "    replicas serve revision %d, the last valid one, instead\n", e.Serving.Revision)
			case e.Refusal != nil:
				fmt.Fprintf(w, "    no valid revision in its history: the resources its glob %q would serve are refused\n", e.Refusal.Glob)
			default:
				fmt.Fprintln(w, "    no valid revision in its history and no readable identifier_glob: nothing serves or refuses in its name")
			}
		}
	}
	return nil
}

func describeTemplate(t *config.Template) string {
	s := "template " + t.Name
	if t.Revision > 0 {
		s += fmt.Sprintf(" (revision %d)", t.Revision)
	}
	return s + fmt.Sprintf(": %s, capacity %s, lease %s, refresh %s, learning mode %s",
		t.Algorithm, number(t.Capacity), t.LeaseLength, t.RefreshInterval, t.LearningModeDuration)
}

// explainReplicas reports what the running replicas would give id,
// rebuilding each reported configuration (key revisions, refusals,
// unmatched policy) from the bucket's history. Replicas with the same
// answer share a line.
func explainReplicas(ctx context.Context, w io.Writer, kv jetstream.KeyValue, id string, rs []opstatus.Replica) error {
	fmt.Fprintln(w, "\nRunning replicas (from the configuration each reports):")
	if len(rs) == 0 {
		fmt.Fprintln(w, "  none answered; the above is what the bucket holds")
		return nil
	}
	cache := map[string]*config.Template{} // "key@revision" → template
	var order []string
	byAnswer := map[string][]string{}
	for _, r := range rs {
		answer := "reports no configuration"
		if r.Config != nil {
			set, err := reportedSet(ctx, kv, r.Config, cache)
			if err != nil {
				answer = "cannot be rebuilt: " + err.Error()
			} else {
				answer = replicaAnswer(set, id)
			}
		}
		if byAnswer[answer] == nil {
			order = append(order, answer)
		}
		who := r.ServerID
		if r.Config != nil {
			who += fmt.Sprintf(" (generation %d)", r.Config.Generation)
		}
		byAnswer[answer] = append(byAnswer[answer], who)
	}
	for _, a := range order {
		fmt.Fprintf(w, "  %s: %s\n", strings.Join(byAnswer[a], ", "), a)
	}
	if len(order) > 1 {
		fmt.Fprintln(w, "  replicas disagree (a change may still be propagating; see 'allot config status')")
	}
	return nil
}

func replicaAnswer(set *config.Set, id string) string {
	if t := set.Match(id); t != nil {
		return "would use " + describeTemplate(t)
	}
	if why := set.Refused(id); why != "" {
		return "would refuse it: " + why
	}
	return "would reject it: it matches no template and unmatched resources are rejected"
}

// reportedSet rebuilds the Set a replica reports serving.
func reportedSet(ctx context.Context, kv jetstream.KeyValue, st *configkv.Status, cache map[string]*config.Template) (*config.Set, error) {
	var ts []*config.Template
	var refusals []config.Refusal
	for _, k := range st.Keys {
		switch {
		case k.Namespace, k.Domains, k.Envoy: // namespaces and Envoy domains take no part in template matching
		case k.Revision > 0:
			ck := fmt.Sprintf("%s@%d", k.Key, k.Revision)
			t, ok := cache[ck]
			if !ok {
				e, err := kv.GetRevision(ctx, k.Key, k.Revision)
				if err != nil {
					return nil, fmt.Errorf("%s revision %d: %w", k.Key, k.Revision, err)
				}
				if t, _, err = config.ParseAndCompile(k.Name, k.Revision, e.Value()); err != nil {
					return nil, fmt.Errorf("%s revision %d: %w", k.Key, k.Revision, err)
				}
				cache[ck] = t
			}
			ts = append(ts, t)
		case k.Refused != "":
			refusals = append(refusals, config.Refusal{Name: k.Name, Glob: k.Glob, Reason: k.Refused})
		}
	}
	var fallback *config.Template
	if st.Fallback != "" {
		fallback = config.DefaultTemplate()
	}
	return config.NewSet(st.Generation, ts, fallback, refusals...), nil
}
