package ledger

import "fmt"

// admin applies an account administration command. An op id already applied
// to the account with the same terms is a duplicate and changes nothing; with
// other terms it is rejected.
func (t *tx) admin(c Admin) {
	a := t.s.Accounts[c.Account]
	reject := func(r Reason, format string, args ...any) {
		t.accountEvent(c, a, AccountEvent{Type: EventRejected, Reason: r, Message: fmt.Sprintf(format, args...)})
	}
	if err := c.Validate(); err != nil {
		if checkID("account", c.Account) != nil {
			t.emit(InvalidEvent{Reason: ReasonFor(err), Message: "admin command rejected: " + err.Error()})
			return
		}
		reject(ReasonFor(err), "%s %s rejected: %v", c.Op, c.ID, err)
		return
	}
	if a != nil {
		if prev, ok := a.recentOp(c.ID); ok {
			if prev == c {
				t.accountEvent(c, a, AccountEvent{Type: EventIgnored, Reason: ReasonDuplicate,
					Message: fmt.Sprintf("op %s was already applied", c.ID)})
			} else {
				reject(ReasonDuplicateConflict, "op id %s was used for another %s command; use a new id", c.ID, prev.Op)
			}
			return
		}
	}
	if c.Op == OpCreate {
		if a != nil {
			reject(ReasonAccountExists, "account %s already exists", c.Account)
			return
		}
		a = &Account{ID: c.Account, Weight: 1, Created: t.at, Refill: Refill{Last: t.at}}
		t.s.Accounts[a.ID] = a
		t.created = append(t.created, a)
		t.changedAccount(a)
		a.Balance = c.Balance
		t.journal(a, Entry{Kind: EntryGrant, OpID: c.ID, Amount: c.Balance})
		t.applied(c, a, EventCreated, fmt.Sprintf("account %s created with %d credits", a.ID, a.Balance))
		return
	}
	if a == nil {
		reject(ReasonUnknownAccount, "account %s does not exist; create it first", c.Account)
		return
	}
	switch c.Op {
	case OpGrant:
		t.touch(a)
		b, ok := addCredits(a.Balance, c.Amount)
		switch {
		case !ok:
			reject(ReasonOverflow, "grant of %d to balance %d would pass the limit of %d credits", c.Amount, a.Balance, MaxCredits)
			return
		case b < a.Reserved:
			reject(ReasonInsufficientCredits, "taking %d would leave balance %d below the %d reserved by unfinished jobs", -c.Amount, b, a.Reserved)
			return
		}
		a.Balance = b
		t.journal(a, Entry{Kind: EntryGrant, OpID: c.ID, Amount: c.Amount})
		t.applied(c, a, EventGranted, fmt.Sprintf("granted %d; balance %d", c.Amount, a.Balance))
	case OpLimits:
		t.changedAccount(a)
		a.Limits = c.Limits
		t.applied(c, a, EventLimitsSet, fmt.Sprintf("max_running_jobs %d, max_running_gpus %d (0 is no cap)", c.Limits.MaxRunningJobs, c.Limits.MaxRunningGPUs))
	case OpRefill:
		t.touch(a) // earn at the old rate up to now before the new one applies
		a.Refill = Refill{RatePerHour: c.RatePerHour, Cap: c.Cap, Last: t.at}
		t.applied(c, a, EventRefillSet, fmt.Sprintf("refill %d credits per hour up to %d", c.RatePerHour, c.Cap))
	case OpWeight:
		t.changedAccount(a)
		a.Weight = c.Weight
		t.applied(c, a, EventWeightSet, fmt.Sprintf("fair-share weight %d", c.Weight))
	}
}

// applied records a successful admin command on its account and announces it.
func (t *tx) applied(c Admin, a *Account, typ EventType, msg string) {
	a.rememberOp(c)
	t.accountEvent(c, a, AccountEvent{Type: typ, Message: msg})
}

func (t *tx) accountEvent(c Admin, a *Account, e AccountEvent) {
	e.Account, e.OpID, e.Op = c.Account, c.ID, c.Op
	if a != nil {
		e.Balance, e.Reserved, e.Available = a.Balance, a.Reserved, a.Available()
	}
	t.emit(e)
}
