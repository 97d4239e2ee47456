package domainserver

// Expire runs the sweeper once, at the server's clock: tests on a set
// clock need not wait for its ticks.
func (s *Server) Expire() { s.expire(s.opts.Now()) }
