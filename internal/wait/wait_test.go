package wait_test

import (
	"context"
	"testing"
	"time"

	"github.com/flowrun/flow/internal/wait"
)

func TestFor(t *testing.T) {
	t.Parallel()
	if !wait.For(t.Context(), time.Millisecond) {
		t.Fatal("For reported an interrupted wait although ctx is live")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if wait.For(ctx, time.Hour) {
		t.Fatal("For reported a full wait although ctx had ended")
	}
}
