package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/flowrun/flow/internal/httpserve"
)

// MaxConns caps the connections of a Server: probes and a metrics scraper need few. The
// other bounds are httpserve's defaults.
const MaxConns = 64

// Off is the address that disables a listener.
const Off = "off"

// Server is an HTTP listener serving only Handler(check), for a service that has no HTTP API
// of its own (the scheduler, the worker). A nil *Server is a listener that is off.
type Server struct {
	srv  *http.Server
	addr net.Addr
	done chan struct{}
}

// CheckAddr returns an error unless addr is "", "off" or host:port.
func CheckAddr(addr string) error {
	if addr == "" || addr == Off {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("must be host:port or \"off\", got %q: %w", addr, err)
	}
	return nil
}

// Listen listens on addr (host:port; port 0 picks a free one) and serves Handler(check) until
// Shutdown. An empty addr or "off" serves nothing: it returns a nil *Server.
func Listen(addr string, check Check, logger *slog.Logger) (*Server, error) {
	if addr == "" || addr == Off {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv, limited := httpserve.New(ln, Handler(check), httpserve.Config{MaxConns: MaxConns})
	s := &Server{srv: srv, addr: ln.Addr(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("the health and metrics listener stopped", slog.String("addr", s.Addr()), slog.String("error", err.Error()))
		}
	}()
	return s, nil
}

// Addr is the address the server listens on, or "" when it is off.
func (s *Server) Addr() string {
	if s == nil {
		return ""
	}
	return s.addr.String()
}

// Shutdown stops listening and waits, within ctx, for the requests being answered.
func (s *Server) Shutdown(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}
