package worker

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// ErrNotEnoughGPUs reports a claim the host cannot satisfy now.
var ErrNotEnoughGPUs = errors.New("worker: not enough free GPUs")

// ErrGPUsBusy reports a claim the host could satisfy but for GPUs in use: it
// has enough healthy devices, and some are held by another attempt or used
// by processes gpuq did not start. It wraps ErrNotEnoughGPUs.
var ErrGPUsBusy = fmt.Errorf("%w: enough are healthy, but some are in use", ErrNotEnoughGPUs)

// Attempt names one dispatch of a job.
type Attempt struct {
	Job string
	N   int
}

func (a Attempt) String() string { return fmt.Sprintf("%s attempt %d", a.Job, a.N) }

// Claims is the worker's table of which attempt holds which GPU, and which
// GPUs are unhealthy. It is the source of truth for what gpuq placed on the
// host; the library only tells it about foreign use. Claims is safe for
// concurrent use.
type Claims struct {
	gpu        GPU
	maxUsedMiB int64

	mu sync.Mutex
	// uuids is each index's UUID as the last snapshot read it (see
	// claimFew).
	uuids     []string
	holder    map[string]Attempt // uuid → attempt
	unhealthy map[string]string  // uuid → reason
}

// NewClaims returns an empty claims table over gpu. A device with more than
// maxUsedMiB of memory in use is busy.
func NewClaims(gpu GPU, maxUsedMiB int64) *Claims {
	return &Claims{gpu: gpu, maxUsedMiB: maxUsedMiB, holder: map[string]Attempt{}, unhealthy: map[string]string{}}
}

// usable reports whether d could be claimed if nothing used it: it can be
// queried, is healthy and not in MIG mode, and its processes can be read.
// Holds c.mu.
func (c *Claims) usable(d Device) bool {
	return d.Err == "" && c.unhealthy[d.UUID] == "" && !d.MIG && d.Processes >= 0
}

// why returns why d cannot be claimed now, or "" if it is free. Holds c.mu.
func (c *Claims) why(d Device) string {
	switch {
	case d.Err != "":
		return "query failed: " + d.Err
	case c.unhealthy[d.UUID] != "":
		return "unhealthy: " + c.unhealthy[d.UUID]
	case d.MIG:
		return "MIG mode is enabled"
	case c.holder[d.UUID] != (Attempt{}):
		return "claimed by " + c.holder[d.UUID].String()
	case d.Processes < 0:
		return "its compute processes cannot be read"
	case d.Processes > 0:
		return fmt.Sprintf("%d compute process(es) gpuq did not start", d.Processes)
	case d.UsedMiB > c.maxUsedMiB:
		return fmt.Sprintf("%d MiB of memory in use (more than %d)", d.UsedMiB, c.maxUsedMiB)
	}
	return ""
}

