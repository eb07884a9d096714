package torture

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/pkg/event"
)

// GenConfig configures the generator. The zero value generates DefaultOps operations of every
// kind, with every fault point of AllPoints.
type GenConfig struct {
	// Ops is the number of operations of a sequence. Defaults to DefaultOps.
	Ops int
	// Exclude leaves out operations of these kinds: a switch to keep exploring while a known
	// bug of one kind masks everything else. Empty by default: every kind is generated.
	Exclude map[Kind]bool
	// Points are the fault points Fault operations arm. Defaults to AllPoints.
	Points []fault.Point
}

// DefaultOps is the length of a generated sequence.
const DefaultOps = 28

// AllPoints lists every fault point of package fault.
func AllPoints() []fault.Point { return fault.All() }

// weights are the relative frequencies of the kinds.
var weights = map[Kind]int{
	KindStart: 22, KindSignal: 9, KindUpdate: 8, KindUpdateWithStart: 3, KindSignalWithStart: 3, KindQuery: 2,
	KindCancel: 4, KindTerminate: 3, KindPauseRun: 4, KindPauseDef: 2, KindReset: 7, KindBatch: 2,
	KindSchedule: 3, KindTrigger: 4, KindBackfill: 2, KindSchedulePause: 1, KindScheduleDelete: 1,
	KindFault: 5, KindKill: 3, KindWait: 10,
}

// The names a sequence draws from: few, so that operations meet the same runs, keys and
// schedules often.
var (
	runIDs        = []string{"r0", "r1", "r2", "r3", "r4", "r5"}
	controlKeys   = []string{"k0", "k1"}
	scheduleNames = []string{"sa", "sb"}
	overlaps      = []string{"skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all"}
)

// Generate returns the operations of sequence n of seed: the same seed and n give the same
// sequence.
func Generate(seed uint64, n int, cfg GenConfig) []Op {
	if cfg.Ops <= 0 {
		cfg.Ops = DefaultOps
	}
	if len(cfg.Points) == 0 {
		cfg.Points = AllPoints()
	}
	g := &gen{r: rand.New(rand.NewPCG(seed, uint64(n))), cfg: cfg, defs: map[string]string{}, inputs: map[string]In{}}
	var kinds []Kind
	total := 0
	for _, k := range Kinds {
		if !cfg.Exclude[k] {
			kinds = append(kinds, k)
			total += weights[k]
		}
	}
	if total == 0 {
		return nil
	}
	ops := make([]Op, 0, cfg.Ops)
	// A few starts first, so that the operations after them meet runs.
	for i := 0; !cfg.Exclude[KindStart] && i < 2+g.r.IntN(3) && len(ops) < cfg.Ops; i++ {
		ops = append(ops, g.op(KindStart, len(ops)))
	}
	for i := len(ops); len(ops) < cfg.Ops; i++ {
		pick := g.r.IntN(total)
		for _, k := range kinds {
			if pick < weights[k] {
				ops = append(ops, g.op(k, i))
				break
			}
			pick -= weights[k]
		}
	}
	return ops
}

type gen struct {
	r   *rand.Rand
	cfg GenConfig
	// started and created are the run IDs and schedules operations named so far, which later
	// operations mostly address.
	started, created []string
	// defs and inputs are the definition and input each run ID was first started with: a
	// later start mostly repeats them, so that conflict and reuse policies decide.
	defs   map[string]string
	inputs map[string]In
	// deliveries and updates already used, for the occasional repeat of one.
	deliveries []Signal
	updates    []Update
}

