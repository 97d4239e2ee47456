package level

// pool holds values of T in pages of poolPage, so that growing it never
// copies what it holds: a State of a million claims grew its slices of
// tree nodes and claim values (some 40 and 25 MB) by copying them whole,
// inside one change, and held both copies meanwhile. The first page
// grows like a slice, so a small State takes what it needs. Indices are
// int32, as the trees' ids.
type pool[T any] struct {
	pages [][]T // every page but the last is full
	n     int32
}

const (
	poolShift = 10
	poolPage  = 1 << poolShift
)

// at returns value i (0 <= i < len).
func (p *pool[T]) at(i int32) *T { return &p.pages[i>>poolShift][i&(poolPage-1)] }

// len returns the number of values.
func (p *pool[T]) len() int { return int(p.n) }

// grow makes the pool hold size values at least, new ones zero.
func (p *pool[T]) grow(size int) {
	for int(p.n) < size {
		k := int(p.n >> poolShift)
		switch {
		case k == len(p.pages) && k == 0:
			p.pages = append(p.pages, make([]T, 0, 4))
		case k == len(p.pages):
			p.pages = append(p.pages, make([]T, 0, poolPage))
		}
		var zero T
		p.pages[k] = append(p.pages[k], zero)
		p.n++
	}
}
