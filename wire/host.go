package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuq/gpuq/subjects"
)

// Heartbeat is the value of key <host> in the gpuq_hosts bucket: a worker's
// heartbeat, renewed with a TTL. The scheduler places work only on hosts
// whose key is present and whose last heartbeat is younger than its TTL.
type Heartbeat struct {
	V         int       `json:"v"`
	Host      string    `json:"host"`
	Simulated bool      `json:"simulated"` // the GPUs are go-nvml mock devices, not hardware
	Draining  bool      `json:"draining,omitempty"`
	Devices   []Device  `json:"devices"`
	Running   []Running `json:"running"`
	Time      time.Time `json:"time"`
	// TTL is how long the heartbeat lasts without renewal, as a Go
	// duration ("10s"): the key's per-message TTL, which readers cannot
	// see on a KV entry. The scheduler counts a host gone once it has heard
	// nothing for this long.
	TTL string `json:"ttl,omitempty"`
}

// Device is one GPU of a host, as its worker sees it.
type Device struct {
	UUID      string `json:"uuid"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memory_mib"`
	Healthy   bool   `json:"healthy"`
	// Busy is true when a process gpuq did not start uses the device, so it
	// cannot be claimed.
	Busy    bool   `json:"busy,omitempty"`
	Job     string `json:"job,omitempty"` // the job whose attempt holds the device
	Attempt int    `json:"attempt,omitempty"`
	Reason  string `json:"reason,omitempty"` // why it is unhealthy or busy
}

// Running is an attempt a worker is running.
type Running struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
}

// Capacity is how many of the host's GPUs gpuq may use: healthy ones that no
// foreign process occupies, whether free or held by gpuq jobs. A draining
// host offers none.
func (h Heartbeat) Capacity() int {
	if h.Draining {
		return 0
	}
	n := 0
	for _, d := range h.Devices {
		if d.Healthy && !d.Busy {
			n++
		}
	}
	return n
}

// EncodeHeartbeat returns the heartbeat body of h.
func EncodeHeartbeat(h Heartbeat) ([]byte, error) {
	h.V = Version
	h.Time = h.Time.UTC()
	if err := h.check(); err != nil {
		return nil, err
	}
	return json.Marshal(h)
}

// DecodeHeartbeat decodes a heartbeat.
func DecodeHeartbeat(data []byte) (Heartbeat, error) {
	var h Heartbeat
	if err := unmarshalV1("host heartbeat", data, &h); err != nil {
		return Heartbeat{}, err
	}
	if err := h.check(); err != nil {
		return Heartbeat{}, err
	}
	return h, nil
}

func (h Heartbeat) check() error {
	var errs []error
	if err := subjects.CheckToken("host", h.Host); err != nil {
		errs = append(errs, err)
	}
	if len(h.Devices) > 4096 || len(h.Running) > 4096 {
		errs = append(errs, fmt.Errorf("%d devices and %d running attempts, more than 4096", len(h.Devices), len(h.Running)))
	}
	seen := map[string]bool{}
	for i, d := range h.Devices {
		if d.UUID == "" || seen[d.UUID] {
			errs = append(errs, fmt.Errorf("device %d has an empty or repeated uuid %q", i, d.UUID))
		}
		seen[d.UUID] = true
	}
	for _, r := range h.Running {
		if err := subjects.CheckToken("job id", r.Job); err != nil || r.Attempt < 1 {
			errs = append(errs, fmt.Errorf("running attempt %q/%d is not valid", r.Job, r.Attempt))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("host heartbeat: %w", err)
	}
	return nil
}
