package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/wire"
)

// HostStatus is a live GPU host as its latest heartbeat describes it, with
// its GPUs counted by what they are doing.
type HostStatus struct {
	Host string `json:"host"`
	// Simulated says the host's GPUs are go-nvml mock devices (a worker run
	// with --simulate, as gpuq dev runs one), not hardware.
	Simulated bool `json:"simulated"`
	Draining  bool `json:"draining"`
	GPUs      int  `json:"gpus"`
	// Free, Claimed (held by a gpuq job), Busy (used by a process gpuq did
	// not start) and Unhealthy add up to GPUs.
	Free      int            `json:"free"`
	Claimed   int            `json:"claimed"`
	Busy      int            `json:"busy"`
	Unhealthy int            `json:"unhealthy"`
	Model     string         `json:"model"` // of its last device
	Running   []wire.Running `json:"running"`
	Seen      time.Time      `json:"seen"` // when the heartbeat was sent
	Devices   []wire.Device  `json:"devices"`
}

// Kind is "simulated" or "real", with ", draining" for a draining host.
func (h HostStatus) Kind() string {
	kind := "real"
	if h.Simulated {
		kind = "simulated"
	}
	if h.Draining {
		kind += ", draining"
	}
	return kind
}

// HostList is what [Client.Hosts] read.
type HostList struct {
	Hosts []HostStatus // by host name
	// Foreign are the keys whose values are not heartbeats, left out.
	Foreign []*ForeignValueError
}

// statusOf counts h's GPUs.
func statusOf(h wire.Heartbeat) HostStatus {
	v := HostStatus{Host: h.Host, Simulated: h.Simulated, Draining: h.Draining, GPUs: len(h.Devices), Running: h.Running, Seen: h.Time, Devices: h.Devices}
	for _, d := range h.Devices {
		v.Model = d.Model
		switch {
		case !d.Healthy:
			v.Unhealthy++
		case d.Job != "":
			v.Claimed++
		case d.Busy:
			v.Busy++
		default:
			v.Free++
		}
	}
	return v
}

// ErrNoBucket is wrapped by the error of a read of a KV bucket no gpuq
// daemon has created yet.
var ErrNoBucket = errors.New("gpuq: no such bucket")

// Hosts reads every live host's current heartbeat from the hosts bucket,
// in one pass: the latest value of each key, expired and deleted ones left
// out. It needs the right to watch the hosts bucket (an admin's). It
// returns an error wrapping [ErrNoBucket] if no worker or scheduler has
// made the bucket yet.
func (c *Client) Hosts(ctx context.Context) (HostList, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	var list HostList
	hosts, err := c.heartbeats(ctx, &list.Foreign)
	if err != nil {
		return list, err
	}
	list.Hosts = make([]HostStatus, 0, len(hosts))
	for _, h := range hosts {
		list.Hosts = append(list.Hosts, statusOf(h))
	}
	return list, nil
}

// Heartbeats reads every live host's current heartbeat as its worker wrote
// it, sorted by host, as [Client.Hosts] does; values that are not
// heartbeats are reported in foreign and left out.
func (c *Client) Heartbeats(ctx context.Context) (hosts []wire.Heartbeat, foreign []*ForeignValueError, err error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	hosts, err = c.heartbeats(ctx, &foreign)
	return hosts, foreign, err
}

func (c *Client) heartbeats(ctx context.Context, foreign *[]*ForeignValueError) ([]wire.Heartbeat, error) {
	kv, err := c.js.KeyValue(ctx, c.n.HostsBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%s: %w", c.n.HostsBucket(), ErrNoBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", c.n.HostsBucket(), err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", c.n.HostsBucket(), err)
	}
	defer func() { _ = w.Stop() }() // a read-only watch; stopping it loses nothing
	// A heartbeat written while the watch starts can come twice; the later
	// one is the newer.
	byKey := map[string]wire.Heartbeat{}
	for {
		select {
		case e := <-w.Updates():
			if e != nil {
				h, err := wire.DecodeHeartbeat(e.Value())
				if err != nil {
					*foreign = append(*foreign, &ForeignValueError{Key: e.Key(), Revision: e.Revision(), Err: err})
					delete(byKey, e.Key())
					continue
				}
				byKey[e.Key()] = h
				continue
			}
			// The end of the values stored when the watch began.
			out := make([]wire.Heartbeat, 0, len(byKey))
			for _, h := range byKey {
				out = append(out, h)
			}
			slices.SortFunc(out, func(a, b wire.Heartbeat) int { return strings.Compare(a.Host, b.Host) })
			return out, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
