package batch

import (
	"math"
	"time"
)

// Bucket is a token bucket: Rate tokens a second, at most Burst held. Operations take one token
// each; in any interval of length t, at most Burst + Rate*t operations start. It is not safe
// for concurrent use.
type Bucket struct {
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

// NewBucket returns a bucket holding burst tokens at now. burst is at least 1.
func NewBucket(rate float64, burst int, now time.Time) *Bucket {
	b := float64(max(burst, 1))
	return &Bucket{rate: rate, burst: b, tokens: b, last: now}
}

// BurstFor is the burst of a job at rate: a tenth of a second's worth, at least 1.
func BurstFor(rate float64) int { return max(1, int(math.Floor(rate/10))) }

// Take takes a token at now and returns how long to wait before the operation it pays for
// may start: 0 if a token was there. A token owed is taken all the same; the next caller
// waits for it.
func (b *Bucket) Take(now time.Time) time.Duration {
	if now.After(b.last) {
		b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}
