package scheduler

import (
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestFirstSortedMatchesSortingAll: firstSorted returns what sorting every
// key, filtering and taking the first limit returns, for any set, filter
// and limit (a differential test against the obvious way).
func TestFirstSortedMatchesSortingAll(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		set := map[int]bool{}
		for _, k := range rapid.SliceOfN(rapid.IntRange(-500, 500), 0, 300).Draw(t, "keys") {
			set[k] = true
		}
		mod := rapid.IntRange(1, 4).Draw(t, "mod")
		keep := func(k int) bool { return (k%mod+mod)%mod == 0 }
		limit := rapid.IntRange(-1, 40).Draw(t, "limit")
		var want []int
		for _, k := range slices.Sorted(maps.Keys(set)) {
			if len(want) < limit && keep(k) {
				want = append(want, k)
			}
		}
		got := firstSorted(maps.Keys(set), limit, keep)
		if !slices.Equal(got, want) {
			t.Fatalf("firstSorted(limit %d, mod %d) = %v, want %v", limit, mod, got, want)
		}
	})
}
