package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
)

// BenchmarkAuditJournal measures an audit (read the journal from a real
// server on file storage, verify every chain, recompute the books) of a
// journal of 10,000, 100,000 and 1,000,000 entries (not with -short) over
// 10 accounts (each sealed every ledger.SealEvery entries), and of 10,000
// entries over 1,000 accounts (none sealed: the read from seals takes each
// from its creation, and costs a consumer per account), read whole (gpuq
// audit --full) and from the seals (gpuq audit). It reports the journal
// messages read per audit.
//
//	go test -run XXX -bench AuditJournal -benchtime 3x ./client/
func BenchmarkAuditJournal(b *testing.B) {
	for _, c := range []struct{ size, accounts int }{{10_000, 10}, {100_000, 10}, {1_000_000, 10}, {10_000, 1000}} {
		size, accounts := c.size, c.accounts
		if size > 100_000 && testing.Short() {
			continue
		}
		f := newJournalAt(b, 10*time.Minute)
		f.async = true
		for a := range accounts {
			f.apply(ledger.Admin{Account: fmt.Sprintf("a%d", a), ID: "create", Op: ledger.OpCreate, Balance: 10}, time.Now())
		}
		for i := range size - accounts {
			// Sealing adds entries: stop at size.
			if f.seq >= uint64(size) {
				break
			}
			f.apply(ledger.Admin{Account: fmt.Sprintf("a%d", i%accounts), ID: fmt.Sprintf("g%d", i), Op: ledger.OpGrant, Amount: 1}, time.Now())
		}
		select {
		case <-f.js.PublishAsyncComplete():
		case <-f.ctx.Done():
			b.Fatal("the journal was not stored in time")
		}
		s := f.state
		for _, mode := range []string{"full", "seals"} {
			b.Run(fmt.Sprintf("entries=%d/accounts=%d/%s", size, accounts, mode), func(b *testing.B) {
				var read uint64
				for b.Loop() {
					var j client.Journal
					var err error
					if mode == "full" {
						j, err = f.c.Journal(f.ctx, time.Time{})
					} else {
						j, err = f.c.JournalFromSeals(f.ctx, s, s.Seq, 0)
					}
					if err != nil {
						b.Fatal(err)
					}
					if _, errs := ledger.AuditJournal(s, s.Seq, j.Chained, j.Legacy); len(errs) > 0 || len(j.Bad) > 0 {
						b.Fatalf("audit: %d differences (%v), %d bad messages (%v)", len(errs), errors.Join(errs...), len(j.Bad), j.Bad)
					}
					read = j.Read
				}
				b.ReportMetric(float64(read), "msgs/op")
			})
		}
	}
}
