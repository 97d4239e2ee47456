package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/spf13/pflag"

	"github.com/allot/allot/dashboard"
)

// DashboardTokenEnv names the environment variable that gives the
// dashboard's token when --dashboard-token is not set: a token on the
// command line is visible to every user of the host (ps).
const dashboardTokenEnv = "ALLOT_DASHBOARD_TOKEN"

// dashboardFlags guard the dashboard served beside /metrics.
type dashboardFlags struct {
	token string
	hosts string
}

func (f *dashboardFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.token, "dashboard-token", "", fmt.Sprintf("token the dashboard requires (header Authorization: Bearer TOKEN, or a visit of /?token=TOKEN that sets a cookie), at least %d characters; default $%s. Required when --metrics-addr listens beyond loopback: without it the dashboard is off there", dashboard.MinTokenLength, dashboardTokenEnv))
	fs.StringVar(&f.hosts, "dashboard-hosts", "", "comma-separated host names the dashboard is reached by (its Host header), besides IP addresses, localhost and the --metrics-addr host; requests naming another host are refused")
}

// resolve fills the token from the environment and checks it.
func (f *dashboardFlags) resolve() error {
	if f.token == "" {
		f.token = os.Getenv(dashboardTokenEnv)
	}
	if f.token != "" && len(f.token) < dashboard.MinTokenLength {
		return fmt.Errorf("--dashboard-token (or $%s) has %d characters: want at least %d (for example: openssl rand -hex 16)", dashboardTokenEnv, len(f.token), dashboard.MinTokenLength)
	}
	return nil
}

// hostList returns --dashboard-hosts as a list.
func (f *dashboardFlags) hostList() []string {
	var out []string
	for h := range strings.SplitSeq(f.hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// mountDashboard serves the live dashboard of st's replicas at "/" of mux
// (beside /metrics), listening on listen (addr as given), and samples it
// until ctx ends; st.conn lists the node's other replicas and its quota
// namespaces. It answers the Host names of IP addresses, localhost,
// addr's host and --dashboard-hosts, and requires the token if one is
// set. Listening beyond loopback without a token, the dashboard is off:
// "/" says how to turn it on.
func mountDashboard(ctx context.Context, mux *http.ServeMux, st *opsState, listen net.Addr, addr string, log *slog.Logger) error {
	hosts := st.dashboard.hostList()
	if h, _, err := net.SplitHostPort(addr); err == nil && h != "" && net.ParseIP(h) == nil {
		hosts = append(hosts, h)
	}
	if tcp, ok := listen.(*net.TCPAddr); st.dashboard.token == "" && (!ok || !tcp.IP.IsLoopback()) {
		log.Warn("dashboard off: --metrics-addr listens beyond loopback and the dashboard has no token; /metrics, /healthz and /readyz are served",
			"addr", listen.String(), "turn it on with", "--dashboard-token or $"+dashboardTokenEnv)
		st.dashboardOff = true
		mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "the dashboard is off: it listens beyond loopback without a token (start allot with --dashboard-token or $"+dashboardTokenEnv+"; see docs/dashboard.md)", http.StatusForbidden)
		})
		return nil
	}
	d, err := dashboard.New(dashboard.Options{Source: dashboard.Replicas(st.Replicas), Conn: st.conn, Logger: log,
		AllowedHosts: hosts, Token: st.dashboard.token})
	if err != nil {
		return fmt.Errorf("--dashboard-hosts, --dashboard-token: %w", err)
	}
	go func() { _ = d.Run(ctx) }()
	mux.Handle("/", d.Handler(""))
	return nil
}

// newOps is the ops state of a process whose replicas run on nc's
// servers: metrics, health and the dashboard.
func (f *coordFlags) newOps(nc *nats.Conn) *opsState {
	return &opsState{maxResources: f.metricsMax, conn: nc, dashboard: f.dashboard}
}
