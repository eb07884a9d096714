package history

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/lru"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/internal/payload/objstore"
)

// largePayloads is how many payloads too large for the payload store's cache the service keeps
// after reading one, so that the pages of one read (api.SubjectPayload) do not read the object
// again each.
const largePayloads = 2

// largeReads bounds the large payloads read from the store at once: with the largePayloads
// kept, the service holds at most four large payloads' bytes however many clients read.
const largeReads = 2

// payloadReads serves the offloaded payloads clients read (api.SubjectPayload), from the
// FLOW_PAYLOADS object store, opened on first use. It is safe for concurrent use.
type payloadReads struct {
	mu    sync.Mutex
	store *objstore.Store
	// large holds the payloads last read that the store does not cache (over a quarter of its
	// cache), for the next pages of their reads.
	large *lru.Cache[string, []byte]
	// reading holds a slot for each large payload being read from the store (largeReads; made
	// on first use unless set).
	reading chan struct{}
}

// get returns the bytes r refers to, checked against its hash, or an error wrapping
// payload.ErrNotFound. A large payload's read waits for a slot of reading, or for ctx to end.
func (p *payloadReads) get(ctx context.Context, s *Service, r payload.Ref) ([]byte, error) {
	p.mu.Lock()
	if p.store == nil {
		st, err := objstore.Open(ctx, s.js, streams.PayloadsBucket, 0)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		p.store, p.large = st, lru.New[string, []byte](largePayloads)
	}
	if p.reading == nil {
		p.reading = make(chan struct{}, largeReads)
	}
	st, reading := p.store, p.reading
	p.mu.Unlock()
	if b, ok := p.kept(r); ok {
		return b, nil
	}
	large := r.Size > objstore.DefaultCacheBytes/4
	if large {
		select {
		case reading <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting to read payload %s (%d large payloads are being read): %w", r, cap(reading), ctx.Err())
		}
		defer func() { <-reading }()
		if b, ok := p.kept(r); ok { // read by another request while this one waited
			return b, nil
		}
	}
	b, err := st.Get(ctx, r)
	if err != nil {
		return nil, err
	}
	if large {
		p.mu.Lock()
		p.large.Put(r.SHA256, b)
		p.mu.Unlock()
	}
	return b, nil
}

// kept returns large payload r if it is kept.
func (p *payloadReads) kept(r payload.Ref) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.large.Get(r.SHA256)
}

// getPayload answers api.SubjectPayload: a page of the payload the request names.
func (s *Service) getPayload(ctx context.Context, req api.PayloadRequest) (*api.PayloadResponse, error) {
	r, ok := payload.Parse(payload.Ref{SHA256: req.SHA256, Size: req.Size}.JSON())
	if !ok {
		return nil, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("%q (%d bytes) is not a payload reference: the hash is 64 lowercase hex digits, the size not negative", req.SHA256, req.Size)}
	}
	if req.Offset < 0 || req.Offset > r.Size {
		return nil, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("offset %d is outside payload %s", req.Offset, r)}
	}
	b, err := s.payloadReads.get(ctx, s, r)
	if errors.Is(err, payload.ErrNotFound) {
		return nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("offloaded payload %s is not in %s: the payload collector deletes the payloads no retained history refers to (an archived run's are in its archive)", r, streams.PayloadsBucket)}
	}
	if err != nil {
		return nil, err
	}
	return &api.PayloadResponse{Data: b[req.Offset:min(req.Offset+payloadPage(s.nc.MaxPayload()), r.Size)]}, nil
}

// payloadPage is how many bytes of a payload one reply carries when the server's max_payload is
// mp: their base64, in JSON, with room for the headers.
func payloadPage(mp int64) int64 {
	const room = 4 << 10
	if mp <= 2*room {
		return room
	}
	return (mp - room) / 4 * 3
}
