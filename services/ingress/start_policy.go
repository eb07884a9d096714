package ingress

import (
	"fmt"
	"time"

	ce "github.com/cloudevents/sdk-go/v2/event"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/pkg/event"
)

// policiesOf reads a start's policies from the CloudEvents extensions of ev (api.ExtOnConflict
// and the others). The request ID is the extension flowrequestid, else the event's id.
func (in *input) policiesOf(ev *ce.Event) *api.IngressError {
	p := &in.policies
	p.OnConflict = event.ConflictPolicy(extension(ev, api.ExtOnConflict))
	p.Reuse = event.ReusePolicy(extension(ev, api.ExtReuse))
	p.DedupKey = extension(ev, api.ExtDedupKey)
	p.RequestID = extension(ev, api.ExtRequestID)
	if p.RequestID == "" {
		p.RequestID = ev.ID()
	}
	var err *api.IngressError
	duration := func(ext string) event.Duration {
		v := extension(ev, ext)
		if v == "" || err != nil {
			return 0
		}
		d, perr := time.ParseDuration(v)
		if perr != nil {
			err = &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("CloudEvents extension %s is %q, not a duration; give one such as 30s or 10m", ext, v)}
		}
		return event.Duration(d)
	}
	p.Delay = duration(api.ExtDelay)
	p.DedupWindow = duration(api.ExtDedupWindow)
	if key, period := extension(ev, api.ExtDebounceKey), duration(api.ExtDebouncePeriod); key != "" || period != 0 {
		p.Debounce = &event.Debounce{Key: key, Period: period}
	}
	return err
}

// startParams returns p with in's start policies; the engine validates them.
func (in *input) startParams(p engine.StartParams) engine.StartParams {
	sp := in.policies
	p.OnConflict, p.Reuse, p.Delay = sp.OnConflict, sp.Reuse, time.Duration(sp.Delay)
	p.DedupKey, p.DedupWindow = sp.DedupKey, time.Duration(sp.DedupWindow)
	if sp.Debounce != nil {
		p.Debounce = &engine.Debounce{Key: sp.Debounce.Key, Period: time.Duration(sp.Debounce.Period)}
	}
	p.RequestID = sp.RequestID
	return p
}
