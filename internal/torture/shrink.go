package torture

import "time"

// Shrink minimises a failing sequence by delta debugging (Zeller's ddmin, over complements):
// keep lists the indices of the generated operations that fail; fails runs a candidate subset
// (the same seed for everything else) and reports whether it still violates the same
// invariant. It returns the smallest failing subset found before deadline, in the original
// order. fails is never asked about the empty sequence, nor about keep itself.
//
// A candidate that passes by chance (the failure depends on timing) is only a missed
// reduction: the result always failed once.
func Shrink(keep []int, fails func([]int) bool, deadline time.Time) []int {
	cur := append([]int(nil), keep...)
	n := 2
	for len(cur) >= 2 && time.Now().Before(deadline) {
		chunks := split(cur, n)
		reduced := false
		for i := range chunks {
			if !time.Now().Before(deadline) {
				return cur
			}
			cand := without(chunks, i)
			if len(cand) == 0 {
				continue
			}
			if fails(cand) {
				cur = cand
				n = max(n-1, 2)
				reduced = true
				break
			}
		}
		if !reduced {
			if n >= len(cur) {
				break
			}
			n = min(2*n, len(cur))
		}
	}
	return cur
}

// split cuts xs into n chunks of nearly equal size.
func split(xs []int, n int) [][]int {
	var out [][]int
	size, rest := len(xs)/n, len(xs)%n
	for i, start := 0, 0; i < n; i++ {
		end := start + size
		if i < rest {
			end++
		}
		if end > start {
			out = append(out, xs[start:end])
		}
		start = end
	}
	return out
}

// without returns the chunks but chunk i, concatenated.
func without(chunks [][]int, i int) []int {
	var out []int
	for j, c := range chunks {
		if j != i {
			out = append(out, c...)
		}
	}
	return out
}
