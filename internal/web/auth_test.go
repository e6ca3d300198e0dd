package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/client"
)

// With a password, every route asks for it (the static files and the
// event stream too), a wrong one is refused the same way, and the right one
// under any user name is let through to the pages.
func TestPasswordGuardsEveryRoute(t *testing.T) {
	s, err := New(Config{Client: &client.Client{}, Password: "gpuq-correct-horse"})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for _, path := range []string{"/", "/parts/live", "/parts/usage", "/jobs/j1", "/jobs/j1/part", "/jobs/j1/output", "/events", "/static/app.js"} {
		for _, tc := range []struct {
			name      string
			user, pwd string
			send      bool
		}{{name: "no credentials"}, {name: "a wrong password", user: "admin", pwd: "gpuq-correct-hors", send: true},
			{name: "the password with more after it", user: "admin", pwd: "gpuq-correct-horse!", send: true},
			{name: "an empty password", user: "admin", send: true}} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			if tc.send {
				req.SetBasicAuth(tc.user, tc.pwd)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), `Basic realm="gpuq dashboard"`) {
				t.Errorf("GET %s with %s: %d, WWW-Authenticate %q; want 401 and a Basic challenge", path, tc.name, rec.Code, rec.Header().Get("WWW-Authenticate"))
			}
			if rec.Header().Get("Content-Security-Policy") == "" {
				t.Errorf("GET %s with %s: the refusal has no Content-Security-Policy", path, tc.name)
			}
		}
	}
	// The right password reaches the pages (the static file needs no
	// client), under any user name.
	for _, user := range []string{"admin", ""} {
		req := httptest.NewRequest(http.MethodGet, "/static/app.js", nil)
		req.SetBasicAuth(user, "gpuq-correct-horse")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("GET /static/app.js with the password as user %q: %d, want 200", user, rec.Code)
		}
	}
	// Without a password the pages are served to anyone (gpuq dev on
	// loopback).
	open := newTestServer(t).Handler()
	rec := httptest.NewRecorder()
	open.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/static/app.js", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("GET /static/app.js without a password set: %d, want 200", rec.Code)
	}
}
