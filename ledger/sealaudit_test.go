package ledger_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// TestCheckFromSeal: a read of an account's journal from its newest seal on
// passes; one that starts after the seal, lacks the seal, or does not
// verify to the head does not, and says why.
func TestCheckFromSeal(t *testing.T) {
	s := ledger.New()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var all []ledger.StoredEntry
	seq := uint64(0)
	apply := func(c ledger.Command) {
		seq++
		all = append(all, entriesOf(s.Apply(c, seq, at))...)
	}
	apply(ledger.Admin{Account: "a", ID: "create", Op: ledger.OpCreate, Balance: 1})
	if err := ledger.CheckFromSeal("a", all, s.Accounts["a"].Journal, seq); err != nil {
		t.Errorf("a journal never sealed, read whole: %v", err)
	}
	if err := ledger.CheckFromSeal("a", nil, s.Accounts["a"].Journal, seq); err == nil || !strings.Contains(err.Error(), "no entry read from its newest seal (entry 1) on") {
		t.Errorf("nothing read of a journal never sealed: %v", err)
	}
	for i := range ledger.SealEvery + 20 {
		apply(ledger.Admin{Account: "a", ID: fmt.Sprintf("g%d", i), Op: ledger.OpGrant, Amount: 1})
	}
	head := s.Accounts["a"].Journal
	if head.Sealed != ledger.SealEvery+1 {
		t.Fatalf("head %+v, want sealed at %d", head, ledger.SealEvery+1)
	}
	seal := int(head.Sealed) - 1 // index of the seal in all
	cases := []struct {
		name    string
		entries []ledger.StoredEntry
		want    string // "" passes
	}{
		{"whole", all, ""},
		{"from the seal", all[seal:], ""},
		{"from before the seal", all[seal-5:], ""},
		{"after the seal", all[seal+1:], "start at entry 1002, after its newest seal (entry 1001)"},
		{"the seal left out", append(append([]ledger.StoredEntry{}, all[seal-3:seal]...), all[seal+1:]...), "no seal read at entry 1001"},
		{"an entry after the seal left out", append(append([]ledger.StoredEntry{}, all[seal:seal+5]...), all[seal+6:]...), "entry 1006 is missing"},
		{"the head left out", all[seal : len(all)-1], "the last the ledger's journal head names, is missing"},
	}
	for _, c := range cases {
		err := ledger.CheckFromSeal("a", c.entries, head, seq)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.want)
		}
	}
	// Entries of commands past the checkpoint are left out: with a
	// checkpoint 5 commands back, the head's entry is not among those kept.
	if err := ledger.CheckFromSeal("a", all[seal:], head, seq-5); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("entries read past the checkpoint: %v", err)
	}
}
