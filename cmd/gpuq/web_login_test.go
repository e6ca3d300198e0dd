package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gpuq dev --http-password-file serves the dashboard only to a request
// that carries the file's password, and the commands refuse a dashboard
// beyond loopback without one, or a password too short to guard it.
func TestDashboardLogin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, short := filepath.Join(dir, "good"), filepath.Join(dir, "short")
	if err := os.WriteFile(good, []byte("gpuq-0123456789abcdef\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDev(t, "", "--http-password-file", good)
	url := d.dashboardURL()
	get := func(user, password string, send bool) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if send {
			req.SetBasicAuth(user, password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	if code, _ := get("", "", false); code != http.StatusUnauthorized {
		t.Errorf("the dashboard without a password: %d, want 401", code)
	}
	if code, _ := get("admin", "gpuq-0123456789abcde", true); code != http.StatusUnauthorized {
		t.Errorf("the dashboard with a wrong password: %d, want 401", code)
	}
	if code, body := get("admin", "gpuq-0123456789abcdef", true); code != http.StatusOK || !strings.Contains(body, "gpuq") {
		t.Errorf("the dashboard with the file's password: %d, want 200 and the page:\n%.300s", code, body)
	}

	for _, c := range []struct {
		name string
		args []string
		says string
	}{
		{"all interfaces, no password", []string{"scheduler", "--http", ":0"}, "--http :0 serves beyond this machine"},
		{"an address beyond loopback, no password", []string{"scheduler", "--http", "0.0.0.0:0"}, "give it a password with --http-password-file"},
		{"a short password", []string{"scheduler", "--http", "127.0.0.1:0", "--http-password-file", short}, "give it at least 12"},
		{"a password without a dashboard", []string{"scheduler", "--http-password-file", good}, "without --http"},
		{"no password file", []string{"scheduler", "--http", "0.0.0.0:0", "--http-password-file", filepath.Join(dir, "none")}, "no such file"},
	} {
		r := d.gpuq(c.args...)
		want := exitUsage
		if c.name == "no password file" {
			want = exitFailure
		}
		if r.code != want || !strings.Contains(r.stdout+r.stderr, c.says) {
			t.Errorf("%s: gpuq %s exited %d (want %d), printed:\n%s%s", c.name, strings.Join(c.args, " "), r.code, want, r.stdout, r.stderr)
		}
	}
}
