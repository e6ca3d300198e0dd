package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// A job that names a GPU model ([ledger.Job.GPUModel]) runs only on a host
// whose every GPU is of that model, compared ignoring case, as its
// heartbeat reports it. A host with no devices, or with GPUs of several
// models, matches no model: the worker claims whichever of its GPUs are
// free, so a mixed host could not honour the constraint. Placement,
// backfill reservations, the unplaceable rule and the explanations all ask
// [modelMatches].

// hostModel is the one model of every device of h, or "" when h has no
// devices or several models.
func hostModel(h wire.Heartbeat) string {
	if len(h.Devices) == 0 {
		return ""
	}
	m := h.Devices[0].Model
	for _, d := range h.Devices[1:] {
		if d.Model != m {
			return ""
		}
	}
	return m
}

// modelMatches reports whether a host whose one model is have (see
// hostModel) may run a job asking for model want ("" is any).
func modelMatches(have, want string) bool {
	return want == "" || have != "" && strings.EqualFold(have, want)
}

// maxModelsListed bounds the models a message lists.
const maxModelsListed = 4

// liveModels says which models the live hosts have, for a message: at most
// maxModelsListed, sorted, with mixed hosts said so.
func liveModels(hosts []*hostState) string {
	var models []string
	mixed := 0
	for _, h := range hosts {
		m := hostModel(h.info)
		switch {
		case m == "":
			mixed++
		case !slices.Contains(models, m):
			models = append(models, m)
		}
	}
	slices.Sort(models)
	var parts []string
	for i, m := range models {
		if i == maxModelsListed {
			parts = append(parts, fmt.Sprintf("and %d more", len(models)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%q", m))
	}
	if mixed > 0 {
		parts = append(parts, fmt.Sprintf("%d hosts with no GPUs or several models", mixed))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// widest returns the most devices of a live host that may run a job asking
// for model ("" is any), caching by model in seen; all is that of every
// host.
func (c *Core) widest(model string, all int, seen map[string]int) int {
	if model == "" {
		return all
	}
	key := strings.ToLower(model)
	if n, ok := seen[key]; ok {
		return n
	}
	n := 0
	for _, h := range c.hosts {
		if modelMatches(h.model, model) {
			n = max(n, h.total)
		}
	}
	seen[key] = n
	return n
}

// unplaceableMessage says why no live host can ever fit j, wide being the
// most devices of a live host that may run it.
func (c *Core) unplaceableMessage(gpus int, model string, wide int) string {
	var msg string
	switch {
	case model == "":
		msg = fmt.Sprintf("job needs %d GPUs; the largest live host has %d", gpus, wide)
	case wide == 0:
		msg = fmt.Sprintf("job needs GPU model %q; no live host has it (live hosts have %s)", model, liveModels(c.hostList()))
	default:
		msg = fmt.Sprintf("job needs %d GPUs of model %q; the largest live host with that model has %d", gpus, model, wide)
	}
	return clipReason(msg)
}

// clipReason cuts msg to what a decision's reason may hold
// ([ledger.MaxReasonBytes]), on a character boundary.
func clipReason(msg string) string {
	if len(msg) <= ledger.MaxReasonBytes {
		return msg
	}
	cut := ledger.MaxReasonBytes - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// hostList returns the live hosts, by name.
func (c *Core) hostList() []*hostState {
	out := make([]*hostState, 0, len(c.hosts))
	for _, h := range c.hosts {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b *hostState) int { return strings.Compare(a.name, b.name) })
	return out
}