// Claim takes n free GPUs for a, all or none, from a fresh snapshot, and
// returns them, as the snapshot saw them, in index order. A second claim by
// the same attempt returns the GPUs it already holds. It returns an error
// wrapping ErrNotEnoughGPUs, with why each other device was passed over,
// when fewer than n are free.
func (c *Claims) Claim(a Attempt, n int) ([]Device, error) {
	if devs, ok := c.claimFew(a, n); ok {
		return devs, nil
	}
	devs, err := c.gpu.Devices()
	if err != nil {
		return nil, fmt.Errorf("read the GPUs: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noteUUIDs(devs)
	if held := c.heldLocked(a, devs); len(held) > 0 {
		return held, nil
	}
	var free []Device
	var passed []string
	usable := 0
	for _, d := range devs {
		if c.usable(d) {
			usable++
		}
		if reason := c.why(d); reason != "" {
			passed = append(passed, d.UUID+": "+reason)
			continue
		}
		free = append(free, d)
	}
	if len(free) < n {
		why := ErrNotEnoughGPUs
		if usable >= n {
			why = ErrGPUsBusy
		}
		return nil, fmt.Errorf("%s needs %d GPUs, %d of %d are free (%s): %w",
			a, n, len(free), len(devs), strings.Join(passed, "; "), why)
	}
	free = free[:n]
	for _, d := range free {
		c.holder[d.UUID] = a
	}
	return free, nil
}

// claimFew claims n free GPUs for a the way Claim does, reading afresh only
// the devices no attempt here holds, in index order, until n are free:
// with a DeviceReader and a snapshot read before, a claim on a busy host
// reads one device, not all (each read is six NVML calls, one of them the
// device's process list). It reports false, having claimed nothing, when
// it cannot: no DeviceReader or snapshot yet, a device whose UUID is not
// the snapshot's (the full read notes the new ones), an attempt that holds
// GPUs already (Claim returns those), or fewer than n free, which Claim's
// full read then says why of.
func (c *Claims) claimFew(a Attempt, n int) ([]Device, bool) {
	dr, ok := c.gpu.(DeviceReader)
	if !ok || n <= 0 {
		return nil, false
	}
	c.mu.Lock()
	if c.holdsLocked(a) {
		c.mu.Unlock()
		return nil, false
	}
	var cands []int
	for i, u := range c.uuids {
		if c.holder[u] == (Attempt{}) && c.unhealthy[u] == "" {
			cands = append(cands, i)
		}
	}
	uuids := c.uuids
	c.mu.Unlock()
	if len(cands) < n {
		return nil, false
	}
	var free []Device
	for _, i := range cands {
		d, err := dr.Device(i)
		if err != nil || d.UUID != uuids[i] || d.Index != i {
			return nil, false
		}
		c.mu.Lock()
		ok := c.why(d) == ""
		c.mu.Unlock()
		if ok {
			free = append(free, d)
			if len(free) == n {
				break
			}
		}
	}
	if len(free) < n {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range free {
		if c.why(d) != "" { // claimed meanwhile, or found unhealthy
			return nil, false
		}
	}
	if c.holdsLocked(a) { // a claim of a's own meanwhile
		return nil, false
	}
	for _, d := range free {
		c.holder[d.UUID] = a
	}
	return free, true
}

// holdsLocked reports whether a holds any GPU. Holds c.mu.
func (c *Claims) holdsLocked(a Attempt) bool {
	for _, h := range c.holder {
		if h == a {
			return true
		}
	}
	return false
}

// noteUUIDs keeps each index's UUID as devs shows it. Holds c.mu.
func (c *Claims) noteUUIDs(devs []Device) {
	uuids := make([]string, len(devs))
	for i, d := range devs {
		if d.Index != i || d.UUID == "" {
			c.uuids = nil // not a snapshot claimFew can go by
			return
		}
		uuids[i] = d.UUID
	}
	c.uuids = uuids
}

// Release frees every GPU a holds.
func (c *Claims) Release(a Attempt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for u, h := range c.holder {
		if h == a {
			delete(c.holder, u)
		}
	}
}

// heldLocked returns the GPUs a holds, in UUID order, as devs shows them;
// one devs does not list has only its UUID. Holds c.mu.
func (c *Claims) heldLocked(a Attempt, devs []Device) []Device {
	var out []Device
	for u, h := range c.holder {
		if h != a {
			continue
		}
		d := Device{UUID: u}
		for _, sd := range devs {
			if sd.UUID == u {
				d = sd
				break
			}
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UUID < out[j].UUID })
	return out
}

// MarkUnhealthy records that a device failed, for good, and returns the
// attempt holding it, if any.
func (c *Claims) MarkUnhealthy(uuid, reason string) (Attempt, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unhealthy[uuid] == "" {
		c.unhealthy[uuid] = reason
	}
	a, ok := c.holder[uuid]
	return a, ok
}

// Status is one device with what the worker knows of it.
type Status struct {
	Device
	Holder  Attempt // zero when not claimed
	Why     string  // why it cannot be claimed now, "" when free
	Healthy bool
}

// Snapshot reads the devices and reports each with its holder and, when it
// cannot be claimed, why.
func (c *Claims) Snapshot() ([]Status, error) {
	devs, err := c.gpu.Devices()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noteUUIDs(devs)
	out := make([]Status, len(devs))
	for i, d := range devs {
		out[i] = Status{Device: d, Holder: c.holder[d.UUID], Why: c.why(d),
			Healthy: d.Err == "" && c.unhealthy[d.UUID] == ""}
	}
	return out, nil
}
