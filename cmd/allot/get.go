package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

func defaultClientID() string {
	host, _ := os.Hostname()
	return "allot-cli@" + host + ":" + strconv.Itoa(os.Getpid())
}

func defineGet(fs *pflag.FlagSet) runFunc {
	var conn connFlags
	conn.register(fs)
	node := fs.String("node", coordinator.DefaultNode, "tree node to ask")
	client := fs.String("client", defaultClientID(), "client id to ask as (printed to stderr, for allot release)")
	fs.StringVar(client, "client-id", *client, "same as --client")
	wants := fs.Float64("wants", 1, "capacity wanted, per resource")
	priority := fs.Int("priority", 0, "priority band")
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if len(args) == 0 {
			return usageError{errors.New("name at least one resource")}
		}
		if err := errors.Join(nodeFlag(*node), positiveFlag("timeout", *timeout)); err != nil {
			return err
		}
		if *priority < wire.MinPriority || *priority > wire.MaxPriority {
			return fmt.Errorf("--priority %d is outside [%d, %d]", *priority, wire.MinPriority, wire.MaxPriority)
		}
		req := &allotpb.GetCapacityRequest{ClientId: *client}
		for _, id := range args {
			req.Resource = append(req.Resource, &allotpb.ResourceRequest{ResourceId: id, Wants: *wants, Priority: int32(*priority)})
		}
		// Validate locally for a clearer message; the coordinator checks too.
		if err := wire.ValidateGetCapacity(req); err != nil {
			return err
		}
		// On stderr, so that stdout stays the reply alone; the default id is
		// per process and otherwise lost.
		fmt.Fprintf(env.stderr, "client id: %s\n", *client)
		return request(ctx, env, &conn, coordinator.Subject(*node, "capacity.get"), req, *timeout)
	}
}

func defineRelease(fs *pflag.FlagSet) runFunc {
	var conn connFlags
	conn.register(fs)
	node := fs.String("node", coordinator.DefaultNode, "tree node to ask")
	client := fs.String("client", "", "client id whose leases to release (required; allot get prints its own)")
	fs.StringVar(client, "client-id", "", "same as --client")
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	return func(ctx context.Context, env *cliEnv, args []string) error {
		if *client == "" {
			return usageError{errors.New("--client is required: the client id whose leases to release (allot get prints its own on stderr)")}
		}
		if len(args) == 0 {
			return usageError{errors.New("name at least one resource")}
		}
		if err := errors.Join(nodeFlag(*node), positiveFlag("timeout", *timeout)); err != nil {
			return err
		}
		req := &allotpb.ReleaseCapacityRequest{ClientId: *client, ResourceId: args}
		if err := wire.ValidateRelease(req); err != nil {
			return err
		}
		return request(ctx, env, &conn, coordinator.Subject(*node, "capacity.release"), req, *timeout)
	}
}

// request sends req as JSON, exactly as `nats req` would, and prints the
// indented reply.
func request(ctx context.Context, env *cliEnv, conn *connFlags, subject string, req proto.Message, timeout time.Duration) error {
	data, err := wire.Marshal(wire.JSON, req)
	if err != nil {
		return err
	}
	ctx, refuse := context.WithCancelCause(ctx)
	defer refuse(nil)
	nc, err := conn.dial("allot cli", nats.Timeout(timeout), inboxRefused(conn.inboxPrefix, refuse, nil))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, subject, data)
	if isNoResponders(err) {
		return fmt.Errorf("no coordinator answers on %s: is one running for this node?", subject)
	}
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, errInboxRefused) {
		return cause
	}
	if err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	if err := errorFromReply(m); err != nil {
		return err
	}
	var out bytes.Buffer
	if json.Indent(&out, m.Data, "", "  ") != nil {
		out.Reset()
		out.Write(m.Data)
	}
	// Capacities decay continuously: print them to six digits.
	fmt.Fprintln(env.stdout, string(roundJSON(out.Bytes())))
	return nil
}

// errInboxRefused is wrapped by the error a request ends with when the
// server refuses the connection's subscription to its replies.
var errInboxRefused = errors.New("the NATS server refused this user's subscription to its replies")

// permissionsSubject finds the subject a refused subscription names.
var permissionsSubject = regexp.MustCompile(`Subscription to "(\S+)"`)

// inboxRefused logs asynchronous errors as agent.ErrorHandler does, but
// when the server refuses the subscription to the connection's replies
// (under prefix, default _INBOX), ends the request at once with what to
// do: a user of an account that allows replies only under a prefix of its
// own (a tenant of the shipped secure configuration) otherwise waits for
// the time-out of a request whose answer cannot reach it.
// The others go to log (nil: slog's default).
func inboxRefused(prefix string, end context.CancelCauseFunc, log *slog.Logger) nats.Option {
	logged := agent.ErrorHandler(log)
	if prefix == "" {
		prefix = strings.TrimSuffix(nats.InboxPrefix, ".")
	}
	return nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		m := permissionsSubject.FindStringSubmatch(err.Error())
		if !errors.Is(err, nats.ErrPermissionViolation) || m == nil || !strings.HasPrefix(m[1], prefix+".") {
			logged(nc, sub, err)
			return
		}
		// The request ends with what to do on the command line; the
		// agent's log line would add advice for Go programs.
		if prefix == strings.TrimSuffix(nats.InboxPrefix, ".") {
			end(fmt.Errorf("%w (%s): this user may receive replies only under a prefix of its own; run again with --inbox-prefix PREFIX (the users of allot secure init: --inbox-prefix _INBOX_<user>, such as _INBOX_tenant_a)", errInboxRefused, m[1]))
			return
		}
		end(fmt.Errorf("%w (%s): --inbox-prefix %s is not a prefix this user may receive replies under", errInboxRefused, m[1], prefix))
	})
}
