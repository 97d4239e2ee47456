package leader

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/replica"
)

// Serving is the work a leader does during one term: a coordinator, or a
// partition's server (usually built on a Term).
type Serving interface {
	// Done is closed when it stops serving on its own (its leadership
	// lapsed, a newer leader deposed it).
	Done() <-chan struct{}
	// Stop stops serving and returns once it has.
	Stop()
	// Err says why it stopped serving on its own, or nil.
	Err() error
}

// StartFunc starts the Serving of one term won; el is the seat's elector
// (for Valid, Founded, LastSequence).
type StartFunc[S Serving] func(ctx context.Context, el *election.Elector, term uint64) (S, error)

// SeatConfig configures a Seat's Run.
type SeatConfig struct {
	// Election configures the elector.
	Election election.Config
	// What names the service in errors: "quota partition 3".
	What string
	// ElectionConn, if set, makes the connection the election runs on from
	// the service's; Run closes it when it returns, or when the service's
	// connection closes. Nil: the election shares the service's
	// connection. See DialBeside.
	ElectionConn func(service *nats.Conn) (*nats.Conn, error)
	// OnServing, if set, is told when a term starts serving (true) and
	// when it has stopped (false).
	OnServing func(term uint64, serving bool)
	// Status, if set, is the replica status service Run registers for as
	// long as it runs, leader or follower.
	Status *StatusService
}

// ElectionConfig is the election of a replica whose options are e (as
// their WithDefaults fills them): it contends for key as id and logs to
// log.
func ElectionConfig(e replica.Election, key, id string, log *slog.Logger) election.Config {
	return election.Config{Bucket: e.Bucket, Key: key, ID: id, TTL: e.TTL, Replicas: e.Replicas, Logger: log}
}

// foundedTimeout bounds the read of a term's founding key.
const foundedTimeout = 5 * time.Second

// Founded reports whether term's leader has a predecessor (see
// election.Elector.Founded): a new leader of a partition that served
// before must not start as if nothing had been granted.
func Founded(ctx context.Context, el *election.Elector, term uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, foundedTimeout)
	defer cancel()
	return el.Founded(ctx, term)
}

// Started starts srv, a term's server just made, unless making it failed
// (err), and returns it once it serves.
func Started[S interface{ Start(context.Context) error }](ctx context.Context, srv S, err error) (S, error) {
	if err == nil {
		err = srv.Start(ctx)
	}
	if err != nil {
		var none S
		return none, err
	}
	return srv, nil
}

// StatusService describes a micro service through which every replica,
// leader or follower, reports its status: in its STATS data and on an
// endpoint of its own (no queue group: every replica answers).
type StatusService struct {
	// Name, Version, Description and Metadata describe the service.
	Name, Version, Description string
	Metadata                   map[string]string
	// Subject is the subject of the "status" endpoint, EndpointMetadata
	// its metadata.
	Subject          string
	EndpointMetadata map[string]string
	// Data returns the status published (JSON), given the seat's.
	Data func(Status) any
}

// Status is what a replica knows of its role.
type Status struct {
	Role election.Role
	// Term is the replica's term while it leads, else the current
	// leader's as last seen (0 unknown).
	Term uint64
	// Leader is the current leader's id as last seen.
	Leader string
	// Serving is true while this replica serves: it leads, its
	// leadership is valid, and its term has not stopped on its own.
	Serving bool
	// Failure says why the term stopped serving on its own.
	Failure string
}

// Seat is one replica's place in an elected service: it campaigns, runs a
// Serving for each term it wins, and tells which one serves now. The zero
// Seat is ready to Run.
type Seat[S Serving] struct {
	mu   sync.Mutex
	el   *election.Elector
	term uint64 // the term being served; 0 when not serving
	srv  S
}

