package ledger

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot/allot/proto/allotpb"
)

// BenchmarkSteadyRecord is a record written while 20 resources are each
// held by the same 2,000 clients (their holder ids listed), a few of
// whom refresh in each round without joining or leaving: what every
// write of a steady node costs its round (the record built each round,
// as a write builds it).
func BenchmarkSteadyRecord(b *testing.B) {
	const resources, holders = 20, 2000
	set := fairTemplate(1e6)
	l, now := servingLedger()
	reqs := make([]*allotpb.GetCapacityRequest, holders)
	for i := range reqs {
		rs := make([]*allotpb.ResourceRequest, resources)
		for k := range rs {
			rs[k] = &allotpb.ResourceRequest{ResourceId: fmt.Sprint("r-", k), Wants: 1}
		}
		reqs[i] = &allotpb.GetCapacityRequest{ClientId: fmt.Sprint("c-", i), Resource: rs}
	}
	round := func(batch []*allotpb.GetCapacityRequest) {
		for _, req := range batch {
			if _, err := l.Get(now, set, req); err != nil {
				b.Fatal(err)
			}
		}
		p := l.Propose(now)
		l.Allocate(now)
		l.EndRound()
		if p != nil {
			l.Commit(now, p, nil)
		}
	}
	for i := 0; i < holders; i += 100 {
		round(reqs[i : i+100])
		round(nil) // the write that lists them lets them be granted
	}
	listed := 0
	for i := 0; b.Loop(); i++ {
		now += int64(time.Millisecond)
		k := i * 4 % holders
		round(reqs[k : k+4])
		// The record a write would carry now (its horizon or a raise
		// due), built as Propose builds it.
		rec := l.buildRecord(now, now+int64(10*time.Second), nil)
		for _, e := range rec.GetResources() {
			listed += len(e.GetHolderIds())
		}
	}
	b.ReportMetric(float64(listed)/float64(b.N), "ids/write")
}
