// Package option applies functional options, the form every option of the
// agent and its quota and domain clients takes: a function that sets a
// field of an unexported struct, or says why it cannot.
package option

// Apply applies opts to o in order, skipping nil ones, and returns the
// first error.
func Apply[T any, F ~func(*T) error](o *T, opts []F) error {
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(o); err != nil {
			return err
		}
	}
	return nil
}
