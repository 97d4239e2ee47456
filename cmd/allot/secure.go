package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/allot/allot/internal/secureinit"
)

func defineSecureInit(fs *pflag.FlagSet) runFunc {
	dir := fs.String("dir", "", "directory to write the credentials to (created; refused if it already holds an env file)")
	hosts := fs.String("host", "", "extra comma-separated host names or IP addresses for the server certificate (127.0.0.1, ::1 and localhost are always in it)")
	valid := fs.Duration("valid", 365*24*time.Hour, "how long the certificates are valid")
	ports := secureinit.DefaultPorts()
	fs.IntVar(&ports.Client, "client-port", ports.Client, "the root server's client port (CLIENT_PORT of the env file)")
	fs.IntVar(&ports.Leaf, "leaf-port", ports.Leaf, "the root server's leaf-node port (LEAF_PORT; PARENT_LEAF_URLS names it for the servers below)")
	fs.StringVar(&ports.HTTP, "http-listen", ports.HTTP, "the root server's monitoring address (HTTP_LISTEN)")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		if *dir == "" {
			return errors.New("--dir is required")
		}
		if *valid <= 0 {
			return fmt.Errorf("--valid %v: want a positive duration", *valid)
		}
		var extra []string
		for h := range strings.SplitSeq(*hosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				extra = append(extra, h)
			}
		}
		set, err := secureinit.InitPorts(*dir, *valid, ports, extra...)
		if err != nil {
			return err
		}
		printSecureUsage(env.stdout, set)
		return nil
	}
}

// printSecureUsage says what was written and how to start the shipped
// configuration and allot with it: every command as it runs from a
// checkout of the repository, where deploy/nats/secure is.
func printSecureUsage(w io.Writer, set *secureinit.Setup) {
	d := set.Dir
	rel := func(p string) string {
		if r, err := filepath.Rel(d, p); err == nil {
			return r
		}
		return p
	}
	fmt.Fprintf(w, "wrote development credentials to %s:\n", d)
	fmt.Fprintf(w, "  %s, %s, %s, %s, %s (the CA's key is not kept)\n", rel(set.Certs.CA), rel(set.Certs.ServerCert), rel(set.Certs.ServerKey), rel(set.Certs.ClientCert), rel(set.Certs.ClientKey))
	fmt.Fprintf(w, "  nkeys/USER.nk for users %s (seeds: keep them secret)\n", strings.Join(secureinit.Users(), ", "))
	fmt.Fprintf(w, "  %s: the variables of deploy/nats/secure/*.conf (secret: it holds the leaf links' seeds)\n", secureinit.EnvFile)
	conn := fmt.Sprintf("--nats tls://127.0.0.1:%s --tls-ca %s", set.Env["CLIENT_PORT"], set.Certs.CA)
	fmt.Fprintf(w, "\nthe root server is a separate nats-server >= %s; this one is the version allot is built and tested with:\n", secureinit.MinServerVersion)
	fmt.Fprintf(w, "  go install github.com/nats-io/nats-server/v2@%s\n", natsServerVersion())
	fmt.Fprintf(w, "\nstart it, from the repository root (ports %s, %s and %s: --client-port, --leaf-port, --http-listen):\n", set.Env["CLIENT_PORT"], set.Env["LEAF_PORT"], set.Env["HTTP_LISTEN"])
	fmt.Fprintf(w, "  set -a; . %s; set +a\n", filepath.Join(d, secureinit.EnvFile))
	fmt.Fprintf(w, "  \"$(go env GOPATH)/bin/nats-server\" -c deploy/nats/secure/root.conf\n")
	fmt.Fprintf(w, "\nthen, from the repository root too (with an installed allot binary, write allot for go run ./cmd/allot),\n")
	fmt.Fprintf(w, "as the operator, store a template for each resource tenants may use (the only user that can):\n")
	fmt.Fprintf(w, "  go run ./cmd/allot config put --create-bucket %s --nkey %s mysql-main deploy/templates/mysql-main.json\n", conn, set.Seed("admin"))
	fmt.Fprintf(w, "run a coordinator (it refuses resources no template matches):\n")
	fmt.Fprintf(w, "  go run ./cmd/allot coordinator %s --nkey %s --inbox-prefix %s --unmatched reject\n", conn, set.Seed("coordinator"), secureinit.InboxPrefix("coordinator"))
	fmt.Fprintf(w, "and ask for capacity as tenant TENANT_A (a tenant receives replies only under its --inbox-prefix):\n")
	fmt.Fprintf(w, "  go run ./cmd/allot get %s --nkey %s --inbox-prefix %s mysql/main --wants 10\n", conn, set.Seed("tenant_a"), secureinit.InboxPrefix("tenant_a"))
	fmt.Fprintf(w, "\na child level with its own coordinators (node region1) starts from deploy/nats/secure/level.conf\n")
	fmt.Fprintf(w, "(its coordinator: --node region1 --parent-node root --nkey %s --inbox-prefix %s --unmatched reject); docs/security.md says how.\n", set.Seed("region1_coordinator"), secureinit.InboxPrefix("region1_coordinator"))
	fmt.Fprintf(w, "\nthese are development credentials; docs/security.md says how to make and rotate real ones.\n")
}

// natsServerVersion is the nats-server module version this binary was
// built with (go.mod's), or "latest" if the build did not record it.
func natsServerVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/nats-io/nats-server/v2" {
				if d.Replace != nil {
					d = d.Replace
				}
				if d.Version != "" && d.Version != "(devel)" {
					return d.Version
				}
			}
		}
	}
	return "latest"
}
