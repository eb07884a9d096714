// Package natsconn dials NATS with Flow's defaults and errors that say what to do.
//
// A Config finds the server and the credentials the way the nats CLI does: its own fields
// first, then Flow's environment variables (FLOW_NATS_URL, ...), then the nats CLI's
// (NATS_URL, ...), then a nats CLI context (see context.go), then nats://127.0.0.1:4222.
package natsconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultURL is where Flow looks for NATS when nothing says otherwise.
const DefaultURL = nats.DefaultURL

// ErrUnreachable is wrapped by Dial when no server answers or none accepts the connection
// (credentials refused, TLS failed). Errors in the configuration itself (a missing creds file,
// an unknown context) do not wrap it.
var ErrUnreachable = errors.New("flow: NATS unreachable")

// SyncQueue bounds the channel of each synchronous subscription. The default (65,536 messages,
// 512 KiB allocated and zeroed per subscription) made every batched history read (one request,
// at most a few hundred replies) allocate half a megabyte.
var SyncQueue = nats.SyncQueueLen(1024)

// ConnectTimeout bounds each attempt to connect to one server.
const ConnectTimeout = 3 * time.Second

// Config says which NATS servers to connect to and how. The zero value works: it connects
// like the nats CLI with no flags would. Each field left empty is taken from, in order, the
// environment variable FLOW_NATS_<NAME>, the nats CLI's variable where it has one (NATS_URL,
// NATS_CREDS, ...), and the NATS context (see Context); the environment variables are listed
// with each field.
//
// Load it from the environment with envconfig.Process("FLOW_NATS", &cfg), or nest it in a
// configuration loaded with envconfig.Process("FLOW", ...) as a field tagged `envconfig:"NATS"`.
// The fields carry no envconfig tags on purpose: a tag would make envconfig fall back to the
// unprefixed name (USER, TOKEN, URL) when the prefixed one is unset.
//
// Credentials are one of Creds, NKey, User (with Password) and Token, taken together from the
// first source that sets any of them: setting FLOW_NATS_CREDS replaces a context's user and
// password. A source that sets two kinds is an error. The TLS files are taken one by one.
type Config struct {
	// URL is the server to connect to, or several comma-separated (nats://n1:4222,nats://n2:4222);
	// tls:// requires TLS. Env FLOW_NATS_URL, then NATS_URL, then the context's url. Defaults to
	// "nats://127.0.0.1:4222".
	URL string
	// Creds is the path of a credentials file (.creds: a user JWT and its nkey seed), for
	// servers run with an operator and accounts. Env FLOW_NATS_CREDS, then NATS_CREDS, then the
	// context's creds. Defaults to none.
	Creds string
	// NKey is the path of a file holding a user nkey seed (SU...), for servers that list nkey
	// users. Env FLOW_NATS_NKEY, then NATS_NKEY, then the context's nkey. Defaults to none.
	NKey string
	// User and Password authenticate with a user name and password. Env FLOW_NATS_USER and
	// FLOW_NATS_PASSWORD, then NATS_USER and NATS_PASSWORD, then the context's user and password.
	// Defaults to none.
	User     string
	Password string
	// Token authenticates with a token. Env FLOW_NATS_TOKEN, then the context's token. Defaults
	// to none.
	Token string
	// TLS configures TLS; setting any of it requires TLS of the server.
	TLS TLS
	// Context is the name of a nats CLI context, a JSON file
	// $XDG_CONFIG_HOME/nats/context/<name>.json (XDG_CONFIG_HOME defaults to ~/.config), which
	// supplies what the fields and the environment leave unset. Env FLOW_NATS_CONTEXT, then
	// NATS_CONTEXT. Defaults to the context the nats CLI selected ($XDG_CONFIG_HOME/nats/context.txt,
	// written by `nats context select`), or none if it selected none.
	Context string
	// Origin names, in errors, where a value set in a field came from: the flow command returns
	// its flag for a field name ("URL" gives "--server"). Defaults to the environment variable
	// FLOW_NATS_<NAME> when the value equals it (envconfig put it there), else "Config.<Field>".
	Origin func(field string) string `ignored:"true"`

	// role is the role the connections are for (As), which sets their inbox prefix.
	role string
}

// TLS configures TLS to the NATS servers. The zero value leaves TLS to the URL (tls://) and the
// server (which may require it).
type TLS struct {
	// CA is the path of a PEM file of the certificate authorities that sign the servers'
	// certificates. Env FLOW_NATS_TLS_CA, then NATS_CA, then the context's ca. Defaults to the
	// system's authorities.
	CA string
	// Cert and Key are the paths of the PEM client certificate and its private key, for servers
	// that verify clients; set both or neither. Env FLOW_NATS_TLS_CERT and FLOW_NATS_TLS_KEY, then
	// NATS_CERT and NATS_KEY, then the context's cert and key. Defaults to none.
	Cert string
	Key  string
	// First does the TLS handshake before the server's greeting, for servers configured with
	// handshake_first. Env FLOW_NATS_TLS_FIRST, then the context's tls_first. Defaults to false.
	First bool
}

