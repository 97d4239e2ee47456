package bench

import "context"

// SimResult is the outcome of RunSim.
type SimResult struct{}

// RunSim runs the convergence scenarios.
func RunSim(ctx context.Context, env *Env) (*SimResult, error) { return &SimResult{}, nil }

// Markdown renders the result.
func (r *SimResult) Markdown() string { return "" }

func (r *SimResult) headlineRows() [][]string { return nil }
