package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
)

// loginRealm is the realm a browser's login prompt names.
const loginRealm = "gpuq dashboard"

// login answers every request that does not carry the password with 401
// and a Basic challenge, so the browser asks for it; any user name is
// taken. The comparison is of the two passwords' SHA-256 sums in constant
// time, so neither the password's length nor its prefix leaks through
// the time an answer takes.
func login(password string, h http.Handler) http.Handler {
	want := sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, got, ok := r.BasicAuth()
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="`+loginRealm+`", charset="UTF-8"`)
			http.Error(w, "log in to the gpuq dashboard: its password is the one --http-password-file gives the server", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
