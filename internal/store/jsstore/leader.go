package jsstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// leaderReader reads single messages of a stream through the JetStream API's message get
// ($JS.API.STREAM.MSG.GET.<stream>), which only the stream's leader answers, unlike direct gets:
// what it returns includes every acknowledged commit. Each read is one request; use it for the
// few messages a replica may lack, not for whole histories.
type leaderReader struct {
	nc     *nats.Conn
	stream string
}

type msgGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
}

type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject  string    `json:"subject"`
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// codeNoMessage is the API error code of a get that matched no message.
const codeNoMessage = 10037

// next returns the first message on subject at stream sequence seq or later, or nil.
func (l leaderReader) next(ctx context.Context, subject string, seq uint64) (*jetstream.RawStreamMsg, error) {
	return l.get(ctx, msgGetRequest{Seq: max(seq, 1), NextFor: subject})
}

// last returns the last message on subject, or nil.
func (l leaderReader) last(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	return l.get(ctx, msgGetRequest{LastFor: subject})
}

func (l leaderReader) get(ctx context.Context, req msgGetRequest) (*jetstream.RawStreamMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	reply, err := l.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+l.stream, body)
	if err != nil {
		return nil, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("decoding a message get reply: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == codeNoMessage {
			return nil, nil
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, fmt.Errorf("a message get reply holds no message")
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("decoding the headers of stream message %d: %w", m.Sequence, err)
		}
	}
	return m, nil
}
