package natsstore

import "time"

// SetClockMargin shortens how much older than its TTL a lease key may look
// before it is taken for one that never expires, so a test need not wait
// the production margin.
func SetClockMargin(l *Lease, d time.Duration) { l.margin = d }
