package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

func defaultClientID() string {
	host, _ := os.Hostname()
	return "allot-cli@" + host + ":" + strconv.Itoa(os.Getpid())
}

func runGet(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "get", "RESOURCE [RESOURCE...] --wants N [flags]")
	var conn connFlags
	conn.register(fs)
	node := fs.String("node", coordinator.DefaultNode, "tree node to ask")
	client := fs.String("client", defaultClientID(), "client id to ask as (printed to stderr, for allot release)")
	fs.StringVar(client, "client-id", *client, "same as --client")
	wants := fs.Float64("wants", 1, "capacity wanted, per resource")
	priority := fs.Int("priority", 0, "priority band")
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("name at least one resource")
	}
	if *priority < wire.MinPriority || *priority > wire.MaxPriority {
		return fmt.Errorf("--priority %d is outside [%d, %d]", *priority, wire.MinPriority, wire.MaxPriority)
	}
	req := &allotpb.GetCapacityRequest{ClientId: *client}
	for _, id := range fs.Args() {
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

func runRelease(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "release", "RESOURCE [RESOURCE...] --client ID [flags]")
	var conn connFlags
	conn.register(fs)
	node := fs.String("node", coordinator.DefaultNode, "tree node to ask")
	client := fs.String("client", "", "client id whose leases to release (required)")
	fs.StringVar(client, "client-id", "", "same as --client")
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	req := &allotpb.ReleaseCapacityRequest{ClientId: *client, ResourceId: fs.Args()}
	if err := wire.ValidateRelease(req); err != nil {
		return err
	}
	return request(ctx, env, &conn, coordinator.Subject(*node, "capacity.release"), req, *timeout)
}

// request sends req as JSON, exactly as `nats req` would, and prints the
// indented reply.
func request(ctx context.Context, env *cliEnv, conn *connFlags, subject string, req proto.Message, timeout time.Duration) error {
	data, err := wire.Marshal(wire.JSON, req)
	if err != nil {
		return err
	}
	nc, err := conn.dial("allot cli", nats.Timeout(timeout))
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
	fmt.Fprintln(env.stdout, out.String())
	return nil
}

// parseInterspersed parses flags that may follow positional arguments
// ("allot get db --wants 10").
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}
