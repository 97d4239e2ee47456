package quota

// swLog is SLIDING_WINDOW_LOG's admissions in time order, in a ring that
// grows by doubling and shrinks when mostly empty, so a steady load
// allocates nothing and memory follows the admissions in the window.
type swLog struct {
	ring    []swEntry
	head, n int
	// sum is the tokens of all entries.
	sum int64
}

type swEntry struct{ at, n int64 }

// minRing is the smallest ring allocated.
const minRing = 4

func (l *swLog) at(i int) *swEntry { return &l.ring[(l.head+i)%len(l.ring)] }

// push appends n tokens at time at (no earlier than the last entry),
// merging with an entry at the same time.
func (l *swLog) push(at, n int64) {
	l.sum += n
	if l.n > 0 {
		if last := l.at(l.n - 1); last.at == at {
			last.n += n
			return
		}
	}
	if l.n == len(l.ring) {
		l.resize(max(minRing, 2*len(l.ring)))
	}
	l.n++
	*l.at(l.n - 1) = swEntry{at, n}
}

// expire drops the entries at or before t.
func (l *swLog) expire(t int64) {
	for l.n > 0 && l.ring[l.head].at <= t {
		l.sum -= l.ring[l.head].n
		l.head = (l.head + 1) % len(l.ring)
		l.n--
	}
	if l.n == 0 {
		l.head = 0
	}
	if len(l.ring) > 8*minRing && l.n < len(l.ring)/4 {
		l.resize(len(l.ring) / 2)
	}
}

func (l *swLog) resize(size int) {
	r := make([]swEntry, size)
	for i := range l.n {
		r[i] = *l.at(i)
	}
	l.ring, l.head = r, 0
}

// roomAt returns the earliest time, given as an entry's time, after whose
// expiry n more tokens fit under limit; ok is false when none does.
func (l *swLog) roomAt(n, limit int64) (at int64, ok bool) {
	over := l.sum + n - limit
	for i := range l.n {
		e := l.at(i)
		if over -= e.n; over <= 0 {
			return e.at, true
		}
	}
	return 0, false
}

// last returns the time of the latest entry, ok false when empty.
func (l *swLog) last() (int64, bool) {
	if l.n == 0 {
		return 0, false
	}
	return l.at(l.n - 1).at, true
}
