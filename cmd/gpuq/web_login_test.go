package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// gpuq dev --http-tls-cert/--http-tls-key serves the dashboard over HTTPS
// only, with the password; a certificate renewed in place is served from
// the next handshake on without a restart, and a pair replaced by one that
// does not load leaves the last good one served. A certificate without its
// key, or one that does not load, is refused at start.
func TestDashboardTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	password, certFile, keyFile := filepath.Join(dir, "password"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(password, []byte("gpuq-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	first := writeTestCert(t, certFile, keyFile, "gpuq-dashboard-1")
	d := startDev(t, "", "--http-password-file", password, "--http-tls-cert", certFile, "--http-tls-key", keyFile)
	url := d.dashboardURL()
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("the dashboard line says %s, want an https:// URL", url)
	}
	// get fetches the dashboard trusting only the certificate trusted, and
	// returns the status and the certificate the server showed.
	get := func(trusted *x509.Certificate) (int, *x509.Certificate, error) {
		t.Helper()
		pool := x509.NewCertPool()
		pool.AddCert(trusted)
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("admin", "gpuq-0123456789abcdef")
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.TLS.PeerCertificates[0], nil
	}
	if code, got, err := get(first); err != nil || code != http.StatusOK || !got.Equal(first) {
		t.Fatalf("the dashboard over HTTPS: %d, %v; want 200 with the certificate given", code, err)
	}
	resp, err := http.Get(strings.Replace(url, "https://", "http://", 1))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("the dashboard's port over plain HTTP: %d, want 400 (it speaks TLS only)", resp.StatusCode)
	}

	// Renewed in place: the next handshakes, within a few seconds, show it.
	second := writeTestCert(t, certFile, keyFile, "gpuq-dashboard-2")
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, got, err := get(second)
		if err == nil && code == http.StatusOK && got.Equal(second) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the renewed certificate was not served within 20 s: %d, %v", code, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Replaced by a key that is not the certificate's: the renewed one is
	// still served, and the log says why the files were not taken.
	writeTestCert(t, filepath.Join(dir, "other.pem"), keyFile, "gpuq-dashboard-3")
	deadline = time.Now().Add(20 * time.Second)
	for !strings.Contains(d.out.String(), "no longer load") {
		if time.Now().After(deadline) {
			t.Fatalf("gpuq dev did not log the certificate files that no longer load:\n%s", d.out.String())
		}
		if code, got, err := get(second); err != nil || code != http.StatusOK || !got.Equal(second) {
			t.Fatalf("with a broken pair on disk: %d, %v; want the last good certificate served", code, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want int
		says string
	}{
		{"a certificate without its key", []string{"scheduler", "--http", "127.0.0.1:0", "--http-tls-cert", certFile}, exitUsage, "go together"},
		{"a key without its certificate", []string{"scheduler", "--http", "127.0.0.1:0", "--http-tls-key", keyFile}, exitUsage, "go together"},
		{"a certificate without a dashboard", []string{"scheduler", "--http-tls-cert", certFile, "--http-tls-key", keyFile}, exitUsage, "without --http"},
		{"a certificate that does not load", []string{"scheduler", "--http", "127.0.0.1:0", "--http-tls-cert", bad, "--http-tls-key", keyFile}, exitFailure, "--http-tls-cert " + bad},
	} {
		r := d.gpuq(c.args...)
		if r.code != c.want || !strings.Contains(r.stdout+r.stderr, c.says) {
			t.Errorf("%s: gpuq %s exited %d (want %d), printed:\n%s%s", c.name, strings.Join(c.args, " "), r.code, c.want, r.stdout, r.stderr)
		}
	}
}

// writeTestCert writes a new self-signed certificate for 127.0.0.1 to
// certFile and its key to keyFile, each replaced by a rename as renewal
// tools do, and returns the certificate.
func writeTestCert(t *testing.T, certFile, keyFile, name string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for file, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "PRIVATE KEY", Bytes: keyDER}} {
		tmp := file + ".new"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// A dashboard with a password beyond loopback over plain HTTP is served,
// and the log says the password crosses the network in clear; on loopback,
// or with TLS, it says nothing of it.
func TestDashboardPlainHTTPWarns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	password, certFile, keyFile := filepath.Join(dir, "password"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(password, []byte("gpuq-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeTestCert(t, certFile, keyFile, "gpuq-dashboard")
	for _, c := range []struct {
		flags webFlags
		warns bool
	}{
		{webFlags{addr: "0.0.0.0:0", passwordFile: password}, true},
		{webFlags{addr: "127.0.0.1:0", passwordFile: password}, false},
		{webFlags{addr: "0.0.0.0:0", passwordFile: password, certFile: certFile, keyFile: keyFile}, false},
	} {
		var out bytes.Buffer
		ws, err := listenWeb(&c.flags, slog.New(slog.NewTextHandler(&out, nil)))
		if err != nil {
			t.Fatalf("%+v: %v", c.flags, err)
		}
		ws.l.Close()
		if warned := strings.Contains(out.String(), "cross the network in clear"); warned != c.warns {
			t.Errorf("%+v: warned %v, want %v; logged %q", c.flags, warned, c.warns, out.String())
		}
	}
}
