package web

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/subjects"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures a [Server].
type Config struct {
	// Client reads gpuq; required. The dashboard shows what its
	// connection's credentials may read.
	Client *client.Client
	// Logger receives the server's warnings. Defaults to discarding them.
	Logger *slog.Logger
	// RecentEvents is how many events the dashboard lists. Defaults to 50.
	RecentEvents int
	// UsageDays is how many days, today included, the usage plots cover.
	// Defaults to 14.
	UsageDays int
	// NowFunc returns the time the pages are rendered at. Defaults to
	// time.Now.
	NowFunc func() time.Time
	// Password, when set, is asked of every request (HTTP Basic, any user
	// name): the pages show every job's command, environment and output
	// that Client may read. Empty serves them to whoever connects.
	Password string
}

func (c *Config) validate() error {
	if c.Client == nil {
		return errors.New("web: Config.Client is required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.RecentEvents < 0 || c.UsageDays < 0 {
		return fmt.Errorf("web: RecentEvents (%d) and UsageDays (%d) must not be negative", c.RecentEvents, c.UsageDays)
	}
	if c.RecentEvents == 0 {
		c.RecentEvents = 50
	}
	if c.UsageDays == 0 {
		c.UsageDays = 14
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	return nil
}

// usageTTL is how long a usage report is reused: a report reads the whole
// ledger and the journal of the days it covers. After a job ends it is
// read again, but not more often than every usageMinAge, however many jobs
// end.
const (
	usageTTL    = 15 * time.Second
	usageMinAge = 2 * time.Second
)

// finalTypes are the job event types that end a job, and so change usage.
var finalTypes = map[string]bool{"succeeded": true, "failed": true, "cancelled": true}

// subscriberBuffer is how many events a slow page may fall behind before
// its stream is closed (the browser reconnects and re-reads the page).
const subscriberBuffer = 64

// Server serves the dashboard. It is safe for concurrent use.
type Server struct {
	cfg  Config
	log  *slog.Logger
	tmpl *template.Template

	mu         sync.Mutex
	recent     []eventRow // oldest first, at most cfg.RecentEvents
	following  bool       // Run's consumer is reading the stream
	followErr  string     // why it is not, once it failed
	subs       map[chan eventRow]struct{}
	usage      *usageView // the last usage report, nil until read
	usageAt    time.Time
	usageStale bool // a job ended since it was read
}

// New returns a server over cfg.Client. It returns an error for a Config
// without a Client or with a negative count.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tmpl, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("web: templates: %w", err)
	}
	return &Server{cfg: cfg, log: cfg.Logger.With("component", "web"), tmpl: tmpl, subs: map[chan eventRow]struct{}{}}, nil
}

// Run follows the events stream until ctx ends, keeping the recent events
// and passing each on to the pages that listen. A failed read is logged and
// started again, with the recent events read afresh. It returns nil when
// ctx ends.
func (s *Server) Run(ctx context.Context) error {
	wait := time.Second
	for {
		s.setFollowing(true, "")
		var failure error
		for ev, err := range s.cfg.Client.Events(ctx, client.EventOptions{Last: s.cfg.RecentEvents, Follow: true}) {
			if errors.Is(err, client.ErrBadEvent) {
				s.log.Debug("skipping a message of the events stream", slog.Any("err", err))
				continue
			}
			if err != nil {
				failure = err
				break
			}
			s.publish(rowOf(ev))
			wait = time.Second
		}
		if ctx.Err() != nil {
			s.setFollowing(false, "")
			return nil
		}
		if failure == nil {
			failure = errors.New("the events stream ended")
		}
		s.setFollowing(false, failure.Error())
		s.log.Warn("following the events stream failed; trying again", slog.Any("err", failure), slog.Duration("wait", wait))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

func (s *Server) setFollowing(on bool, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.recent = nil // the read starts again with the last events
	}
	s.following, s.followErr = on, why
}

// publish keeps ev among the recent events and passes it to every
// subscriber; a subscriber too far behind is dropped (its channel closed).
func (s *Server) publish(ev eventRow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Kind == client.EventJob && finalTypes[ev.Type] {
		s.usageStale = true // a job ended: the next usage report is read afresh
	}
	s.recent = append(s.recent, ev)
	if over := len(s.recent) - s.cfg.RecentEvents; over > 0 {
		s.recent = append(s.recent[:0:0], s.recent[over:]...)
	}
	for ch := range s.subs {
		select {
		case ch <- ev:
		default:
			delete(s.subs, ch)
			close(ch)
		}
	}
}

func (s *Server) subscribe() chan eventRow {
	ch := make(chan eventRow, subscriberBuffer)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs[ch] = struct{}{}
	return ch
}

func (s *Server) unsubscribe(ch chan eventRow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subs[ch]; ok {
		delete(s.subs, ch)
		close(ch)
	}
}

// recentEvents returns the recent events, newest first, and whether they
// are being followed (with why not).
func (s *Server) recentEvents() ([]eventRow, bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]eventRow, len(s.recent))
	for i, ev := range s.recent {
		out[len(out)-1-i] = ev
	}
	return out, s.following, s.followErr
}