// setting is one resolved value and where it came from, for errors.
type setting struct {
	value  string
	source string
	level  int // 0 field, 1 FLOW_NATS_*, 2 NATS_*, 3 context, 4 default
}

// resolved is a Config with every source applied.
type resolved struct {
	url                                setting
	creds, nkey, user, password, token setting
	ca, cert, key                      setting
	tlsFirst                           bool
	inboxPrefix                        string
}

// Dial connects to NATS as name (the connection name servers show), with a bounded connect
// timeout (ConnectTimeout per server) and endless reconnects once connected. It reads the
// environment and the NATS context each time it is called. A configuration that cannot work (an
// unknown context, a missing creds file, two kinds of credentials) is an error naming the
// setting and its source; a server that does not answer or refuses the connection gives an
// error wrapping ErrUnreachable that names the URL, where it came from, and what to do.
func (c Config) Dial(name string, opts ...nats.Option) (*nats.Conn, error) {
	r, err := c.resolve()
	if err != nil {
		return nil, err
	}
	return r.dial(name, opts)
}

// Use returns conn if it is not nil (the caller keeps ownership), else dials with c as Dial
// does; own reports whether the caller must close the returned connection.
func (c Config) Use(conn *nats.Conn, name string) (nc *nats.Conn, own bool, err error) {
	if conn != nil {
		return conn, false, nil
	}
	nc, err = c.Dial(name)
	return nc, err == nil, err
}

// Dial connects to the NATS server at url ("" means DefaultURL) as name, with a bounded
// connect timeout and endless reconnects, reading neither the environment nor NATS contexts
// (Config.Dial does). A failure wraps ErrUnreachable and says what to do.
func Dial(url, name string, opts ...nats.Option) (*nats.Conn, error) {
	r := resolved{url: setting{value: url, source: "the URL given"}}
	if url == "" {
		r.url = setting{value: DefaultURL, source: "the default", level: 4}
	}
	return r.dial(name, opts)
}

// resolve applies the environment and the NATS context to c.
func (c Config) resolve() (resolved, error) {
	ctx, err := loadContext(c.contextName())
	if err != nil {
		return resolved{}, err
	}
	var r resolved
	pick := func(field, value, flowEnv, natsEnv, fromCtx, ctxKey string) setting {
		switch {
		case value != "":
			return setting{value: value, source: c.origin(field, value, flowEnv)}
		case os.Getenv(flowEnv) != "":
			return setting{value: os.Getenv(flowEnv), source: flowEnv, level: 1}
		case natsEnv != "" && os.Getenv(natsEnv) != "":
			return setting{value: os.Getenv(natsEnv), source: natsEnv, level: 2}
		case fromCtx != "":
			return setting{value: fromCtx, source: ctx.describe(ctxKey), level: 3}
		}
		return setting{level: 4}
	}
	var cx contextFile
	if ctx != nil {
		cx = ctx.contextFile
	}
	r.url = pick("URL", c.URL, "FLOW_NATS_URL", "NATS_URL", cx.URL, "url")
	if r.url.value == "" {
		r.url = setting{value: DefaultURL, source: "the default", level: 4}
	}
	r.creds = pick("Creds", c.Creds, "FLOW_NATS_CREDS", "NATS_CREDS", ctx.path(cx.Creds), "creds")
	r.nkey = pick("NKey", c.NKey, "FLOW_NATS_NKEY", "NATS_NKEY", ctx.path(cx.NKey), "nkey")
	r.user = pick("User", c.User, "FLOW_NATS_USER", "NATS_USER", cx.User, "user")
	r.password = pick("Password", c.Password, "FLOW_NATS_PASSWORD", "NATS_PASSWORD", cx.Password, "password")
	r.token = pick("Token", c.Token, "FLOW_NATS_TOKEN", "", cx.Token, "token")
	r.ca = pick("TLS.CA", c.TLS.CA, "FLOW_NATS_TLS_CA", "NATS_CA", ctx.path(cx.CA), "ca")
	r.cert = pick("TLS.Cert", c.TLS.Cert, "FLOW_NATS_TLS_CERT", "NATS_CERT", ctx.path(cx.Cert), "cert")
	r.key = pick("TLS.Key", c.TLS.Key, "FLOW_NATS_TLS_KEY", "NATS_KEY", ctx.path(cx.Key), "key")
	switch v := os.Getenv("FLOW_NATS_TLS_FIRST"); {
	case c.TLS.First:
		r.tlsFirst = true
	case v != "":
		if r.tlsFirst, err = parseBool(v); err != nil {
			return resolved{}, fmt.Errorf("flow: FLOW_NATS_TLS_FIRST must be true or false, got %q", v)
		}
	default:
		r.tlsFirst = cx.TLSFirst
	}
	r.inboxPrefix = cx.InboxPrefix
	if r.inboxPrefix == "" && c.role != "" {
		r.inboxPrefix = InboxPrefix(c.role)
	}

	// Credentials come together from the first source that sets any.
	auth := []*setting{&r.creds, &r.nkey, &r.user, &r.token}
	first := 4
	for _, s := range auth {
		if s.value != "" && s.level < first {
			first = s.level
		}
	}
	var kinds []string
	for i, s := range auth {
		switch {
		case s.value == "":
		case s.level > first:
			*s = setting{level: 4}
		default:
			kinds = append(kinds, fmt.Sprintf("%s (from %s)", []string{"creds", "nkey", "user", "token"}[i], s.source))
		}
	}
	if r.user.value == "" {
		r.password = setting{level: 4}
	}
	if len(kinds) > 1 {
		return resolved{}, fmt.Errorf("flow: NATS credentials of more than one kind: %s; give only one of creds, nkey, user and password, or token",
			strings.Join(kinds, ", "))
	}
	return r, nil
}

