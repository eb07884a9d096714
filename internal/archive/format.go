package archive

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/pkg/event"
)

// An archive is one JSON object, its keys in this order:
//
//	{"format":2,
//	 "history":[<the run's envelopes, as a history commit's body (event.MarshalEnvelopes)>],
//	 "payloads":{"<hex SHA-256>":<the payload's JSON, byte for byte>, ...}}
//
// The history comes before the payloads, so that a read of the history alone stops there. The
// payloads are those the history's payload fields refer to (payload.HistoryRefs), each once,
// in the order the history first refers to them; one lost before the run was archived is left
// out. An archive written before archives held payloads is the bare array of envelopes
// (format 1), which is still read. An object in FLOW_ARCHIVE also says its format in its
// metadata (formatKey), so that SelfContained need not read it.

const (
	format      = 2
	formatKey   = "flow-archive-format"
	formatValue = "2"
)

// encode writes the archive of hist to w, reading each payload it refers to with payloads.
func encode(ctx context.Context, w io.Writer, hist []event.Envelope, payloads Payloads) error {
	body, err := event.MarshalEnvelopes(hist)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, `{"format":%d,"history":`, format); err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		return err
	}
	if _, err := io.WriteString(w, `,"payloads":{`); err != nil {
		return err
	}
	first := true
	if payloads != nil {
		for _, r := range payload.HistoryRefs(hist) {
			b, err := payloads(ctx, r)
			if err != nil {
				return fmt.Errorf("reading payload %s for the archive: %w", r, err)
			}
			if b == nil {
				continue // lost: the archive keeps the reference only
			}
			if !json.Valid(b) {
				return fmt.Errorf("payload %s is not JSON; it cannot be archived", r)
			}
			sep := `,"`
			if first {
				sep, first = `"`, false
			}
			if _, err := io.WriteString(w, sep+r.SHA256+`":`); err != nil {
				return err
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
	}
	_, err = io.WriteString(w, "}}")
	return err
}

// decode reads an archive from r: its history, and its payloads when all is set.
func decode(r io.Reader, all bool) (*Contents, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	c, err := firstByte(br)
	if err != nil {
		return nil, err
	}
	if c == '[' { // format 1: the envelopes alone
		b, err := io.ReadAll(br)
		if err != nil {
			return nil, err
		}
		hist, err := event.DecodeEnvelopes(b)
		if err != nil {
			return nil, err
		}
		return &Contents{History: hist}, nil
	}
	dec := json.NewDecoder(br)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.Join(errors.New("an archive is a JSON object or array"), err)
	}
	out := &Contents{SelfContained: true}
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch key, _ := tok.(string); key {
		case "format":
			var f int
			if err := dec.Decode(&f); err != nil {
				return nil, err
			}
			if f != format {
				return nil, fmt.Errorf("archive format %d: this build reads formats 1 and %d; read it with a newer Flow", f, format)
			}
		case "history":
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, err
			}
			if out.History, err = event.DecodeEnvelopes(raw); err != nil {
				return nil, err
			}
			seen = true
			if !all {
				return out, nil
			}
		case "payloads":
			if !all {
				if err := skip(dec); err != nil {
					return nil, err
				}
				continue
			}
			var ps map[string]json.RawMessage
			if err := dec.Decode(&ps); err != nil {
				return nil, err
			}
			out.Payloads = make(map[string][]byte, len(ps))
			for sum, b := range ps {
				if r := payload.RefOf(b); r.SHA256 != sum {
					return nil, fmt.Errorf("the archived payload %s holds bytes whose SHA-256 is %s", sum, r.SHA256)
				}
				out.Payloads[sum] = b
			}
		default:
			if err := skip(dec); err != nil {
				return nil, err
			}
		}
	}
	if !seen {
		return nil, errors.New("the archive holds no history")
	}
	return out, nil
}

func skip(dec *json.Decoder) error {
	var v json.RawMessage
	return dec.Decode(&v)
}

// firstByte returns the first byte of br that is not JSON whitespace, leaving it unread.
func firstByte(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, errors.New("the archive is empty")
			}
			return 0, err
		}
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return b, br.UnreadByte()
	}
}
