package secure_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/allot/allot/dashboard"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/webtest"
)

// dashToken is the token of the suite's dashboard.
const dashToken = "secure-suite-dashboard-token"

// startDashboard serves the dashboard of c's replica on c's connection,
// as `allot coordinator --metrics-addr --dashboard-token` does, and
// returns its URL.
func startDashboard(t *testing.T, c *coord) string {
	t.Helper()
	dash, err := dashboard.New(dashboard.Options{Source: c.rep, Conn: c.nc, Logger: slogFor(t, c.log), Token: dashToken})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		_ = dash.Run(ctx)
		close(ran)
	}()
	srv := httptest.NewServer(dash.Handler(""))
	t.Cleanup(func() {
		cancel()
		<-ran
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// dashboardEvent reads the dashboard's /snapshot with its token.
func dashboardEvent(t *testing.T, url string) dashboard.Event {
	t.Helper()
	resp, body := webtest.Get(t, url+"/snapshot", "", webtest.Bearer(dashToken)...)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("dashboard: %s", resp.Status)
	}
	var ev dashboard.Event
	if err := json.Unmarshal([]byte(body), &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// waitDashboardReplicas waits until the dashboard at url lists exactly
// the replicas ids, one of them serving in term and the others following
// it (its Replicas panel: the replicas' micro STATS, asked on the
// coordinator's connection).
func waitDashboardReplicas(t *testing.T, url string, term uint64, ids ...string) {
	t.Helper()
	poll.For(t, 3*wait, 100*time.Millisecond, func() error {
		ev := dashboardEvent(t, url)
		var got []string
		serving, inTerm := 0, 0
		for _, r := range ev.Replicas {
			got = append(got, r.ServerID)
			if r.Serving {
				serving++
			}
			if r.Term == term {
				inTerm++
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, ids) || serving != 1 || inTerm != len(ids) || ev.Snapshot == nil {
			return fmt.Errorf("dashboard replicas %+v (error %q), want %v with one serving in term %d", ev.Replicas, ev.Error, ids, term)
		}
		return nil
	})
}

// waitElectionWatch waits until the election bucket has a consumer
// created after since with a subscriber bound to it: a follower's watch
// of the election key (the leader watches nothing there).
func (d *deployment) waitElectionWatch(t *testing.T, since time.Time) {
	t.Helper()
	admin, _ := d.dial(t, d.srv, "admin")
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
	defer cancel()
	var seen []string
	for {
		seen = seen[:0]
		if s, err := js.Stream(ctx, "KV_allot_election"); err == nil {
			for info := range s.ListConsumers(ctx).Info() {
				if info.Created.After(since) && info.PushBound {
					return
				}
				seen = append(seen, info.Name+" created "+info.Created.String())
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no watch of the election key since %v; consumers: %v", since, seen)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestReconnectKeepsElectionAndDashboard: the root server stops under
// two coordinator replicas (a leader and a follower) and a dashboard on
// the leader's connection, for longer than the leadership lasts, and
// starts again on the same port and store. While it is down the leader
// loses its leadership and watches the election key again on a
// connection that is not connected: nats.go then creates the watch's
// consumer on the API subject without a consumer name
// ($JS.API.CONSUMER.CREATE.<stream>), sent once the connection is back,
// which the coordinator's rights once refused ("cannot watch election
// key; campaigning periodically"). With only the coordinator user's
// rights, after the restart a replica serves again, the other watches the
// election key, the dashboard lists both replicas again (it asks their
// micro STATS on the coordinator's connection), a tenant's agent gets
// its lease, and nothing either connection does is refused.
func TestReconnectKeepsElectionAndDashboard(t *testing.T) {
	d := startDeployment(t)
	follower := d.launchCoordinator(t, d.srv, "coordinator", d.rootOptions("root-2"))
	url := startDashboard(t, d.coord)
	waitDashboardReplicas(t, url, waitEitherServes(t, d.coord), "root-1", "root-2")
	// Only with its token, and only under a name it answers.
	for _, r := range []struct {
		host, token string
		code        int
	}{{"", "", http.StatusUnauthorized}, {"rebound.example:9464", dashToken, http.StatusForbidden}} {
		if resp, _ := webtest.Get(t, url+"/snapshot", r.host, webtest.Bearer(r.token)...); resp.StatusCode != r.code {
			t.Fatalf("dashboard, Host %q, token %q: %s, want %d", r.host, r.token, resp.Status, r.code)
		}
	}
	d.waitElectionWatch(t, time.Time{})
	nc, _ := d.dial(t, d.srv, "tenant_a")
	leaseOf(t, nc)

	d.stopRoot(t)
	d.coord.waitServing(t, false)
	restarted := time.Now()
	d.startRootAgain(t)
	term := waitEitherServes(t, d.coord, follower)
	d.waitElectionWatch(t, restarted)
	waitDashboardReplicas(t, url, term, "root-1", "root-2")
	nc, _ = d.dial(t, d.srv, "tenant_b")
	leaseOf(t, nc)
	for _, c := range []*coord{d.coord, follower} {
		if e := c.errs.all(); len(e) > 0 {
			t.Fatalf("replica %s's connection was refused: %v", c.id, e)
		}
		if w := c.log.with("cannot watch election key"); len(w) > 0 {
			t.Fatalf("replica %s's election watch failed: %v", c.id, w)
		}
	}
}

// waitEitherServes waits until one of the replicas serves, and returns
// its term.
func waitEitherServes(t *testing.T, cs ...*coord) uint64 {
	t.Helper()
	var term uint64
	poll.Until(t, 3*wait, "a replica to serve", func() bool {
		for _, c := range cs {
			if st := c.rep.Status(); st.Serving {
				term = st.Term
				return true
			}
		}
		return false
	})
	return term
}
