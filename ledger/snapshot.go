package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The ledger's records are stored as JSON, one key per account and job.
// Each record is checked on both sides of storage: before it is encoded and
// after it is decoded, so corruption is caught at whichever boundary it
// crossed.

// MarshalAccount encodes a for storage. It fails if a breaks an invariant.
func MarshalAccount(a *Account) ([]byte, error) {
	if err := a.check(); err != nil {
		return nil, fmt.Errorf("encode account %s: %w", a.ID, err)
	}
	return json.Marshal(a)
}

// UnmarshalAccount decodes a stored account and checks it.
func UnmarshalAccount(data []byte) (*Account, error) {
	var a Account
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("decode account: %w", err)
	}
	if err := a.check(); err != nil {
		return nil, fmt.Errorf("decode account %s: %w", a.ID, err)
	}
	return &a, nil
}

// MarshalJob encodes j for storage. It fails if j breaks an invariant.
func MarshalJob(j *Job) ([]byte, error) {
	if err := j.check(); err != nil {
		return nil, fmt.Errorf("encode job %s: %w", j.ID, err)
	}
	return appendJob(nil, j)
}

// UnmarshalJob decodes a stored job and checks it.
func UnmarshalJob(data []byte) (*Job, error) {
	return unmarshalJob(data, nil)
}

// unmarshalJob is UnmarshalJob sharing strings with sh, if not nil.
func unmarshalJob(data []byte, sh *JobDecoder) (*Job, error) {
	var j Job
	if err := decodeJobSharing(data, &j, sh); err != nil {
		return nil, fmt.Errorf("decode job: %w", err)
	}
	if j.Reserved == 0 && bytes.Contains(data, []byte(`"held":`)) /* the key, not the state "held" */ {
		// Stored before the field was named "reserved".
		var legacy struct {
			Held Credits `json:"held"`
		}
		if err := json.Unmarshal(data, &legacy); err != nil {
			return nil, fmt.Errorf("decode job: %w", err)
		}
		j.Reserved = legacy.Held
	}
	if err := j.check(); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", j.ID, err)
	}
	return &j, nil
}

// MarshalPricing encodes the price table for storage.
func MarshalPricing(p *Pricing) ([]byte, error) {
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("encode the price table: %w", err)
	}
	return json.Marshal(p)
}

// UnmarshalPricing decodes a stored price table and checks it.
func UnmarshalPricing(data []byte) (*Pricing, error) {
	var p Pricing
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("decode the price table: %w", err)
	}
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("decode the price table: %w", err)
	}
	return &p, nil
}
