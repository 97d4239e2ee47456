package election

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Seat is one replica's place in a partitioned service (a quota or
// domain-limits partition): it campaigns, runs a Serving for each term it
// wins, and tells which one serves now. The zero Seat is ready to Run.
type Seat[S Serving] struct {
	mu   sync.Mutex
	el   *Elector
	term uint64 // the term being served; 0 when not serving
	srv  S
}

// Run makes the elector of cfg and campaigns until ctx ends, serving each
// term won with start (see Serve; what names the service in errors);
// onServing, if not nil, is told when a term starts and stops serving.
func (s *Seat[S]) Run(ctx context.Context, js jetstream.JetStream, cfg Config, what string,
	start func(ctx context.Context, el *Elector, term uint64) (S, error), onServing func(term uint64, serving bool)) error {
	el, err := New(js, cfg)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.el = el
	s.mu.Unlock()
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
		if onServing != nil {
			onServing(term, serving)
		}
	}
	return el.Run(ctx, Serve(what, begin, changed))
}

// Current returns the Serving of the term being served and that term, or
// the zero S and 0 when the seat does not serve.
func (s *Seat[S]) Current() (S, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv, s.term
}

// Elector returns the seat's elector, or nil before Run made it.
func (s *Seat[S]) Elector() *Elector {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.el
}
