package streams

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// SpreadLeaders moves the leadership of at most one history stream of layout l so that the
// servers of a cluster lead about as many history streams each: a partitioned history spreads
// its appends over the servers only while its streams' leaders are spread. JetStream elects each
// stream's leader on its own, and after a server restarts the streams it led stay with the
// others. It asks a stream whose leader leads at least two more history streams than one of the
// stream's current replicas to step down in favour of that replica ($JS.API.STREAM.LEADER.
// STEPDOWN with a preferred placement, nats-server 2.11 and later). It returns the stream it
// moved and the server it preferred, or "" when the leaders are spread (or the history has one
// stream, or the streams are not replicated). One move per call: each changes what the next
// call sees, and the caller (one process: the history service's reconciler) calls it again
// later.
func SpreadLeaders(ctx context.Context, js jetstream.JetStream, l Layout) (stream, preferred string, err error) {
	if !l.Partitioned() {
		return "", "", nil
	}
	type placed struct {
		name, leader string
		current      []string // the replicas that could lead at once
	}
	var all []placed
	leads := map[string]int{}
	for _, name := range l.Streams() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return "", "", fmt.Errorf("reading stream %s: %w", name, err)
		}
		ci := st.CachedInfo().Cluster
		if ci == nil || ci.Leader == "" || len(ci.Replicas) == 0 {
			continue // not replicated, or electing: nothing to move
		}
		p := placed{name: name, leader: ci.Leader}
		leads[ci.Leader]++
		for _, r := range ci.Replicas {
			if r.Current && !r.Offline && !r.Pending {
				p.current = append(p.current, r.Name)
			}
		}
		all = append(all, p)
	}
	for _, p := range all {
		best := ""
		for _, r := range p.current {
			if leads[r]+2 <= leads[p.leader] && (best == "" || leads[r] < leads[best] || leads[r] == leads[best] && r < best) {
				best = r
			}
		}
		if best == "" {
			continue
		}
		if err := stepDown(ctx, js, p.name, best); err != nil {
			return "", "", err
		}
		return p.name, best, nil
	}
	return "", "", nil
}

// stepDown asks stream's leader to step down in favour of server preferred.
func stepDown(ctx context.Context, js jetstream.JetStream, stream, preferred string) error {
	body, err := json.Marshal(map[string]any{"placement": map[string]string{"preferred": preferred}})
	if err != nil {
		return err
	}
	msg, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, body)
	if err != nil {
		return fmt.Errorf("asking stream %s's leader to step down for %s: %w", stream, preferred, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error,omitempty"`
		Success bool                `json:"success"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("asking stream %s's leader to step down: %w", stream, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("asking stream %s's leader to step down for %s: %w", stream, preferred, resp.Error)
	}
	return nil
}

// Leaders returns the server that leads each history stream of l, in partition order ("" for a
// stream without a leader, or not replicated).
func Leaders(ctx context.Context, js jetstream.JetStream, l Layout) ([]string, error) {
	out := make([]string, 0, l.Partitions())
	for _, name := range l.Streams() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("reading stream %s: %w", name, err)
		}
		leader := ""
		if ci := st.CachedInfo().Cluster; ci != nil {
			leader = ci.Leader
		}
		out = append(out, leader)
	}
	return out, nil
}
