package secure_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// clusterOnly are the variables of root-cluster.conf that `allot secure
// init` leaves to the operator: they name the cluster's servers.
var clusterOnly = map[string]bool{"CLUSTER_PORT": true, "ROUTES": true, "ROUTE_USER": true, "ROUTE_PASSWORD": true}

// subjectPrefix are the NATS subject prefixes written in quoted
// subjects, which the server does not expand.
var subjectPrefix = map[string]bool{"JS": true, "JSC": true, "KV": true, "OBJ": true, "SRV": true, "SYS": true}

// TestSetupCoversConfigVariables: every variable a shipped file
// references is in the environment file `allot secure init` writes
// (except the cluster's own), so the files start as written.
func TestSetupCoversConfigVariables(t *testing.T) {
	set := newSetup(t)
	files, err := filepath.Glob("*.conf")
	if err != nil || len(files) != 5 {
		t.Fatalf("configs: %v %v", files, err)
	}
	ref := regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ref.FindAllStringSubmatch(string(data), -1) {
			if _, ok := set.Env[m[1]]; !ok && !clusterOnly[m[1]] && !subjectPrefix[m[1]] {
				t.Errorf("%s references $%s, which secure init does not set", f, m[1])
			}
		}
	}
}

// TestClusterConfigLoads: root-cluster.conf loads, with mutual TLS and a
// user on its routes and the accounts of root.conf.
func TestClusterConfigLoads(t *testing.T) {
	set := newSetup(t)
	env := rootEnv(t, set, true)
	env["CLUSTER_PORT"], env["ROUTE_USER"], env["ROUTE_PASSWORD"] = "6222", "route", "s3cret"
	env["ROUTES"] = "[nats-route://route:s3cret@root-b:6222, nats-route://route:s3cret@root-c:6222]"
	for k, v := range env {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile("root-cluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Cluster.TLSConfig == nil || opts.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert || opts.Cluster.Username != "route" || len(opts.Routes) != 2 {
		t.Fatalf("cluster: tls %v user %q routes %v", opts.Cluster.TLSConfig != nil, opts.Cluster.Username, opts.Routes)
	}
	if opts.TLSConfig == nil || opts.LeafNode.TLSConfig == nil || opts.SystemAccount != "SYS" || len(opts.Nkeys) != 8 {
		t.Fatalf("client tls %v, leaf tls %v, system account %q, %d nkey users", opts.TLSConfig != nil, opts.LeafNode.TLSConfig != nil, opts.SystemAccount, len(opts.Nkeys))
	}
}
