package ingress

// RoutePatterns returns the pattern of every HTTP route of s, which need not be started.
func RoutePatterns(s *Service) []string {
	_, mux := s.httpHandler()
	return mux.patterns
}
