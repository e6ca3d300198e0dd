package ledger

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// The job codec: a job's JSON encoding without encoding/json's reflection,
// for the records a takeover decodes by the million and the fold encodes on
// every change. It writes the bytes encoding/json writes for a [JobRecord]
// and reads what encoding/json reads. Anything out of the ordinary (an
// escape in a string, a null, a key in another case, a key twice, an
// unknown key, a number with a fraction) goes to encoding/json, which then
// answers as it always has, errors included.

// appendJob appends j's JSON encoding to b.
func appendJob(b []byte, j *Job) ([]byte, error) {
	n0 := len(b)
	b, ok := appendJobFast(b, j)
	if ok {
		return b, nil
	}
	data, err := marshalJobRecord(j)
	if err != nil {
		return b[:n0], err
	}
	return append(b[:n0], data...), nil
}

// decodeJob decodes data, a job's JSON encoding, into j.
func decodeJob(data []byte, j *Job) error {
	return decodeJobSharing(data, j, nil)
}

// decodeJobSharing is decodeJob taking the job's id and account from sh
// where they are the same.
func decodeJobSharing(data []byte, j *Job, sh *JobDecoder) error {
	var r JobRecord
	if (&jobDecoder{data: data, sh: sh}).record(&r) {
		r.to(j)
		return nil
	}
	return unmarshalJobRecord(data, j)
}

func appendJobFast(b []byte, j *Job) ([]byte, bool) {
	o, r := j.opts(), j.out()
	ok := true
	str := func(key, v string) {
		b = append(b, key...)
		b = appendString(b, v)
	}
	num := func(key string, v int64) {
		b = append(b, key...)
		b = strconv.AppendInt(b, v, 10)
	}
	strs := func(key string, v []string) {
		b = append(b, key...)
		if v == nil {
			b = append(b, "null"...)
			return
		}
		b = append(b, '[')
		for i, s := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, s)
		}
		b = append(b, ']')
	}
	tm := func(key string, t time.Time) {
		b = append(b, key...)
		b = append(b, '"')
		var err error
		if b, err = t.AppendText(b); err != nil {
			ok = false
		}
		b = append(b, '"')
	}
	flag := func(key string) { b = append(b, key...); b = append(b, "true"...) }

	str(`{"id":`, j.ID)
	str(`,"account":`, j.Account)
	num(`,"priority":`, int64(j.Priority))
	num(`,"gpus":`, int64(j.GPUs))
	num(`,"cost":`, int64(j.Cost))
	strs(`,"command":`, j.Command)
	if len(o.Env) > 0 {
		b = append(b, `,"env":{`...)
		keys := make([]string, 0, len(o.Env))
		for k := range o.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, o.Env[k])
		}
		b = append(b, '}')
	}
	num(`,"walltime":`, int64(j.Walltime))
	num(`,"max_attempts":`, int64(j.MaxAttempts))
	if j.Metered {
		flag(`,"metered":`)
	}
	if j.Hold {
		flag(`,"hold":`)
	}
	if o.Name != "" {
		str(`,"name":`, o.Name)
	}
	if o.GPUModel != "" {
		str(`,"gpu_model":`, o.GPUModel)
	}
	if o.Workdir != "" {
		str(`,"workdir":`, o.Workdir)
	}
	if o.ArrayID != "" {
		str(`,"array_id":`, o.ArrayID)
	}
	if o.ArrayIndex != 0 {
		num(`,"array_index":`, int64(o.ArrayIndex))
	}
	if len(o.After) > 0 {
		strs(`,"after":`, o.After)
	}
	if len(o.AfterAny) > 0 {
		strs(`,"after_any":`, o.AfterAny)
	}
	if len(o.WaitingOn) > 0 {
		strs(`,"waiting_on":`, o.WaitingOn)
	}
	if j.Paused {
		flag(`,"paused":`)
	}
	if o.SubmittedPriority != nil {
		num(`,"submitted_priority":`, int64(*o.SubmittedPriority))
	}
	str(`,"state":`, string(j.State))
	num(`,"attempt":`, int64(j.Attempt))
	num(`,"failures":`, int64(j.Failures))
	if j.BusyRefusals != 0 {
		num(`,"busy_refusals":`, int64(j.BusyRefusals))
	}
	if r.Host != "" {
		str(`,"host":`, r.Host)
	}
	if len(r.Devices) > 0 {
		strs(`,"devices":`, r.Devices)
	}
	if j.CancelRequested {
		flag(`,"cancel_requested":`)
	}
	if r.Model != "" {
		str(`,"model":`, r.Model)
	}
	num(`,"reserved":`, int64(j.Reserved))
	num(`,"charged":`, int64(j.Charged))
	if r.ExitCode != nil {
		num(`,"exit_code":`, int64(*r.ExitCode))
	}
	if r.RuntimeMS != 0 {
		num(`,"runtime_ms":`, r.RuntimeMS)
	}
	if r.Reason != "" {
		str(`,"reason":`, string(r.Reason))
	}
	if r.Message != "" {
		str(`,"message":`, r.Message)
	}
	if len(r.Attempts) > 0 {
		data, err := json.Marshal(r.Attempts)
		if err != nil {
			return b, false
		}
		b = append(b, `,"attempts":`...)
		b = append(b, data...)
	}
	b = append(b, `,"submit_seq":`...)
	b = strconv.AppendUint(b, j.SubmitSeq, 10)
	tm(`,"submitted_at":`, j.SubmittedAt)
	if !r.DispatchedAt.IsZero() {
		tm(`,"dispatched_at":`, r.DispatchedAt)
	}
	if !r.StartedAt.IsZero() {
		tm(`,"started_at":`, r.StartedAt)
	}
	if !r.EndedAt.IsZero() {
		tm(`,"ended_at":`, r.EndedAt)
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, j.Seq, 10)
	b = append(b, '}')
	return b, ok
}

