package flow

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/natstest"
)

// The one decoder of error replies maps each service's codes to the sentinels callers branch
// on, whichever header the ingress's API puts the code in.
func TestReplyErrorMapsCodesToSentinels(t *testing.T) {
	ingressReply := func(header string, e api.IngressError) *nats.Msg {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		return &nats.Msg{Header: nats.Header{header: []string{string(e.Code)}}, Data: b}
	}
	for _, tc := range []struct {
		code api.IngressCode
		want error
	}{
		{api.CodeInvalidJSON, ErrInvalidInput},
		{api.CodeRunNotFound, ErrNotFound},
		{api.CodeHookNotFound, ErrNotFound},
		{api.CodeRunEnded, ErrTerminal},
		{api.CodeRunExists, ErrRunExists},
		{api.CodeDeliveryConflict, ErrDeliveryConflict},
		{api.CodeHookReceived, ErrAlreadyReceived},
		{api.CodeNoWorker, ErrNoWorker},
		{api.CodeRunDamaged, ErrDamaged},
		{api.CodeRunDeleted, ErrRunDeleted},
		{api.CodeScheduleNotFound, ErrScheduleNotFound},
		{api.CodeScheduleExists, ErrScheduleExists},
		{api.CodeBatchNotFound, ErrBatchNotFound},
		{api.CodeBatchExists, ErrBatchExists},
		{api.CodeRateLimited, ErrRateLimited},
		{api.CodeTooManyPending, ErrRateLimited},
	} {
		for _, header := range []string{api.HeaderErrorCode, api.HeaderBatchError} {
			err := replyError(ingress, ingressReply(header, api.IngressError{Code: tc.code, Message: "because"}))
			require.ErrorIs(t, err, tc.want, "%s in %s", tc.code, header)
			require.Contains(t, err.Error(), "because")
		}
	}

	var rl *RateLimitedError
	require.ErrorAs(t, replyError(ingress, ingressReply(api.HeaderErrorCode, api.IngressError{Code: api.CodeTooManyPending, RetryAfter: 3})), &rl)
	require.Equal(t, 3*time.Second, rl.RetryAfter)
	require.True(t, rl.Pending)

	// A code the client does not know is the ingress's error itself; a body that is not JSON
	// is its message.
	var ie *api.IngressError
	require.ErrorAs(t, replyError(ingress, ingressReply(api.HeaderErrorCode, api.IngressError{Code: api.CodeIngressBusy})), &ie)
	plain := &nats.Msg{Header: nats.Header{api.HeaderErrorCode: []string{string(api.CodeRunNotFound)}}, Data: []byte("no run r1")}
	err := replyError(ingress, plain)
	require.ErrorIs(t, err, ErrNotFound)
	require.Contains(t, err.Error(), "no run r1")
	require.NoError(t, replyError(ingress, &nats.Msg{Data: []byte(`{}`)}))

	historyReply := func(code api.Code) *nats.Msg {
		return &nats.Msg{Header: nats.Header{micro.ErrorCodeHeader: []string{string(code)}, micro.ErrorHeader: []string{"why"}}}
	}
	for code, want := range map[api.Code]error{
		api.CodeNotFound: ErrNotFound,
		api.CodeInvalid:  ErrInvalidInput,
		api.CodeDamaged:  ErrDamaged,
		api.CodeDeleted:  ErrRunDeleted,
	} {
		err := replyError(history, historyReply(code))
		require.ErrorIs(t, err, want, code)
		require.Contains(t, err.Error(), "why")
	}
	var ae *api.Error
	require.ErrorAs(t, replyError(history, historyReply("other")), &ae)
	require.NoError(t, replyError(history, &nats.Msg{Data: []byte(`{}`)}))

	var qe *api.QueryError
	b, err := json.Marshal(api.QueryError{Code: api.QueryUnknown, Message: "no such query", Queries: []string{"total"}})
	require.NoError(t, err)
	require.ErrorAs(t, replyError(worker, &nats.Msg{Header: nats.Header{micro.ErrorCodeHeader: []string{"400"}}, Data: b}), &qe)
	require.Equal(t, []string{"total"}, qe.Queries)
}

// A write finding no ingress is retried for a while and then says to start one; a read finding
// no history service says so at once.
func TestTransportWithoutServices(t *testing.T) {
	srv := natstest.RunJetStream(t)
	c, err := Dial(t.Context(), srv.ClientURL(), nil)
	require.NoError(t, err)
	defer c.Close()

	began := time.Now()
	_, err = c.Schedules().List(t.Context())
	require.ErrorIs(t, err, ErrIngressUnavailable)
	require.GreaterOrEqual(t, time.Since(began), noIngressFor)

	began = time.Now()
	_, err = c.Runs(t.Context(), nil)
	require.ErrorIs(t, err, ErrHistoryUnavailable)
	require.Less(t, time.Since(began), noIngressFor)

	_, err = c.Batches().Get(t.Context(), "nope")
	require.True(t, errors.Is(err, ErrIngressUnavailable), err)
}
