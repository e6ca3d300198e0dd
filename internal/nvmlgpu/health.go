//go:build cgo

package nvmlgpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// healthEvents are the events WatchHealth registers for, as NVIDIA's
// k8s-device-plugin does. Single-bit ECC errors are corrected by the
// hardware: they are registered but never reported.
const healthEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError

// applicationXids are Xid errors that an application causes (an illegal
// memory access, a page fault, a preempted or reset channel) rather than
// the GPU: the next job runs fine. The list is k8s-device-plugin's.
var applicationXids = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// WatchHealth reports devices that NVML says are broken: an Xid critical
// error other than an application Xid (13, 31, 43, 45, 68, 109), or a
// double-bit ECC error. It calls unhealthy on the caller's goroutine, never
// while holding the NVML lock, so unhealthy may call Devices; it must not
// call Close, which waits for WatchHealth to return.
//
// WatchHealth registers every device whose events NVML supports and waits
// for events until ctx ends or Close begins; it returns nil then, and nil
// at once if no device supports events. A device whose registration fails
// with an error other than nvml.ERROR_NOT_SUPPORTED is reported unhealthy
// and not watched. If an event wait fails, WatchHealth reports every device
// unhealthy with that failure and returns it. It returns [ErrClosed] after
// Close.
func (g *GPU) WatchHealth(ctx context.Context, unhealthy func(uuid, reason string)) (err error) {
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		return ErrClosed
	}
	g.watchers.Add(1)
	g.mu.Unlock()
	defer g.watchers.Done()

	w, err := g.register()
	for _, r := range w.reports {
		unhealthy(r.uuid, r.reason)
	}
	if err != nil || w.set == nil {
		return err
	}
	defer func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if ferr := free(w.set); ferr != nil {
			err = errors.Join(err, ferr)
		}
	}()

	for ctx.Err() == nil && !g.isClosing() {
		// Not under g.mu: the wait blocks for up to g.waitMs, and NVML
		// allows other calls meanwhile.
		e, ret := w.set.Wait(g.waitMs)
		switch ret {
		case nvml.SUCCESS:
			reason, ok := eventReason(e)
			if !ok {
				continue
			}
			for _, uuid := range g.eventUUIDs(e, w.all) {
				unhealthy(uuid, reason)
			}
		case nvml.ERROR_TIMEOUT:
		default:
			err := &returnError{op: "EventSetWait", ret: ret}
			for _, uuid := range w.all {
				unhealthy(uuid, err.Error())
			}
			return err
		}
	}
	return nil
}

// watch is what register set up.
type watch struct {
	set     nvml.EventSet // nil: nothing to wait for
	all     []string      // UUIDs of every device that could be named
	reports []report      // devices found unhealthy while registering
}

type report struct{ uuid, reason string }

// register creates an event set and registers every device on it.
func (g *GPU) register() (watch, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var w watch

	set, ret := g.lib.EventSetCreate()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED:
		return w, nil
	default:
		return w, &returnError{op: "EventSetCreate", ret: ret}
	}
	n, ret := g.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return w, errors.Join(&returnError{op: "DeviceGetCount", ret: ret}, free(set))
	}

	registered := 0
	for i := range n {
		// A device without a handle or a UUID cannot be reported; Devices
		// shows its Err, and the worker never claims it.
		h, ret := g.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		w.all = append(w.all, uuid)

		supported, ret := h.GetSupportedEventTypes()
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED:
			continue
		default:
			w.reports = append(w.reports, report{uuid, (&returnError{op: "GetSupportedEventTypes", ret: ret}).Error()})
			continue
		}
		mask := uint64(healthEvents) & supported
		if mask == 0 {
			continue
		}
		switch ret := h.RegisterEvents(mask, set); ret {
		case nvml.SUCCESS:
			registered++
		case nvml.ERROR_NOT_SUPPORTED:
			// Too old for health events.
		default:
			w.reports = append(w.reports, report{uuid, (&returnError{op: "RegisterEvents", ret: ret}).Error()})
		}
	}
	if registered == 0 {
		return w, free(set)
	}
	w.set = set
	return w, nil
}

// eventUUIDs names the devices an event is about: its device, or every
// device in all if NVML cannot name it.
func (g *GPU) eventUUIDs(e nvml.EventData, all []string) []string {
	if e.Device == nil {
		return all
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// A MIG event names its parent GPU, which is what Devices lists.
	uuid, ret := e.Device.GetUUID()
	if ret != nvml.SUCCESS {
		return all
	}
	return []string{uuid}
}

func (g *GPU) isClosing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closing
}

// eventReason says why event e makes its device unhealthy, or false if it
// does not.
func eventReason(e nvml.EventData) (string, bool) {
	switch {
	case e.EventType&nvml.EventTypeXidCriticalError != 0:
		if applicationXids[e.EventData] {
			return "", false
		}
		return fmt.Sprintf("Xid %d", e.EventData), true
	case e.EventType&nvml.EventTypeDoubleBitEccError != 0:
		return "double-bit ECC error", true
	default:
		return "", false
	}
}

// free releases set; the caller holds g.mu.
func free(set nvml.EventSet) error {
	if ret := set.Free(); ret != nvml.SUCCESS {
		return &returnError{op: "EventSetFree", ret: ret}
	}
	return nil
}
