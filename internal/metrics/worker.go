package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/wire"
	"github.com/gpuq/gpuq/worker"
)

// Worker implements worker.Metrics with Prometheus collectors, counts the
// retries of the worker's reports (see [Worker.ReportRetried]), and says
// whether the worker is ready (see [Worker.Ready]). It is safe for
// concurrent use.
type Worker struct {
	maxBeatAge time.Duration
	nowFunc    func() time.Time

	retries  prometheus.Counter
	beats    *prometheus.CounterVec
	started  prometheus.Counter
	ended    *prometheus.CounterVec
	runtime  *prometheus.HistogramVec
	outBytes prometheus.Counter
	dropped  *prometheus.CounterVec

	mu        sync.Mutex
	opened    bool
	simulated bool
	devices   int
	lastBeat  time.Time      // when a heartbeat was last stored
	host      wire.Heartbeat // the last heartbeat tried
	beatErr   error          // the last heartbeat's error
}

var _ worker.Metrics = (*Worker)(nil)

var (
	descWorkerOpen = prometheus.NewDesc("gpuq_worker_gpus_open", "1 once the worker has read its GPUs through NVML (or go-nvml's mock devices when simulated), else 0.", []string{"simulated"}, nil)
	descWorkerGPUs = prometheus.NewDesc("gpuq_worker_gpus", "This host's GPUs by state, as its last heartbeat showed: free, claimed, busy or unhealthy.", []string{"state"}, nil)
	descWorkerRun  = prometheus.NewDesc("gpuq_worker_attempts_running", "Attempts running on this host, as its last heartbeat showed.", nil, nil)
	descWorkerBeat = prometheus.NewDesc("gpuq_worker_heartbeat_timestamp_seconds", "Unix time of the last heartbeat the server stored (absent before the first).", nil, nil)
)

// WorkerConfig configures a [Worker]; its zero value means the defaults.
type WorkerConfig struct {
	// MaxBeatAge is how old the last stored heartbeat may be for the
	// worker to be ready. Defaults to 10s, the worker's default
	// HeartbeatTTL: past it the scheduler counts the host gone.
	MaxBeatAge time.Duration
	// NowFunc is the clock for the heartbeat's age. Defaults to time.Now.
	NowFunc func() time.Time
}

// NewWorker returns a Worker with its collectors registered on reg.
func NewWorker(reg prometheus.Registerer, cfg WorkerConfig) (*Worker, error) {
	if cfg.MaxBeatAge <= 0 {
		cfg.MaxBeatAge = 10 * time.Second
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	w := &Worker{maxBeatAge: cfg.MaxBeatAge, nowFunc: cfg.NowFunc,
		retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuq_worker_report_retries_total",
			Help: "Publishes of started, done or rejected reports that failed and were retried."}),
		beats: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_worker_heartbeats_total",
			Help: "Heartbeats written, by result (stored or failed)."}, []string{"result"}),
		started: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuq_worker_attempts_started_total",
			Help: "Attempts started on this host (their started report stored)."}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_worker_attempts_ended_total",
			Help: "Attempts ended on this host, by end: succeeded, failed, infra (stopped by the infrastructure) or not_run."}, []string{"end"}),
		runtime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gpuq_worker_attempt_runtime_seconds",
			Help: "Wall time of attempts on this host, from start to exit, by end.", Buckets: prometheus.ExponentialBuckets(1, 4, 9)}, []string{"end"}),
		outBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuq_worker_output_bytes_total",
			Help: "Bytes of job output stored in the logs stream."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_worker_output_dropped_bytes_total",
			Help: "Bytes of job output dropped, by reason: truncated (past the attempt's cap) or unstored (the server did not store it)."}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{w.retries, w.beats, w.started, w.ended, w.runtime, w.outBytes, w.dropped, workerGauges{w}} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register the worker's collectors: %w", err)
		}
	}
	return w, nil
}

