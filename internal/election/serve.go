package election

import (
	"context"
	"fmt"
)

// Serving is the work a leader does during one term: a coordinator, or a
// quota partition's server.
type Serving interface {
	// Done is closed when it stops serving on its own (its leadership
	// lapsed, a newer leader deposed it).
	Done() <-chan struct{}
	// Stop stops serving and returns once it has.
	Stop()
	// Err says why it stopped serving on its own, or nil.
	Err() error
}

// Serve returns a LeadFunc that, for each term won, starts a Serving with
// start and runs it until leadership ends or it stops on its own. changed
// is called (if not nil) with the term and the Serving once it serves, and
// with serving false once it has stopped. An error of start, or a Serving
// that stopped on its own, is returned so the candidate resigns.
func Serve[S Serving](what string, start func(ctx context.Context, term uint64) (S, error), changed func(term uint64, s S, serving bool)) LeadFunc {
	return func(ctx context.Context, term uint64) error {
		s, err := start(ctx, term)
		if err != nil {
			return fmt.Errorf("start %s for term %d: %w", what, term, err)
		}
		if changed != nil {
			changed(term, s, true)
		}
		select {
		case <-ctx.Done():
		case <-s.Done():
		}
		s.Stop()
		if changed != nil {
			changed(term, s, false)
		}
		if err := s.Err(); err != nil {
			return fmt.Errorf("%s of term %d stopped serving: %w", what, term, err)
		}
		return nil
	}
}
