#!/usr/bin/env bash
# Compares the end-to-end benchmarks of two revisions on this machine: builds the test binary of
# ./services/worker at each, then alternates them for ROUNDS rounds (W2 throughput, W1 latency,
# signal round trip; sync=default), so that both see the same noise, and prints the medians and
# the median of the per-round ratios.
#
#   scripts/bench-compare.sh BEFORE [AFTER] [ROUNDS]   # AFTER defaults to the working tree, ROUNDS to 8
set -euo pipefail
before=${1:?usage: scripts/bench-compare.sh BEFORE [AFTER] [ROUNDS]}
after=${2:-}
rounds=${3:-8}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/before" >/dev/null 2>&1 || true; git -C "$root" worktree remove --force "$work/after" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

build() { # build REV NAME: the worker package's test binary at REV ("" = the working tree)
	local dir=$root
	if [ -n "$1" ]; then
		git -C "$root" worktree add --detach "$work/$2" "$1" >/dev/null 2>&1
		dir=$work/$2
	fi
	(cd "$dir" && go test -c -o "$work/$2.test" ./services/worker)
}
build "$before" before
build "$after" after

out=$work/rounds.txt
for i in $(seq 1 "$rounds"); do
	for name in before after; do
		bin=$work/$name.test
		w2=$("$bin" -test.run '^$' -test.bench 'TenStepThroughput/sync=default' -test.benchtime=1x 2>&1 | awk '/^Benchmark/ {print $7, $5}')
		w1=$("$bin" -test.run '^$' -test.bench 'TenStepLatency/sync=default' -test.benchtime=400x 2>&1 | awk '/^Benchmark/ {print $9, $11, $5, $7}')
		rt=$("$bin" -test.run '^$' -test.bench 'SignalRoundTrip' -test.benchtime=300x 2>&1 | awk '/^Benchmark/ {print $5, $7}')
		echo "$name W2 $w2" >>"$out"
		echo "$name W1 $w1" >>"$out"
		echo "$name RT $rt" >>"$out"
		echo "round $i $name: W2 $w2 | W1 $w1 | RT $rt" >&2
	done
done

python3 - "$out" <<'PY'
import collections, statistics, sys
labels = {"W2": ["runs/s", "msgs/step"], "W1": ["p50-ms", "p99-ms", "ms/step", "msgs/step"], "RT": ["p50-ms", "p99-ms"]}
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    name, kind, *vals = line.split()
    rows[kind][name].append([float(v) for v in vals])
print(f"{'':16} {'before':>10} {'after':>10} {'paired':>8}")
for kind, names in labels.items():
    b, a = rows[kind]["before"], rows[kind]["after"]
    for i, label in enumerate(names):
        mb, ma = statistics.median(r[i] for r in b), statistics.median(r[i] for r in a)
        paired = statistics.median(y[i] / x[i] for x, y in zip(b, a))
        print(f"{kind + ' ' + label:16} {mb:10.4g} {ma:10.4g} {paired:8.3f}")
PY
