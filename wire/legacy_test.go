package wire_test

import (
	"testing"

	"github.com/gpuq/gpuq/wire"
)

// A settle entry journalled before "held" was renamed "reservation" still
// decodes with the reservation it settled.
func TestSettleEntryWithTheOldReservationName(t *testing.T) {
	old := []byte(`{"v":1,"kind":"settle","seq":130,"time":"2026-12-01T09:00:00Z","account":"vision","job":"tune-1","amount":2,"held":300,"released":298,"balance":998,"reserved":0}`)
	e, err := wire.DecodeJournalEntry(old)
	if err != nil || e.Reservation != 300 || e.Released != 298 {
		t.Fatalf("decode = %+v, %v; want a reservation of 300", e, err)
	}
}