// Handler returns the dashboard's routes. Every route is a GET (HEAD too);
// any other method is answered 405 Method Not Allowed.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page("dashboard", s.dashboard))
	mux.HandleFunc("GET /parts/live", s.page("live", s.live))
	mux.HandleFunc("GET /parts/usage", s.page("usage", s.usagePart))
	mux.HandleFunc("GET /jobs/{id}", s.page("jobpage", s.jobPage))
	mux.HandleFunc("GET /jobs/{id}/part", s.page("job", s.jobPart))
	mux.HandleFunc("GET /jobs/{id}/output", s.output)
	mux.HandleFunc("GET /events", s.events)
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embedded tree has the folder
	}
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	if s.cfg.Password != "" {
		return secure(login(s.cfg.Password, mux))
	}
	return secure(mux)
}

// secure sets headers that keep the pages to themselves: only their own
// scripts and styles run, and no other site frames them.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// errNotFound is what a view returns for a page that does not exist, and
// errBadRequest for a request that names no page it could have.
var (
	errNotFound   = errors.New("not found")
	errBadRequest = errors.New("bad request")
)

// page renders template name with the data view returns.
func (s *Server) page(name string, view func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, err := view(r)
		if errors.Is(err, errNotFound) {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		if errors.Is(err, errBadRequest) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := s.tmpl.ExecuteTemplate(w, name, data); err != nil {
			s.log.Warn("rendering a page failed", slog.String("page", name), slog.Any("err", err))
		}
	}
}

// sse prepares w for server-sent events.
func sse(w http.ResponseWriter) *http.ResponseController {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return http.NewResponseController(w)
}

// send writes one server-sent event of type typ with v as its JSON data.
func send(w io.Writer, rc *http.ResponseController, typ string, v any) error {
	data, err := json.Marshal(v) // JSON has no newline to break the frame
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, data); err != nil {
		return err
	}
	return rc.Flush()
}

// keepAlive is how often an idle event stream sends a comment, so proxies
// and browsers keep it open.
const keepAlive = 15 * time.Second

// events streams every event as it is published: a "gpuq" event with an
// eventRow. The page fetches the fragments it shows again.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	ch := s.subscribe()
	defer s.unsubscribe(ch)
	rc := sse(w)
	if _, err := io.WriteString(w, "retry: 2000\n: connected\n\n"); err != nil {
		return
	}
	if err := rc.Flush(); err != nil {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-ch:
			if !ok {
				return // fell behind: the browser reconnects and reads the page again
			}
			if err := send(w, rc, "gpuq", ev); err != nil {
				return
			}
		case <-tick.C:
			if _, err := io.WriteString(w, ": idle\n\n"); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

// outputChunk is one chunk of a job's output on /jobs/{id}/output.
type outputChunk struct {
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// outputEnd ends a job's output on /jobs/{id}/output.
type outputEnd struct {
	End       string `json:"end"`
	Truncated bool   `json:"truncated"`
}

// output streams the output of one attempt of a job (?attempt=N, the
// latest by default) as it is written, after the first ?skip=K chunks
// (the ones the page already shows): "chunk" events, then one "end" event,
// or one "failure" event saying why there is no more.
func (s *Server) output(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if err := subjects.CheckToken("job id", r.PathValue("id")); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	j, _, err := s.cfg.Client.Lookup(ctx, "", r.PathValue("id"))
	if errors.Is(err, client.ErrNotFound) {
		http.Error(w, "no such job in the ledger or its history", http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	attempt, skip := 0, 0
	for name, p := range map[string]*int{"attempt": &attempt, "skip": &skip} {
		if v := r.URL.Query().Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				http.Error(w, fmt.Sprintf("%s=%q: want a number from 0", name, v), http.StatusBadRequest)
				return
			}
			*p = n
		}
	}
	rc := sse(w)
	seen := 0
	for ch, err := range s.cfg.Client.Logs(ctx, j, client.LogOptions{Attempt: attempt, Follow: true}) {
		if errors.Is(err, client.ErrBadChunk) {
			continue
		}
		if err != nil {
			_ = send(w, rc, "failure", err.Error()) // the stream ends either way
			return
		}
		if ch.End != "" {
			_ = send(w, rc, "end", outputEnd{End: ch.End, Truncated: ch.Truncated}) // the stream ends either way
			return
		}
		if seen++; seen <= skip {
			continue
		}
		if err := send(w, rc, "chunk", outputChunk{Stream: ch.Stream, Text: string(ch.Data)}); err != nil {
			return
		}
	}
}

// Serve serves h on l until ctx ends, then shuts the server down, ending
// the event streams it holds open. It returns the error that stopped the
// server, or nil after a clean shutdown.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
		BaseContext: func(net.Listener) context.Context { return reqCtx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve the dashboard on %s: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	cancelReqs() // event streams end, so Shutdown need not wait for them
	// An output stream notices within one pull of the logs (5 s).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 6*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