// contextName is the NATS context to read: named in c or in the environment (with where the
// name came from), else the one the nats CLI selected.
func (c Config) contextName() contextRef {
	switch {
	case c.Context != "":
		return contextRef{name: c.Context, source: c.origin("Context", c.Context, "FLOW_NATS_CONTEXT")}
	case os.Getenv("FLOW_NATS_CONTEXT") != "":
		return contextRef{name: os.Getenv("FLOW_NATS_CONTEXT"), source: "FLOW_NATS_CONTEXT"}
	case os.Getenv("NATS_CONTEXT") != "":
		return contextRef{name: os.Getenv("NATS_CONTEXT"), source: "NATS_CONTEXT"}
	}
	return contextRef{selected: true}
}

// origin names the source of a value set in field.
func (c Config) origin(field, value, env string) string {
	if c.Origin != nil {
		if o := c.Origin(field); o != "" {
			return o
		}
	}
	if os.Getenv(env) == value {
		return env
	}
	return "Config." + field
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "t", "true", "yes":
		return true, nil
	case "0", "f", "false", "no":
		return false, nil
	}
	return false, errors.New("not a boolean")
}

// dial checks the files r names and connects.
func (r resolved) dial(name string, extra []nats.Option) (*nats.Conn, error) {
	o := nats.GetDefaultOptions()
	for _, u := range strings.Split(r.url.value, ",") {
		if u = strings.TrimSpace(u); u != "" {
			o.Servers = append(o.Servers, u)
		}
	}
	opts, err := r.options()
	if err != nil {
		return nil, err
	}
	opts = append([]nats.Option{nats.Name(name), nats.Timeout(ConnectTimeout), nats.MaxReconnects(-1), SyncQueue}, opts...)
	for _, opt := range append(opts, extra...) {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("flow: configuring the NATS connection: %w", err)
		}
	}
	nc, err := o.Connect()
	if err != nil {
		return nil, fmt.Errorf("%w: cannot connect to %s (from %s)%s: %v; %s", ErrUnreachable, redact(r.url.value), r.url.source, r.as(), err, r.hint(err))
	}
	return nc, nil
}