// appendString appends s as encoding/json writes it: printable ASCII but
// for the characters it escapes as is, anything else as encoding/json
// encodes it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			data, err := json.Marshal(s)
			if err != nil {
				panic(err) // encoding/json encodes every string
			}
			return append(b, data...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// jobDecoder reads the JSON of a JobRecord as encoding/json would, or
// answers false for anything it leaves to encoding/json.
type jobDecoder struct {
	data []byte
	pos  int
	sh   *JobDecoder // nil for no sharing
}

// JobDecoder decodes job records as [UnmarshalJob] does, with fewer
// strings: a record's id is the one the caller expects, if it is the same,
// and every job of an account shares one string for it. A takeover decodes
// a million records. A JobDecoder is not safe for concurrent use.
type JobDecoder struct {
	id       string // of the record being decoded
	accounts map[string]string
}

// account returns the shared string of account s.
func (d *JobDecoder) account(s []byte) string {
	if a, ok := d.accounts[string(s)]; ok {
		return a
	}
	a := string(s)
	if d.accounts == nil {
		d.accounts = map[string]string{}
	}
	if len(d.accounts) < maxSharedAccounts {
		d.accounts[a] = a
	}
	return a
}

// maxSharedAccounts bounds the accounts a JobDecoder remembers.
const maxSharedAccounts = 1 << 16

// Unmarshal decodes data as [UnmarshalJob] does. If the record's id is id,
// the job's ID is id itself, not a copy.
func (d *JobDecoder) Unmarshal(data []byte, id string) (*Job, error) {
	d.id = id
	defer func() { d.id = "" }()
	return unmarshalJob(data, d)
}

func (d *jobDecoder) ws() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// next skips white space and reports whether c comes next, consuming it.
func (d *jobDecoder) next(c byte) bool {
	d.ws()
	if d.pos < len(d.data) && d.data[d.pos] == c {
		d.pos++
		return true
	}
	return false
}

// rawString returns the bytes of a string without escapes, valid UTF-8.
func (d *jobDecoder) rawString() ([]byte, bool) {
	if !d.next('"') {
		return nil, false
	}
	start := d.pos
	ascii := true
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			s := d.data[start:d.pos]
			d.pos++
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
		d.pos++
	}
	return nil, false
}

