package scheduler

import (
	"testing"
	"unsafe"
)

// A queued job costs one item: a takeover of a million pending jobs holds a
// million. It names its account by pointer, which keeps it in the 48-byte
// size class (a copy of the account's string header took it to 64).
func TestQueueItemFitsIn48Bytes(t *testing.T) {
	if n := unsafe.Sizeof(item{}); n > 48 {
		t.Errorf("a queue item is %d bytes, want at most 48", n)
	}
}
