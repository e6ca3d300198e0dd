package worker

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpuq/gpuq/ledger"
)

// TestTruncateKeepsReasonsValid checks that a reason cut to the ledger's
// limit is still valid UTF-8 within the limit after a JSON round trip, which
// is what the ledger validates.
func TestTruncateKeepsReasonsValid(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]string{
		"short":             "exit 1",
		"ascii":             strings.Repeat("x", 2*ledger.MaxReasonBytes),
		"two-byte at cut":   strings.Repeat("é", ledger.MaxReasonBytes),
		"three-byte at cut": "a" + strings.Repeat("€", ledger.MaxReasonBytes),
		"four-byte at cut":  "ab" + strings.Repeat("🙂", ledger.MaxReasonBytes),
		"stray bytes":       strings.Repeat("\xff", ledger.MaxReasonBytes-10),
	} {
		got := truncate(s)
		if !utf8.ValidString(got) || len(got) > ledger.MaxReasonBytes {
			t.Errorf("%s: truncate gave %d bytes, valid UTF-8 %v", name, len(got), utf8.ValidString(got))
		}
		data, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		var back string
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if back != got {
			t.Errorf("%s: %d bytes came back from JSON as %d", name, len(got), len(back))
		}
		if len(s) > ledger.MaxReasonBytes && utf8.ValidString(s) && !strings.HasSuffix(got, "...") {
			t.Errorf("%s: a cut reason does not end in ...", name)
		}
	}
	if got := truncate("exit 1"); got != "exit 1" {
		t.Errorf("truncate of a short reason = %q", got)
	}
}