func (d *jobDecoder) str(v *string) bool {
	s, ok := d.rawString()
	if ok {
		*v = string(s)
	}
	return ok
}

func (d *jobDecoder) strs(v *[]string) bool {
	if !d.next('[') {
		return false
	}
	if d.next(']') {
		*v = []string{} // as encoding/json: empty, not nil
		return true
	}
	// Gathered on the stack, then copied once into a slice of the size.
	var buf [8]string
	out := buf[:0]
	for {
		var s string
		if !d.str(&s) {
			return false
		}
		out = append(out, s)
		if d.next(']') {
			*v = make([]string, len(out))
			copy(*v, out)
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

func (d *jobDecoder) int(v *int64) bool {
	d.ws()
	neg := d.pos < len(d.data) && d.data[d.pos] == '-'
	if neg {
		d.pos++
	}
	u, ok := d.digits()
	switch {
	case !ok:
		return false
	case neg && u <= 1<<63:
		*v = -int64(u)
	case !neg && u < 1<<63:
		*v = int64(u)
	default:
		return false
	}
	return true
}

// uint reads a number without a sign.
func (d *jobDecoder) uint() (uint64, bool) {
	d.ws()
	return d.digits()
}

// digits reads digits, leaving a number with a fraction, an exponent, a
// leading zero or too many digits to encoding/json.
func (d *jobDecoder) digits() (uint64, bool) {
	start := d.pos
	var u uint64
	for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
		if d.pos-start >= 19 {
			return 0, false
		}
		u = u*10 + uint64(d.data[d.pos]-'0')
		d.pos++
	}
	n := d.pos - start
	if n == 0 || n > 1 && d.data[start] == '0' {
		return 0, false
	}
	if d.pos < len(d.data) {
		if c := d.data[d.pos]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	return u, true
}

func (d *jobDecoder) intField(v *int) bool {
	var x int64
	ok := d.int(&x)
	*v = int(x)
	return ok
}

func (d *jobDecoder) bool(v *bool) bool {
	d.ws()
	rest := d.data[d.pos:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*v = true
		d.pos += 4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*v = false
		d.pos += 5
	default:
		return false
	}
	return true
}

func (d *jobDecoder) time(v *time.Time) bool {
	d.ws()
	start := d.pos
	if _, ok := d.rawString(); !ok {
		return false
	}
	return v.UnmarshalJSON(d.data[start:d.pos]) == nil
}

func (d *jobDecoder) env(v *map[string]string) bool {
	if !d.next('{') {
		return false
	}
	m := map[string]string{}
	if !d.next('}') {
		for {
			var k, s string
			if !d.str(&k) || !d.next(':') || !d.str(&s) {
				return false
			}
			m[k] = s
			if d.next('}') {
				break
			}
			if !d.next(',') {
				return false
			}
		}
	}
	*v = m
	return true
}

// state reads a job state, the known ones without an allocation.
func (d *jobDecoder) state(v *JobState) bool {
	s, ok := d.rawString()
	if !ok {
		return false
	}
	switch JobState(s) {
	case StatePending:
		*v = StatePending
	case StateDispatched:
		*v = StateDispatched
	case StateRunning:
		*v = StateRunning
	case StateSucceeded:
		*v = StateSucceeded
	case StateFailed:
		*v = StateFailed
	case StateCancelled:
		*v = StateCancelled
	case StateRejected:
		*v = StateRejected
	case StateHeld:
		*v = StateHeld
	default:
		*v = JobState(s)
	}
	return true
}

// record reads a whole record into r, false for anything it leaves to
// encoding/json.
func (d *jobDecoder) record(r *JobRecord) bool {
	if !d.next('{') {
		return false
	}
	var seen uint64
	if d.next('}') {
		d.ws()
		return d.pos == len(d.data)
	}
	for {
		key, ok := d.rawString()
		if !ok || !d.next(':') {
			return false
		}
		bit, ok := d.field(string(key), r)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if d.next('}') {
			d.ws()
			return d.pos == len(d.data)
		}
		if !d.next(',') {
			return false
		}
	}
}

// field reads the value of key into r, and returns the key's bit.
func (d *jobDecoder) field(key string, r *JobRecord) (uint64, bool) {
	var i64 int64
	switch key {
	case "id":
		if d.sh == nil {
			return 1 << 0, d.str(&r.ID)
		}
		s, ok := d.rawString()
		if r.ID = d.sh.id; string(s) != d.sh.id {
			r.ID = string(s)
		}
		return 1 << 0, ok
	case "account":
		if d.sh == nil {
			return 1 << 1, d.str(&r.Account)
		}
		s, ok := d.rawString()
		r.Account = d.sh.account(s)
		return 1 << 1, ok
	case "priority":
		return 1 << 2, d.intField(&r.Priority)
	case "gpus":
		return 1 << 3, d.intField(&r.GPUs)
	case "cost":
		ok := d.int(&i64)
		r.Cost = Credits(i64)
		return 1 << 4, ok
	case "command":
		return 1 << 5, d.strs(&r.Command)
	case "env":
		return 1 << 6, d.env(&r.Env)
	case "walltime":
		ok := d.int(&i64)
		r.Walltime = time.Duration(i64)
		return 1 << 7, ok
	case "max_attempts":
		return 1 << 8, d.intField(&r.MaxAttempts)
	case "metered":
		return 1 << 9, d.bool(&r.Metered)
	case "hold":
		return 1 << 10, d.bool(&r.Hold)
	case "name":
		return 1 << 11, d.str(&r.Name)
	case "gpu_model":
		return 1 << 12, d.str(&r.GPUModel)
	case "workdir":
		return 1 << 13, d.str(&r.Workdir)
	case "array_id":
		return 1 << 14, d.str(&r.ArrayID)
	case "array_index":
		return 1 << 15, d.intField(&r.ArrayIndex)
	case "after":
		return 1 << 16, d.strs(&r.After)
	case "after_any":
		return 1 << 17, d.strs(&r.AfterAny)
	case "waiting_on":
		return 1 << 18, d.strs(&r.WaitingOn)
	case "paused":
		return 1 << 19, d.bool(&r.Paused)
	case "submitted_priority":
		var p int
		ok := d.intField(&p)
		r.SubmittedPriority = &p
		return 1 << 20, ok
	case "state":
		return 1 << 21, d.state(&r.State)
	case "attempt":
		return 1 << 22, d.intField(&r.Attempt)
	case "failures":
		return 1 << 23, d.intField(&r.Failures)
	case "busy_refusals":
		return 1 << 24, d.intField(&r.BusyRefusals)
	case "host":
		return 1 << 25, d.str(&r.Host)
	case "devices":
		return 1 << 26, d.strs(&r.Devices)
	case "cancel_requested":
		return 1 << 27, d.bool(&r.CancelRequested)
	case "model":
		return 1 << 28, d.str(&r.Model)
	case "reserved":
		ok := d.int(&i64)
		r.Reserved = Credits(i64)
		return 1 << 29, ok
	case "charged":
		ok := d.int(&i64)
		r.Charged = Credits(i64)
		return 1 << 30, ok
	case "exit_code":
		var c int
		ok := d.intField(&c)
		r.ExitCode = &c
		return 1 << 31, ok
	case "runtime_ms":
		return 1 << 32, d.int(&r.RuntimeMS)
	case "reason":
		var s string
		ok := d.str(&s)
		r.Reason = Reason(s)
		return 1 << 33, ok
	case "message":
		return 1 << 34, d.str(&r.Message)
	case "submit_seq":
		u, ok := d.uint()
		r.SubmitSeq = u
		return 1 << 35, ok
	case "submitted_at":
		return 1 << 36, d.time(&r.SubmittedAt)
	case "dispatched_at":
		return 1 << 37, d.time(&r.DispatchedAt)
	case "started_at":
		return 1 << 38, d.time(&r.StartedAt)
	case "ended_at":
		return 1 << 39, d.time(&r.EndedAt)
	case "seq":
		u, ok := d.uint()
		r.Seq = u
		return 1 << 40, ok
	}
	return 0, false // attempts, and any key not spelled as above
}
