package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Projection is W2's throughput projected on a cluster of Nodes servers with Cores cores each,
// every stream at R3 and the history over Nodes partitions, from one measured variant's W2 and
// ceiling-1000 (Project). Each bound is the workflows per second one resource allows; Projected
// is the least of them, and Bound names it.
type Projection struct {
	Nodes, Cores int
	// CPU: every process's CPU per workflow (Flow's services, and the NATS servers' summed over
	// the replicas) against Nodes*Cores cores.
	CPU float64
	// History: the partitions' streams, each taking at most one stream's ceiling.
	History float64
	// Other: the busiest stream that is not partitioned (a single leader), at one stream's
	// ceiling.
	Other float64
	// OtherStream names that stream.
	OtherStream string
	Projected   float64
	Bound       string
	// OneStream is the projection with the history in one stream, for comparison.
	OneStream float64
}

// ProjectionInputs are the measurements a projection is calculated from.
type ProjectionInputs struct {
	Variant string
	// WfPerS is W2's measured throughput, and Partitions the variant's history streams.
	WfPerS     float64
	Partitions int
	// CPUPerWf is the CPU seconds per workflow of Flow's process and of every NATS server.
	FlowCPUPerWf, NATSCPUPerWf float64
	// HistoryMsgsPerWf and OtherMsgsPerWf are the messages a workflow writes to the history
	// streams and to the busiest other stream (OtherStream).
	HistoryMsgsPerWf, OtherMsgsPerWf float64
	OtherStream                      string
	// StreamCeiling is ceiling-1000's appends per second per ceiling stream, measured in
	// CeilingVariant.
	StreamCeiling  float64
	CeilingVariant string
}

// ProjectionInputsOf reads the inputs of a projection from variant's W2 and ceiling-1000 results.
func ProjectionInputsOf(results []Result, variant string) (ProjectionInputs, error) {
	in := ProjectionInputs{Variant: variant, Partitions: 1}
	// One stream's ceiling is measured on one stream (the variant without its partitions),
	// where that stream has the machine's CPU to itself, else on the variant's streams.
	var kept []string
	for _, tok := range strings.Split(variant, ",") {
		if !strings.HasPrefix(tok, "P") {
			kept = append(kept, tok)
		}
	}
	single := strings.Join(kept, ",")
	var w2, ceil, ceilSingle *Result
	for i := range results {
		r := &results[i]
		if r.System != "flow" || r.Error != "" {
			continue
		}
		switch {
		case r.Variant == variant && r.Workload == "W2":
			w2 = r
		case r.Variant == variant && r.Workload == "ceiling-1000":
			ceil = r
		case r.Variant == single && r.Workload == "ceiling-1000":
			ceilSingle = r
		}
	}
	if w2 == nil || ceil == nil && ceilSingle == nil {
		return in, fmt.Errorf("variant %q needs both W2 and ceiling-1000 results (flowbench -workloads W2,ceiling-1000)", variant)
	}
	runs := w2.Metrics["runs"]
	if runs == 0 || w2.Metrics["history_msgs_per_step"] == 0 {
		return in, fmt.Errorf("variant %q: W2 was measured before flowbench recorded its runs and messages by stream; measure it again", variant)
	}
	for _, tok := range strings.Split(variant, ",") {
		if _, err := fmt.Sscanf(tok, "P%d", &in.Partitions); err == nil {
			break
		}
	}
	in.WfPerS = w2.Metrics["wf_per_s"]
	for name, p := range w2.Processes {
		switch {
		case name == "flow":
			in.FlowCPUPerWf = p.CPUSeconds / runs
		case name == "nats" || strings.HasPrefix(name, "nats-"):
			in.NATSCPUPerWf += p.CPUSeconds / runs
		}
	}
	in.HistoryMsgsPerWf = w2.Metrics["history_msgs_per_step"] * seqSteps
	for name, v := range w2.Metrics {
		if stream, ok := strings.CutPrefix(name, "msgs_per_step_"); ok && v*seqSteps > in.OtherMsgsPerWf {
			in.OtherMsgsPerWf, in.OtherStream = v*seqSteps, stream
		}
	}
	if ceil != nil {
		in.StreamCeiling, in.CeilingVariant = ceil.Metrics["appends_per_s"]/float64(in.Partitions), variant
	}
	if ceilSingle != nil {
		in.StreamCeiling, in.CeilingVariant = ceilSingle.Metrics["appends_per_s"], single
	}
	return in, nil
}

// Project calculates W2's throughput on each cluster size of nodes with cores cores per node:
// CPU scales with the cores, each stream's leader with nothing (a stream appends at one
// stream's measured ceiling however many cores its node has), and the history has one
// partition per node.
func Project(in ProjectionInputs, nodes []int, cores int) []Projection {
	out := make([]Projection, 0, len(nodes))
	for _, n := range nodes {
		p := Projection{Nodes: n, Cores: cores, OtherStream: in.OtherStream}
		p.CPU = float64(n*cores) / (in.FlowCPUPerWf + in.NATSCPUPerWf)
		p.History = float64(n) * in.StreamCeiling / in.HistoryMsgsPerWf
		p.Other = math.Inf(1)
		if in.OtherMsgsPerWf > 0 {
			p.Other = in.StreamCeiling / in.OtherMsgsPerWf
		}
		p.Projected, p.Bound = p.CPU, "CPU"
		if p.History < p.Projected {
			p.Projected, p.Bound = p.History, "history streams"
		}
		if p.Other < p.Projected {
			p.Projected, p.Bound = p.Other, in.OtherStream
		}
		p.OneStream = min(p.CPU, p.History/float64(n), p.Other)
		out = append(out, p)
	}
	return out
}

// WriteProjection writes the inputs and the projections as Markdown.
func WriteProjection(w io.Writer, in ProjectionInputs, ps []Projection) error {
	_, err := fmt.Fprintf(w, "From %s: W2 %.0f wf/s on %d history stream(s); CPU per workflow %.2f ms Flow + %.2f ms NATS (all replicas); "+
		"messages per workflow %.1f history, %.1f %s (the busiest other stream); one stream's ceiling %.0f appends/s (ceiling-1000 of %s).\n\n",
		in.Variant, in.WfPerS, in.Partitions, in.FlowCPUPerWf*1000, in.NATSCPUPerWf*1000, in.HistoryMsgsPerWf, in.OtherMsgsPerWf,
		in.OtherStream, in.StreamCeiling, in.CeilingVariant)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "| nodes x cores | CPU bound | history bound (one partition per node) | busiest other stream bound | projected W2 | bound by | with one history stream |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, p := range ps {
		if _, err := fmt.Fprintf(w, "| %d x %d | %.0f wf/s | %.0f wf/s | %.0f wf/s | %.0f wf/s | %s | %.0f wf/s |\n",
			p.Nodes, p.Cores, p.CPU, p.History, p.Other, p.Projected, p.Bound, p.OneStream); err != nil {
			return err
		}
	}
	return nil
}
