package domainlimit

// run is n hits at time t (nanoseconds): a bulk hit of 1000 is one
// run, so a window never holds more runs than hits or requests.
type run struct {
	t, n int64
}

// ring is a sliding window of hits: runs in time order in a circular
// buffer that grows by doubling, with their sum kept.
type ring struct {
	buf        []run
	head, size int
	sum        int64
}

// expire forgets the runs older than cutoff: a hit at t is in the window
// while t >= cutoff (the paper's "now > t + T^w" frees it).
func (r *ring) expire(cutoff int64) {
	for r.size > 0 {
		x := &r.buf[r.head]
		if x.t >= cutoff {
			return
		}
		r.sum -= x.n
		r.head++
		if r.head == len(r.buf) {
			r.head = 0
		}
		r.size--
	}
	r.head = 0
	if cap(r.buf) > 64 {
		r.buf = nil // an idle domain gives back a large window
	}
}

// since counts the hits at or after cutoff without changing r.
func (r *ring) since(cutoff int64) int64 {
	n := r.sum
	for i := 0; i < r.size; i++ {
		x := r.buf[(r.head+i)%len(r.buf)]
		if x.t >= cutoff {
			break
		}
		n -= x.n
	}
	return n
}

// add records n hits at t, which is not before the newest run.
func (r *ring) add(t, n int64) {
	if n == 0 {
		return
	}
	r.sum = satAdd(r.sum, n)
	if r.size > 0 {
		last := &r.buf[(r.head+r.size-1)%len(r.buf)]
		if last.t == t {
			last.n = satAdd(last.n, n)
			return
		}
	}
	if r.size == len(r.buf) {
		grown := make([]run, max(4, 2*len(r.buf)))
		for i := range r.size {
			grown[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = grown, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = run{t, n}
	r.size++
}

// room is how many more hits fit under limit (0 if none).
func room(limit, sum int64) int64 {
	if limit == Unlimited {
		return Unlimited
	}
	return max(0, limit-sum)
}

// satAdd adds non-negative a and b, saturating at Unlimited.
func satAdd(a, b int64) int64 {
	if a > Unlimited-b {
		return Unlimited
	}
	return a + b
}
