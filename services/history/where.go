package history

import (
	"errors"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/filter"
)

// listRuns answers a listing: the index entries that pass req's fields, its Where filter and
// keep (nil keeps all). A filter that does not compile is an *api.Error of CodeInvalid whose
// message is the filter's error.
func (s *Service) listRuns(req api.ListRequest, keep func(core.Summary) bool) (api.ListResponse, error) {
	f, err := s.compileWhere(req)
	if err != nil {
		return api.ListResponse{}, err
	}
	return s.index.listWhere(req, func(sum core.Summary) bool {
		return (keep == nil || keep(sum)) && f.Match(sum)
	})
}

// compileWhere compiles req.Where against the search attributes declared by the definitions
// the listing can return: req.Definition alone when it names one, else every definition the
// service knows (FLOW_DEFINITIONS and live workers).
func (s *Service) compileWhere(req api.ListRequest) (*filter.Filter, error) {
	if req.Where == "" {
		return nil, nil
	}
	f, err := filter.Compile(req.Where, s.filterSchema(req.Definition))
	if errors.Is(err, filter.ErrInvalid) {
		return nil, &api.Error{Code: api.CodeInvalid, Message: err.Error()}
	}
	return f, err
}

// filterSchema returns the filter schema of the runs of definition ("" for every definition).
func (s *Service) filterSchema(definition string) filter.Schema {
	var decls []filter.Declared
	for _, d := range s.live.List() {
		if definition == "" || d.Definition == definition {
			decls = append(decls, filter.Declared{Definition: d.Definition, Attributes: d.Attributes})
		}
	}
	return filter.NewSchema(streams.DefaultQueue, decls...)
}