func (g *gen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

// target returns a run ID to address: mostly one that an operation started.
func (g *gen) target() string {
	if len(g.started) > 0 && g.chance(0.85) {
		return g.pick(g.started)
	}
	return g.pick(runIDs)
}

// newRun returns a run ID to start, and remembers it.
func (g *gen) newRun() string {
	id := g.pick(runIDs)
	if !slices.Contains(g.started, id) {
		g.started = append(g.started, id)
	}
	return id
}

// schedule returns a schedule to address: mostly one that was created.
func (g *gen) schedule() string {
	if len(g.created) > 0 && g.chance(0.85) {
		return g.pick(g.created)
	}
	return g.pick(scheduleNames)
}
func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func (g *gen) input() In {
	in := In{Key: g.pick(controlKeys), Steps: g.r.IntN(3), Flaky: g.chance(0.2), Go: g.chance(0.4), Child: g.chance(0.15)}
	if g.chance(0.4) {
		in.NapMs = 200 + g.r.IntN(1300)
	}
	if g.chance(0.2) {
		in.CAN = 1
	}
	return in
}

func (g *gen) definition() string {
	// Controlled definitions are drawn more often: flow control meets everything else there.
	if g.chance(0.25) {
		return DefPlain
	}
	return g.pick(Definitions)
}

func (g *gen) op(k Kind, i int) Op {
	id := fmt.Sprintf("%d", i)
	switch k {
	case KindStart:
		o := Start{Run: g.newRun(), Def: g.definition(), In: g.input()}
		if def, ok := g.defs[o.Run]; ok && g.chance(0.6) {
			o.Def, o.In = def, g.inputs[o.Run]
		} else if !ok {
			g.defs[o.Run], g.inputs[o.Run] = o.Def, o.In
		}
		if g.chance(0.3) {
			o.OnConflict = g.pick([]string{string(event.ConflictFail), string(event.ConflictUseExisting), string(event.ConflictTerminateExisting)})
		}
		if g.chance(0.35) {
			o.Reuse = g.pick([]string{string(event.ReuseRefuse), string(event.ReuseAllow), string(event.ReuseAllowFailedOnly)})
		}
		switch {
		case g.chance(0.1):
			o.DelayMs = 200 + g.r.IntN(600)
		case g.chance(0.08):
			o.Dedup = "dk" + g.pick([]string{"0", "1"})
		case g.chance(0.06):
			o.Debounce = "db0"
		}
		if g.chance(0.1) {
			o.Priority = 1 + g.r.IntN(3)
		}
		return o
	case KindSignal:
		if len(g.deliveries) > 0 && g.chance(0.1) {
			return g.deliveries[g.r.IntN(len(g.deliveries))] // a retried delivery
		}
		o := Signal{Run: g.target(), Name: SignalGo, Delivery: "d" + id}
		if g.chance(0.2) {
			o.Name = "noise"
		}
		g.deliveries = append(g.deliveries, o)
		return o
	case KindUpdate:
		if len(g.updates) > 0 && g.chance(0.1) {
			return g.updates[g.r.IntN(len(g.updates))]
		}
		o := Update{Run: g.target(), Name: UpdateAdd, Amount: g.r.IntN(10), ID: "u" + id}
		if g.chance(0.15) {
			o.Amount = -1
		}
		if g.chance(0.4) {
			o.Name = UpdateSlow
		}
		g.updates = append(g.updates, o)
		return o
	case KindUpdateWithStart:
		return UpdateWithStart{Run: g.newRun(), Def: g.definition(), In: g.input(), Amount: g.r.IntN(10), ID: "u" + id}
	case KindSignalWithStart:
		return SignalWithStart{Run: g.newRun(), Def: g.definition(), In: g.input(), Delivery: "d" + id}
	case KindQuery:
		return Query{Run: g.target()}
	case KindCancel:
		return Cancel{Run: g.target()}
	case KindTerminate:
		return Terminate{Run: g.target()}
	case KindPauseRun:
		return PauseRun{Run: g.target(), Unpause: g.chance(0.5)}
	case KindPauseDef:
		return PauseDef{Def: g.pick(Definitions), Unpause: g.chance(0.5)}
	case KindReset:
		o := Reset{Run: g.target(), Mode: g.pick([]string{ResetFirst, ResetLastDecision, ResetStep, ResetRerun}), Drop: g.chance(0.2)}
		if g.chance(0.5) {
			o.Request = "rq" + id
		}
		return o
	case KindBatch:
		o := Batch{ID: "b" + id, Op: g.pick([]string{"cancel", "terminate", "signal", "reset", "pause", "unpause"}), From: g.pick(runIDs)}
		if g.chance(0.5) {
			o.Def = g.pick(Definitions)
		}
		return o
	case KindSchedule:
		in := In{NapMs: 500 + g.r.IntN(2000), Key: g.pick(controlKeys)}
		if g.chance(0.3) {
			in.CAN = 1
		}
		name := g.pick(scheduleNames)
		if !slices.Contains(g.created, name) {
			g.created = append(g.created, name)
		}
		return Schedule{Name: name, Def: g.pick([]string{DefPlain, DefBrief, DefQueue}), In: in,
			EveryMs: 1000 + 1000*g.r.IntN(2), Overlap: g.pick(overlaps)}
	case KindTrigger:
		o := Trigger{Name: g.schedule(), Request: "t" + id, Twice: g.chance(0.4)}
		if g.chance(0.5) {
			o.Overlap = g.pick(overlaps)
		}
		return o
	case KindBackfill:
		o := Backfill{Name: g.schedule(), Request: "f" + id, SpanMs: 2000 + g.r.IntN(3000)}
		if g.chance(0.5) {
			o.Overlap = g.pick(overlaps)
		}
		return o
	case KindSchedulePause:
		return SchedulePause{Name: g.schedule(), Unpause: g.chance(0.5)}
	case KindScheduleDelete:
		return ScheduleDelete{Name: g.schedule()}
	case KindFault:
		return Fault{Point: g.cfg.Points[g.r.IntN(len(g.cfg.Points))], Every: 1 + g.r.IntN(3), Times: 1 + g.r.IntN(4)}
	case KindKill:
		return Kill{Role: g.pick(Roles)}
	default:
		return Wait{Ms: 100 + g.r.IntN(1400)}
	}
}