// Run campaigns until ctx ends, serving each term won with start; then it
// stops serving and resigns so that a follower takes over at once. nc is
// the service's connection. It returns nil after ctx ends, or an error if
// the election cannot run.
func (s *Seat[S]) Run(ctx context.Context, nc *nats.Conn, cfg SeatConfig, start StartFunc[S]) error {
	enc := nc
	if cfg.ElectionConn != nil {
		var err error
		if enc, err = cfg.ElectionConn(nc); err != nil {
			return fmt.Errorf("election connection: %w", err)
		}
		defer enc.Close()
		// The election speaks for the service: once the service's
		// connection is closed for good, so is the election's, and the
		// leadership ends as it did on a shared connection.
		closed := nc.StatusChanged(nats.CLOSED)
		defer nc.RemoveStatusListener(closed)
		go func() {
			<-closed
			enc.Close()
		}()
		if nc.IsClosed() {
			enc.Close()
		}
	}
	js, err := jetstream.New(enc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	el, err := election.New(js, cfg.Election)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.el = el
	s.mu.Unlock()
	if cfg.Status != nil {
		svc, err := s.statusService(nc, cfg.Status)
		if err != nil {
			return err
		}
		defer func() { _ = svc.Stop() }()
	}
	begin := func(ctx context.Context, term uint64) (S, error) { return start(ctx, el, term) }
	changed := func(term uint64, srv S, serving bool) {
		s.mu.Lock()
		if serving {
			s.term, s.srv = term, srv
		} else {
			var none S
			s.term, s.srv = 0, none
		}
		s.mu.Unlock()
		if cfg.OnServing != nil {
			cfg.OnServing(term, serving)
		}
	}
	return el.Run(ctx, serve(cfg.What, begin, changed))
}

// Current returns the Serving of the term being served and that term, or
// the zero S and 0 when the seat does not serve.
func (s *Seat[S]) Current() (S, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv, s.term
}

// Status returns the replica's role, term and leader as the election
// knows them, and whether it serves.
func (s *Seat[S]) Status() Status {
	st := Status{Role: election.RoleFollower}
	s.mu.Lock()
	el, term, srv := s.el, s.term, s.srv
	s.mu.Unlock()
	if el == nil {
		return st
	}
	es := el.Status()
	st.Role, st.Term, st.Leader = es.Role, es.Term, es.Leader
	if term == 0 {
		return st
	}
	st.Serving = el.Valid(term)
	if err := srv.Err(); err != nil {
		st.Serving, st.Failure = false, err.Error()
	}
	return st
}

// statusService registers ss on nc.
func (s *Seat[S]) statusService(nc *nats.Conn, ss *StatusService) (micro.Service, error) {
	data := func() any { return ss.Data(s.Status()) }
	svc, err := micro.AddService(nc, micro.Config{
		Name: ss.Name, Version: ss.Version, Description: ss.Description, Metadata: ss.Metadata,
		StatsHandler: func(*micro.Endpoint) any { return data() },
	})
	if err != nil {
		return nil, fmt.Errorf("register %s service: %w", ss.Name, err)
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(req micro.Request) {
		b, _ := json.Marshal(data())
		_ = req.Respond(b)
	}), micro.WithEndpointSubject(ss.Subject), micro.WithEndpointQueueGroupDisabled(), micro.WithEndpointMetadata(ss.EndpointMetadata))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("add %s status endpoint: %w", ss.Name, err)
	}
	return svc, nil
}

// serve returns a LeadFunc that, for each term won, starts a Serving with
// start and runs it until leadership ends or it stops on its own. changed
// is told the term and the Serving once it serves, and with serving false
// once it has stopped. An error of start, or a Serving that stopped on its
// own, is returned so the candidate resigns.
func serve[S Serving](what string, start func(ctx context.Context, term uint64) (S, error), changed func(term uint64, s S, serving bool)) election.LeadFunc {
	return func(ctx context.Context, term uint64) error {
		s, err := start(ctx, term)
		if err != nil {
			return fmt.Errorf("start %s for term %d: %w", what, term, err)
		}
		changed(term, s, true)
		select {
		case <-ctx.Done():
		case <-s.Done():
		}
		s.Stop()
		changed(term, s, false)
		if err := s.Err(); err != nil {
			return fmt.Errorf("%s of term %d stopped serving: %w", what, term, err)
		}
		return nil
	}
}

// DialBeside opens a second connection to the servers of nc, with its
// options (credentials, TLS, inbox prefix, reconnection) but none of its
// callbacks: a ClosedCB that ends the process, say, must not fire when
// this one closes. It reads nc.Opts, which nats.go and micro change when
// handlers are set: call it before anything may set them concurrently,
// or take the options early with Beside.
func DialBeside(nc *nats.Conn) (*nats.Conn, error) { return Beside(nc, "election")(nc) }

// Beside takes nc's options now and returns a dialer of connections
// beside nc with them (see DialBeside), named after nc with role in
// parentheses: for SeatConfig.ElectionConn of a replica that is built
// before its Run, while the Runs of other services on nc set handlers of
// nc (micro services do) concurrently. A connection of its own is what
// keeps the election's keep-alives (or a service's priority requests)
// from queueing behind the service's other requests, at the server and
// in the client.
func Beside(nc *nats.Conn, role string) func(*nats.Conn) (*nats.Conn, error) {
	o := nc.Opts
	if o.Name != "" {
		o.Name += " (" + role + ")"
	}
	o.ClosedCB, o.DisconnectedCB, o.DisconnectedErrCB, o.ConnectedCB, o.ReconnectedCB = nil, nil, nil, nil, nil
	o.DiscoveredServersCB, o.AsyncErrorCB, o.ReconnectErrCB, o.LameDuckModeHandler = nil, nil, nil, nil
	if u := nc.ConnectedUrl(); u != "" && o.Url == "" && len(o.Servers) == 0 {
		o.Url = u
	}
	return func(*nats.Conn) (*nats.Conn, error) {
		c, err := o.Connect()
		if err != nil {
			return nil, fmt.Errorf("dial beside %s: %w", o.Name, err)
		}
		return c, nil
	}
}
