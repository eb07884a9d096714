package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/flow"
)

// The few commands that read the history service's HTTP API (what NATS does not serve, such as
// a run's secrets) reach it at FLOW_HISTORY_URL (default http://127.0.0.1:8420, flow dev's) with
// the bearer token of FLOW_TOKEN, else the one flow dev keeps in $FLOW_DIR/token (.flow/token).

// defaultHistoryURL is where the history service's HTTP API is unless FLOW_HISTORY_URL says
// otherwise.
const defaultHistoryURL = "http://127.0.0.1:8420"

// cliToken returns the bearer token the CLI sends over HTTP, and where it came from; "" when
// there is none.
func cliToken() (token, from string, err error) {
	if t := strings.TrimSpace(os.Getenv("FLOW_TOKEN")); t != "" {
		return t, "FLOW_TOKEN", nil
	}
	file := filepath.Join(envOr("FLOW_DIR", ".flow"), devTokenFile)
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading the bearer token: %w (set FLOW_TOKEN instead)", err)
	}
	return strings.TrimSpace(string(b)), file, nil
}

// historyGet GETs path of the history service's HTTP API into out.
func historyGet(ctx context.Context, path string, out any) error {
	base := strings.TrimRight(envOr("FLOW_HISTORY_URL", defaultHistoryURL), "/")
	token, from, err := cliToken()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return fmt.Errorf("FLOW_HISTORY_URL %q is not a URL: %w", base, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("the history service's HTTP API at %s does not answer (set FLOW_HISTORY_URL): %w", base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading the history service's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error *api.Error `json:"error"`
		}
		msg := resp.Status
		if json.Unmarshal(b, &e) == nil && e.Error != nil {
			msg = e.Error.Message
		}
		switch {
		case resp.StatusCode == http.StatusUnauthorized && token == "":
			msg += " (no token: set FLOW_TOKEN, or run flow dev, which writes one to .flow/token)"
		case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
			msg += " (the token of " + from + ")"
		}
		return fmt.Errorf("flow: history service: %s", msg)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("the history service's answer is not JSON: %w", err)
	}
	return nil
}

// describeWithSecrets is Client.Describe with the run's secrets revealed, over HTTP.
func describeWithSecrets(ctx context.Context, runID string, at uint64) (*flow.RunDescription, error) {
	q := url.Values{"reveal": {"secrets"}}
	if at > 0 {
		q.Set("at", strconv.FormatUint(at, 10))
	}
	var d flow.RunDescription
	if err := historyGet(ctx, "/v1/runs/"+url.PathEscape(runID)+"?"+q.Encode(), &d); err != nil {
		return nil, err
	}
	return &d, nil
}
