// Package natsconn dials NATS with Flow's defaults and errors that say what to do.
package natsconn

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultURL is where Flow looks for NATS unless told otherwise (FLOW_NATS_URL).
const DefaultURL = nats.DefaultURL

// ErrUnreachable is wrapped by Dial when no server answers.
var ErrUnreachable = errors.New("flow: NATS unreachable")

// SyncQueue bounds the channel of each synchronous subscription. The default (65,536 messages,
// 512 KiB allocated and zeroed per subscription) made every batched history read (one request,
// at most a few hundred replies) allocate half a megabyte.
var SyncQueue = nats.SyncQueueLen(1024)

// Dial connects to the NATS server at url ("" means DefaultURL) as name, with a bounded
// connect timeout and endless reconnects. A failure wraps ErrUnreachable and says what to do.
func Dial(url, name string, opts ...nats.Option) (*nats.Conn, error) {
	if url == "" {
		url = DefaultURL
	}
	opts = append([]nats.Option{nats.Name(name), nats.Timeout(3 * time.Second), nats.MaxReconnects(-1), SyncQueue}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot connect to %s (%v); start Flow with `flow dev`, or set FLOW_NATS_URL to a running NATS server", ErrUnreachable, url, err)
	}
	return nc, nil
}

// Use returns conn if it is not nil (the caller keeps ownership), else dials url; own reports
// whether the caller must close the returned connection.
func Use(conn *nats.Conn, url, name string) (nc *nats.Conn, own bool, err error) {
	if conn != nil {
		return conn, false, nil
	}
	nc, err = Dial(url, name)
	return nc, err == nil, err
}