// options turns r's credentials and TLS files into connection options, checking each file
// first so that a wrong path is reported as such.
func (r resolved) options() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case r.creds.value != "":
		data, err := readFile("creds file", r.creds)
		if err != nil {
			return nil, err
		}
		if !strings.Contains(string(data), "-----BEGIN NATS USER JWT-----") {
			return nil, fmt.Errorf("flow: NATS creds file %s (from %s) holds no user JWT; give the .creds file that `nsc generate creds` or your NATS operator issued",
				r.creds.value, r.creds.source)
		}
		opts = append(opts, nats.UserCredentials(r.creds.value))
	case r.nkey.value != "":
		if _, err := readFile("nkey seed file", r.nkey); err != nil {
			return nil, err
		}
		opt, err := nats.NkeyOptionFromSeed(r.nkey.value)
		if err != nil {
			return nil, fmt.Errorf("flow: NATS nkey seed file %s (from %s): %v; it must hold a user seed (a line starting SU), as `nk -gen user` writes",
				r.nkey.value, r.nkey.source, err)
		}
		opts = append(opts, opt)
	case r.user.value != "":
		opts = append(opts, nats.UserInfo(r.user.value, r.password.value))
	case r.token.value != "":
		opts = append(opts, nats.Token(r.token.value))
	}
	if r.ca.value != "" {
		data, err := readFile("TLS CA file", r.ca)
		if err != nil {
			return nil, err
		}
		if !x509.NewCertPool().AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("flow: NATS TLS CA file %s (from %s) holds no PEM certificate; give the CA certificate that signs the servers' certificates",
				r.ca.value, r.ca.source)
		}
		opts = append(opts, nats.RootCAs(r.ca.value))
	}
	switch {
	case r.cert.value != "" && r.key.value != "":
		if _, err := readFile("TLS certificate file", r.cert); err != nil {
			return nil, err
		}
		if _, err := readFile("TLS key file", r.key); err != nil {
			return nil, err
		}
		if _, err := tls.LoadX509KeyPair(r.cert.value, r.key.value); err != nil {
			return nil, fmt.Errorf("flow: NATS TLS client certificate %s (from %s) and key %s (from %s): %v; give a PEM certificate and its private key",
				r.cert.value, r.cert.source, r.key.value, r.key.source, err)
		}
		opts = append(opts, nats.ClientCert(r.cert.value, r.key.value))
	case r.cert.value != "":
		return nil, fmt.Errorf("flow: NATS TLS client certificate %s (from %s) has no key; set the key too (FLOW_NATS_TLS_KEY, --tlskey)", r.cert.value, r.cert.source)
	case r.key.value != "":
		return nil, fmt.Errorf("flow: NATS TLS key %s (from %s) has no client certificate; set the certificate too (FLOW_NATS_TLS_CERT, --tlscert)", r.key.value, r.key.source)
	}
	if r.tlsFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	if r.inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(r.inboxPrefix))
	}
	return opts, nil
}

// readFile reads the file s names, with an error saying which setting named it.
func readFile(what string, s setting) ([]byte, error) {
	data, err := os.ReadFile(s.value)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("flow: NATS %s %s (from %s) does not exist; fix the path, or drop the setting to connect without it", what, s.value, s.source)
	case err != nil:
		return nil, fmt.Errorf("flow: NATS %s %s (from %s): %w", what, s.value, s.source, err)
	}
	return data, nil
}

// as describes the credentials, for errors.
func (r resolved) as() string {
	switch {
	case r.creds.value != "":
		return fmt.Sprintf(" with creds %s (from %s)", r.creds.value, r.creds.source)
	case r.nkey.value != "":
		return fmt.Sprintf(" with nkey %s (from %s)", r.nkey.value, r.nkey.source)
	case r.user.value != "":
		return fmt.Sprintf(" as user %q (from %s)", r.user.value, r.user.source)
	case r.token.value != "":
		return fmt.Sprintf(" with a token (from %s)", r.token.source)
	}
	return ""
}

// hint says what to do about a failed connection.
func (r resolved) hint(err error) string {
	msg := strings.ToLower(err.Error())
	var unknownCA x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	var host x509.HostnameError
	switch {
	case errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		strings.Contains(msg, "authorization violation") || strings.Contains(msg, "authentication"):
		if r.as() == "" {
			return "the server requires credentials: give them with FLOW_NATS_CREDS, FLOW_NATS_NKEY, FLOW_NATS_USER and FLOW_NATS_PASSWORD, FLOW_NATS_TOKEN, the flow command's --creds, --nkey or --user, or a NATS context"
		}
		return "the server refused the credentials: check them, or give others"
	case errors.As(err, &unknownCA) || errors.As(err, &verify) || errors.As(err, &host):
		return "the server's TLS certificate is not trusted: give the CA that signs it with FLOW_NATS_TLS_CA (--tlsca), and connect by the name the certificate is for"
	case errors.Is(err, nats.ErrSecureConnRequired):
		return "the server requires TLS: connect to a tls:// URL, or give a CA with FLOW_NATS_TLS_CA (--tlsca)"
	case errors.Is(err, nats.ErrSecureConnWanted):
		return "TLS is configured but the server does not offer it: unset the TLS settings, or connect to a server with TLS"
	case strings.Contains(msg, "tls") || strings.Contains(msg, "certificate"):
		return "check the TLS settings against the server's: it may require a client certificate (FLOW_NATS_TLS_CERT and FLOW_NATS_TLS_KEY, --tlscert and --tlskey) or the handshake first (FLOW_NATS_TLS_FIRST, --tlsfirst)"
	}
	return "start Flow with `flow dev`, or point FLOW_NATS_URL (or NATS_URL, the flow command's --server, or a NATS context) at a running NATS server"
}

// redact hides the secrets of URLs: the password of nats://user:secret@host, and the token of
// nats://token@host.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "redacted")
		} else {
			u.User = url.User("redacted")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
