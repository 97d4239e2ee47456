package agent_test

import (
	"log"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
)

// A tenant's service connects to the secure deployment of
// deploy/nats/secure with the files `allot secure init --dir /etc/allot`
// writes: its user's nkey seed, the CA of the server's certificate, a
// client certificate where the server verifies clients (TLS_VERIFY=true),
// and its private reply prefix. agent.ErrorHandler logs a refused
// permission with its subject instead of leaving a bare time-out. (No
// output: it needs that deployment; deploy/nats/secure's suite runs the
// same connection against the shipped configuration.)
func Example_secureConnection() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	nkey, err := nats.NkeyOptionFromSeed("/etc/allot/nkeys/tenant_a.nk")
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect("tls://nats.example:4222", nkey,
		nats.RootCAs("/etc/allot/tls/ca.pem"),
		nats.ClientCert("/etc/allot/tls/client-cert.pem", "/etc/allot/tls/client-key.pem"),
		nats.CustomInboxPrefix("_INBOX_tenant_a"),
		nats.ErrorHandler(agent.ErrorHandler(logger)),
		nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	a, err := agent.New(nc, agent.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	lim, err := a.Rate("mysql/main")
	if err != nil {
		log.Fatal(err)
	}
	_ = lim // lim.Wait(ctx) before each query, as in the package example
}
