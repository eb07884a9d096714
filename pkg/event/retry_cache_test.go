package event

import (
	"encoding/json"
	"testing"
	"time"
)

// Decoding and encoding the same policy again (from the cache) gives what the first time gave,
// and no two results share a NonRetryable list.
func TestRetryPolicyCache(t *testing.T) {
	for _, p := range []RetryPolicy{
		{MaxAttempts: 5, InitialInterval: 250 * time.Millisecond, BackoffCoefficient: 1.5, MaxInterval: time.Minute, OnExhaustion: ExhaustionFailRun},
		{MaxAttempts: 2, InitialInterval: time.Second, BackoffCoefficient: 2, MaxInterval: time.Hour, NonRetryable: []string{"bad_input", "gone"}},
	} {
		first, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		again, err := json.Marshal(p)
		if err != nil || string(again) != string(first) {
			t.Fatalf("encoded again: %s, %v; first: %s", again, err, first)
		}
		var a, b RetryPolicy
		if err := json.Unmarshal(first, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(first, &b); err != nil {
			t.Fatal(err)
		}
		if !a.Equal(p) || !b.Equal(p) {
			t.Fatalf("decoded %+v and %+v, want %+v", a, b, p)
		}
		if len(a.NonRetryable) > 0 {
			a.NonRetryable[0] = "changed"
			if b.NonRetryable[0] == "changed" {
				t.Fatal("two decoded policies share their NonRetryable list")
			}
		}
	}
}
