package ledger

import "fmt"

// Quote returns what submission s would reserve under price table p (nil
// when none is set), exactly as the fold computes it at submit: a fixed cost
// as given, once the table's fixed-cost policy allows it; for a metered job,
// gpus × walltime (rounded up to the second) × the table's highest price.
// A submission the pricing refuses returns the reason and why
// ([ReasonMeteredOnly], [ReasonBelowPriceFloor], [ReasonNoPrice],
// [ReasonOverflow]). Whether the account can pay is not its concern.
// Defaults (walltime) are filled in first, as the fold does.
func (p *Pricing) Quote(s Submit) (Credits, Reason, string) {
	s = s.WithDefaults()
	if reason, msg := p.fixedCostProblem(s); reason != "" {
		return 0, reason, msg
	}
	if !s.Metered {
		return s.Cost, "", ""
	}
	price := p.MaxPrice()
	if price == 0 {
		return 0, ReasonNoPrice, "a metered job needs a price table with a price above 0, and there is none; give a cost, or ask an admin to set prices"
	}
	cost, ok := gpuSecondsCost(s.GPUs, ceilSeconds(s.Walltime), price)
	if !ok {
		return 0, ReasonOverflow, fmt.Sprintf("%d GPUs for %v at %d credits per GPU-hour pass the limit of %d credits", s.GPUs, s.Walltime, price, MaxCredits)
	}
	return cost, "", ""
}
