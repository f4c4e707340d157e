package dashboard

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// auth requires the token, if one is set, from every request but the
// page and its static files (which hold no data: the page asks for the
// token). It is checked before the route, so that a client without it
// learns nothing, not even which paths exist.
func auth(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/static/") {
			next.ServeHTTP(w, r)
			return
		}
		got := r.URL.Query().Get("token")
		if a := r.Header.Get("Authorization"); a != "" {
			var bearer bool
			if got, bearer = strings.CutPrefix(a, "Bearer "); !bearer {
				got = ""
			}
		}
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="weir"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostCheck guards a server without a token against DNS rebinding: a web
// page whose name an attacker resolves to 127.0.0.1 reaches the server
// with its own name in Host, so a request is answered only if its Host
// is a loopback name or address, the host the server listens on, one of
// allowed, or (for a server listening on every interface) any IP
// address: a name is what a rebinding attack needs, an address typed by
// the user is not one. The refusal is a 403.
func hostCheck(listenHost string, allowed []string, next http.Handler) http.Handler {
	ok := map[string]bool{"localhost": true}
	for _, h := range append([]string{listenHost}, allowed...) {
		if h != "" {
			ok[strings.ToLower(strings.Trim(h, "[]"))] = true
		}
	}
	anyIP := false
	if ip := net.ParseIP(listenHost); ip != nil && ip.IsUnspecified() {
		anyIP = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.ToLower(strings.Trim(host, "[]"))
		switch ip := net.ParseIP(host); {
		case ok[host], strings.HasSuffix(host, ".localhost"):
		case ip != nil && (ip.IsLoopback() || anyIP):
		default:
			writeError(w, http.StatusForbidden, fmt.Sprintf("host %q is not this dashboard's: without a token it answers "+
				"only to a loopback name, its listen address, or the hosts it is told to allow", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// secure adds headers that keep the page self-contained: nothing is
// loaded from elsewhere, no other site may frame it, and a browser sends
// an action (a POST or PATCH) only from the page itself (cross-origin
// requests are refused with 403: http.CrossOriginProtection, from the
// Sec-Fetch-Site and Origin headers browsers send; clients that are not
// browsers send neither and are not affected).
func secure(next http.Handler) http.Handler {
	next = http.NewCrossOriginProtection().Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}
