package webui

import (
	"net/http"
	"strings"
)

// The web UI's sign-in: a browser cannot send an Authorization header when it navigates, so
// the sign-in page takes a token once and sets a session cookie (Auth.SignIn).
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

func (s *UI) uiLoginForm(w http.ResponseWriter, r *http.Request) {
	if !s.auth.Enabled() {
		s.uiRender(w, http.StatusOK, "login.html", uiLoginPage{Title: "Sign in", Open: true, Next: "/ui/"})
		return
	}
	s.uiRender(w, http.StatusOK, "login.html", uiLoginPage{Title: "Sign in", Next: localPath(r.URL.Query().Get("next"))})
}

func (s *UI) uiLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<14)
	if err := r.ParseForm(); err != nil {
		s.uiError(w, http.StatusBadRequest, "Bad request", "the sign-in form does not read: "+err.Error())
		return
	}
	next := localPath(r.PostForm.Get("next"))
	if !s.auth.Enabled() {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if !s.auth.SignIn(w, r, strings.TrimSpace(r.PostForm.Get("token"))) {
		s.uiRender(w, http.StatusUnauthorized, "login.html", uiLoginPage{Title: "Sign in", Next: next,
			Error: "This token is not accepted. Use a token of FLOW_INGRESS_TOKENS (or FLOW_READ_TOKENS to read only); under flow dev, the one in .flow/token."})
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *UI) uiLogout(w http.ResponseWriter, r *http.Request) {
	s.auth.SignOut(w, r)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// localPath returns p when it is a path of this service, else the runs list: the sign-in page
// redirects only within the service.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") || strings.ContainsAny(p, "\r\n") {
		return "/ui/"
	}
	return p
}
