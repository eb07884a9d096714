package bench

import (
	"slices"
	"time"
)

// median returns the median of xs (the mean of the two middle values for an even count), or 0
// for none. It does not change xs.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// quantile returns the q-quantile (0 <= q <= 1) of sorted by nearest rank: the smallest value
// with at least q of the values at or below it. It returns 0 for none.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// latencies summarises durations as p50_ms and p99_ms, prefixed by prefix ("" or "lateness_"
// ...).
func latencies(prefix string, ds []time.Duration) map[string]float64 {
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = millis(d)
	}
	slices.Sort(ms)
	return map[string]float64{prefix + "p50_ms": quantile(ms, 0.50), prefix + "p99_ms": quantile(ms, 0.99)}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// medians returns, for every metric name in any of reps, the median of its values over the
// repetitions that have it.
func medians(reps []map[string]float64) map[string]float64 {
	byName := map[string][]float64{}
	for _, r := range reps {
		for k, v := range r {
			byName[k] = append(byName[k], v)
		}
	}
	out := make(map[string]float64, len(byName))
	for k, vs := range byName {
		out[k] = median(vs)
	}
	return out
}
