package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// healthTimeout bounds one health probe: connecting, sending and reading the status.
const healthTimeout = 2 * time.Second

const healthUsage = "usage: flowd health URL (an http:// or https:// URL, such as http://127.0.0.1:8420/readyz)"

// health implements `flowd health URL`, the HEALTHCHECK of Flow's FROM-scratch images, which have
// no shell and no curl: it GETs URL within 2 seconds and returns nil on a 2xx status. Otherwise it
// returns an error saying why (the connection failed, the time ran out, or the status and the
// start of the body, such as /readyz's {"ready":false,"reason":"..."}), which main prints before
// exiting with status 1.
func health(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%s", healthUsage)
	}
	u, err := url.Parse(args[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("health: %q is not an http:// or https:// URL; %s", args[0], healthUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	// No proxy: a probe is for the address it names, whatever HTTP_PROXY the container has.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health: %s is unhealthy: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	reason := strings.TrimSpace(string(body))
	if reason == "" {
		reason = "no body"
	}
	return fmt.Errorf("health: %s is unhealthy: %s: %s", u.Redacted(), resp.Status, reason)
}
