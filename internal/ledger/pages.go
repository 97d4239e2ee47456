package ledger

import "iter"

// clientPages holds a resource's client records in pages of pageSize, so
// that a resource of a million clients grows without copying them all
// (doubling a slice of them copied some 200 MB in one round, and held
// both copies meanwhile) and without a slice's spare capacity (a
// quarter, on average an eighth). The first page grows like a slice, so
// a resource of a few clients takes no more than they need.
type clientPages struct {
	pages [][]client // every page but the last is full
	n     int32
}

const (
	pageShift = 12
	pageSize  = 1 << pageShift
)

// at returns record i (0 <= i < len).
func (p *clientPages) at(i int32) *client { return &p.pages[i>>pageShift][i&(pageSize-1)] }

// len returns the number of records.
func (p *clientPages) len() int32 { return p.n }

// push adds c at the end and returns its index.
func (p *clientPages) push(c client) int32 {
	k := int(p.n >> pageShift)
	switch {
	case k == len(p.pages) && k == 0:
		p.pages = append(p.pages, make([]client, 0, 8))
	case k == len(p.pages):
		p.pages = append(p.pages, make([]client, 0, pageSize))
	}
	p.pages[k] = append(p.pages[k], c)
	p.n++
	return p.n - 1
}

// pop drops the last record. A page left empty is freed once the page
// before it is a quarter empty too, so that records coming and going
// around a page's edge do not allocate a page each time.
func (p *clientPages) pop() {
	p.n--
	k := p.n >> pageShift
	pg := p.pages[k]
	pg[len(pg)-1] = client{}
	p.pages[k] = pg[:len(pg)-1]
	if last := len(p.pages) - 1; last > 0 && len(p.pages[last]) == 0 && len(p.pages[last-1]) < pageSize*3/4 {
		p.pages[last] = nil
		p.pages = p.pages[:last]
	}
}

// all yields every record with its index.
func (p *clientPages) all() iter.Seq2[int32, *client] {
	return func(yield func(int32, *client) bool) {
		for i := range p.n {
			if !yield(i, p.at(i)) {
				return
			}
		}
	}
}
