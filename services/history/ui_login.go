package history

import (
	"net/http"
	"strings"
	"time"
)

// The web UI's sign-in: a browser cannot send an Authorization header when it navigates, so
// the sign-in page takes a token once and sets a session cookie (httpauth.go).
//
//	GET  /ui/login    the sign-in form (?next= the page to go back to)
//	POST /ui/login    token=...&next=...: sets the session cookie, or shows the form again
//	POST /ui/logout   clears the session cookie

// uiLoginPage is the data of the sign-in page.
type uiLoginPage struct {
	Title, Next, Error string
	// Open is set when no token is configured: there is nothing to sign in to.
	Open bool
}

func (s *Service) uiLoginForm(w http.ResponseWriter, r *http.Request) {
	if !s.auth.enabled() {
		s.uiRender(w, http.StatusOK, "login.html", uiLoginPage{Title: "Sign in", Open: true, Next: "/ui/"})
		return
	}
	s.uiRender(w, http.StatusOK, "login.html", uiLoginPage{Title: "Sign in", Next: localPath(r.URL.Query().Get("next"))})
}

func (s *Service) uiLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<14)
	if err := r.ParseForm(); err != nil {
		s.uiError(w, http.StatusBadRequest, "Bad request", "the sign-in form does not read: "+err.Error())
		return
	}
	next := localPath(r.PostForm.Get("next"))
	if !s.auth.enabled() {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	acc, token := s.auth.token(strings.TrimSpace(r.PostForm.Get("token")))
	if acc == accessNone {
		s.uiRender(w, http.StatusUnauthorized, "login.html", uiLoginPage{Title: "Sign in", Next: next,
			Error: "This token is not accepted. Use a token of FLOW_INGRESS_TOKENS (or FLOW_READ_TOKENS to read only); under flow dev, the one in .flow/token."})
		return
	}
	now := time.Now()
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.auth.newSession(token, now), Path: "/", Expires: now.Add(s.auth.ttl),
		MaxAge: int(s.auth.ttl / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Service) uiLogout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// overTLS reports whether the browser reached the service over TLS (directly, or through a
// proxy that says so).
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// localPath returns p when it is a path of this service, else the runs list: the sign-in page
// redirects only within the service.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") || strings.ContainsAny(p, "\r\n") {
		return "/ui/"
	}
	return p
}