// ReportRetried counts a report publish that failed and is retried; it is
// the natsbus.WorkerBus ReportRetried hook.
func (w *Worker) ReportRetried(error) { w.retries.Inc() }

// Opened implements worker.Metrics.
func (w *Worker) Opened(simulated bool, devices int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.opened, w.simulated, w.devices = true, simulated, devices
}

// Beat implements worker.Metrics.
func (w *Worker) Beat(h wire.Heartbeat, err error) {
	h.Devices = append([]wire.Device(nil), h.Devices...)
	h.Running = append([]wire.Running(nil), h.Running...)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.host, w.beatErr = h, err
	if err != nil {
		w.beats.WithLabelValues("failed").Inc()
		return
	}
	w.beats.WithLabelValues("stored").Inc()
	w.lastBeat = w.nowFunc()
}

// AttemptStarted implements worker.Metrics.
func (w *Worker) AttemptStarted() { w.started.Inc() }

// AttemptEnded implements worker.Metrics.
func (w *Worker) AttemptEnded(end worker.AttemptEnd, runtime time.Duration) {
	w.ended.WithLabelValues(string(end)).Inc()
	w.runtime.WithLabelValues(string(end)).Observe(max(runtime, 0).Seconds())
}

// OutputSent implements worker.Metrics.
func (w *Worker) OutputSent(bytes int) { w.outBytes.Add(float64(bytes)) }

// OutputDropped implements worker.Metrics.
func (w *Worker) OutputDropped(why worker.OutputDrop, bytes int) {
	w.dropped.WithLabelValues(string(why)).Add(float64(bytes))
}

// Ready reports whether the worker is ready: its GPUs open (NVML, or the
// simulation) and a heartbeat stored within MaxBeatAge. The string says
// what it found; the error why it is not ready.
func (w *Worker) Ready() (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kind := "NVML"
	if w.simulated {
		kind = "simulated"
	}
	switch {
	case !w.opened:
		return "", errors.New("the GPUs are not open yet")
	case w.lastBeat.IsZero() && w.beatErr != nil:
		return "", fmt.Errorf("no heartbeat stored yet: %v", w.beatErr)
	case w.lastBeat.IsZero():
		return "", errors.New("no heartbeat stored yet")
	}
	age := w.nowFunc().Sub(w.lastBeat)
	if age > w.maxBeatAge {
		why := fmt.Sprintf("last heartbeat stored %v ago, more than %v", age.Round(time.Millisecond), w.maxBeatAge)
		if w.beatErr != nil {
			why += fmt.Sprintf(": %v", w.beatErr)
		}
		return "", errors.New(why)
	}
	return fmt.Sprintf("%d GPUs open (%s), heartbeat stored %v ago", w.devices, kind, age.Round(time.Millisecond)), nil
}

// workerGauges collects Worker's gauges from its last reports.
type workerGauges struct{ w *Worker }

func (g workerGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWorkerOpen, descWorkerGPUs, descWorkerRun, descWorkerBeat} {
		ch <- d
	}
}

func (g workerGauges) Collect(ch chan<- prometheus.Metric) {
	w := g.w
	w.mu.Lock()
	opened, simulated, h, last := w.opened, w.simulated, w.host, w.lastBeat
	w.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descWorkerOpen, prometheus.GaugeValue, boolValue(opened), strconv.FormatBool(simulated))
	if h.Host == "" {
		return // no heartbeat yet
	}
	byState := map[string]int{}
	for _, d := range h.Devices {
		byState[GPUState(d)]++
	}
	for _, st := range gpuStates {
		ch <- prometheus.MustNewConstMetric(descWorkerGPUs, prometheus.GaugeValue, float64(byState[st]), st)
	}
	ch <- prometheus.MustNewConstMetric(descWorkerRun, prometheus.GaugeValue, float64(len(h.Running)))
	if !last.IsZero() {
		ch <- prometheus.MustNewConstMetric(descWorkerBeat, prometheus.GaugeValue, float64(last.UnixNano())/1e9)
	}
}
