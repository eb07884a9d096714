package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The architecture's map: Flow's rooms, each with one job, and the import rules between them.
// docs/architecture.md describes each room (what it owns: streams, buckets, subjects) in prose;
// this file is the part of the map a test can hold to.
//
//	SDK          pkg/flow, pkg/flow/... but pkg/flow/worker, and the SDK-internal internal/sdk:
//	             what a workflow author imports (client, workflow context, registration,
//	             options, errors). It reaches the services over NATS request/reply and holds
//	             none of their machinery.
//	SDK worker   pkg/flow/worker: runs an author's workflows in the author's process, a facade
//	             over services/worker, the one service it imports.
//	testkit      pkg/flowtest: runs workflows on the engine and the in-memory store, in tests.
//	pure core    pkg/event, internal/core and their pure helpers: the event catalogue, the
//	             snapshot, decision validation and replay comparison. No I/O, no transport.
//	engine       internal/engine: the replay loop over the store, host and payload ports.
//	backend      internal/store/..., internal/jshost, internal/backend/... (its streams package),
//	             the payload object store and the bucket repositories: JetStream behind the
//	             engine's ports, and the names of every stream, bucket and subject.
//	services     services/history, services/ingress, services/scheduler, services/worker: one
//	             process role each, wired from the backend.
//	roots        cmd/..., internal/cli (`flow dev` runs every service in one process), the
//	             harnesses (internal/bench, internal/torture) and the test helpers that start a
//	             service (internal/ingresstest, internal/historytest): they compose the services
//	             and may import any of them.
//
// The rules bind the imports of non-test files: a package's tests may reach further (a service's
// end-to-end tests start the other services; the engine's tests run on JetStream). A transitive
// rule forbids a dependency by any path; a direct rule forbids the import itself (enough where
// every way out of the room passes through another bound package).
//
// Every edge that breaks a rule today is listed, with its reason, in knownViolations below: the
// test fails on any other, and on an entry that no longer occurs (delete it). The list only
// shrinks.
var rules = []rule{
	{
		name: "sdk",
		doc: "The SDK imports no server package: not the engine, the stores, the streams, the JetStream " +
			"host, liveness, the backend, the payload object store, the bucket repositories, an embedded " +
			"NATS server, a service, nor nats.go's jetstream package.",
		from:       []string{"pkg/flow", "pkg/flow/...", "internal/sdk/..."},
		except:     []string{"pkg/flow/worker/..."},
		deny:       serverPackages,
		transitive: true,
	},
	{
		name: "sdk-worker",
		doc: "The SDK's worker is a facade over services/worker, the one service it may import: an author " +
			"runs a worker without naming a service.",
		from: []string{"pkg/flow/worker/..."},
		denyFunc: func(m *module, from, to string) bool {
			return m.match("services/...", to) && !m.match("services/worker", to)
		},
	},
	{
		name: "pure",
		doc: "The pure core (pkg/event, internal/core and their pure helpers) imports nothing from NATS, " +
			"CloudEvents or OpenTelemetry.",
		from:       pure,
		deny:       []string{"github.com/nats-io/...", "github.com/cloudevents/...", "go.opentelemetry.io/..."},
		transitive: true,
	},
	{
		name: "pure-closed",
		doc: "The pure core imports no Flow package but its own: pkg/event, internal/core and the pure " +
			"helpers (" + strings.Join(pure[2:], ", ") + ").",
		from:     pure,
		denyFunc: func(m *module, from, to string) bool { return m.isOwn(to) && !m.matchAny(pure, to) },
	},
	{
		name: "engine",
		doc: "The engine imports no transport (nats.go, CloudEvents), no JetStream implementation of its " +
			"ports (jsstore, jshost, the backend) and no service: it runs on the ports alone.",
		from: []string{"internal/engine"},
		deny: []string{"github.com/nats-io/...", "github.com/cloudevents/...", "internal/store/jsstore",
			"internal/jshost", "internal/backend/...", "services/..."},
		transitive: true,
	},
	{
		name: "testkit",
		doc: "pkg/flowtest runs workflows on the engine and the in-memory store: no JetStream (nats.go's " +
			"jetstream package, an embedded server, jsstore, jshost, the backend) and no service, by any path.",
		from: []string{"pkg/flowtest/..."},
		deny: []string{"github.com/nats-io/nats.go/jetstream", "github.com/nats-io/nats-server/...",
			"internal/store/jsstore", "internal/jshost", "internal/backend/...", "services/..."},
		transitive: true,
	},
	{
		name: "testkit-transport",
		doc: "pkg/flowtest imports no transport itself (nats.go, CloudEvents): what it reaches of them " +
			"comes through pkg/flow's client.",
		from: []string{"pkg/flowtest/..."},
		deny: []string{"github.com/nats-io/...", "github.com/cloudevents/...", "internal/cloudevent",
			"internal/natsconn"},
	},
	{
		name: "service-isolation",
		doc: "A service imports no package of another service (services/X/... never imports " +
			"services/Y/...); what two services share lives under internal/ or pkg/.",
		from: []string{"services/..."},
		denyFunc: func(m *module, from, to string) bool {
			return m.match("services/...", to) && serviceOf(m.rel(to)) != serviceOf(m.rel(from))
		},
	},
	{
		name: "internal-no-services",
		doc: "Nothing under internal/ imports a service, but the composition roots and harnesses " +
			"(internal/cli, internal/bench, internal/torture) and the test helpers that start one.",
		from:   []string{"internal/..."},
		except: append([]string{"internal/cli", "internal/bench", "internal/torture"}, testHelpers...),
		deny:   []string{"services/..."},
	},
	{
		name: "test-helpers",
		doc: "Test helpers (" + strings.Join(testHelpers, ", ") + ") are imported by tests, by each other " +
			"and by the torture harness only: production code never starts a test server.",
		from:   []string{"..."},
		except: append([]string{"internal/torture"}, testHelpers...),
		deny:   testHelpers,
	},
}

// serverPackages are the packages that make up Flow's server side, which the SDK never imports:
// the engine, the stores, the JetStream backend and what it is built of (the stream names, the
// host, the object stores, the bucket repositories and the flow-control and liveness records
// kept in buckets, the batch executor, the lease loop of the background jobs), an embedded
// server, the services. A name no package has yet is kept for the package being introduced.
var serverPackages = []string{
	"internal/engine",
	"internal/store", "internal/store/...",
	"internal/jshost",
	"internal/backend", "internal/backend/...",
	"internal/payload/objstore",
	"internal/typedkv",
	"internal/schedule/schedstore",
	"internal/timerindex",
	"internal/heartbeats",
	"internal/definitions",
	"internal/liveness",
	"internal/limits",
	"internal/batch",
	"internal/maintenance",
	"internal/natsserver",
	"services/...",
	"github.com/nats-io/nats.go/jetstream",
	"github.com/nats-io/nats-server/...",
}

// pure is the pure core: pkg/event and internal/core, then the helpers they may import. A helper
// added here is bound by the pure rules itself.
var pure = []string{"pkg/event", "internal/core", "internal/payload"}

// testHelpers are the packages that exist for tests: embedded servers, services started for a
// test, fixtures, suites.
var testHelpers = []string{"internal/natstest", "internal/ingresstest", "internal/historytest",
	"internal/store/storetest", "internal/health/healthtest", "internal/proctest",
	"internal/tracing/tracetest"}

// knownViolations are the forbidden edges of today, each with the reason it exists. From and To
// are module-relative package paths; where the forbidden package is outside the module, To is
// the rule's pattern (e.g. "github.com/nats-io/...") and Via the module package that imports
// it. Delete an entry once its edge is gone: the test fails on an entry that no longer occurs.
var knownViolations = []violation{}

// A rule forbids the packages it binds (From, but not Except) to depend on the packages it
// denies.
type rule struct {
	name string
	doc  string
	// from and except are patterns of module packages: a module-relative path, or one ending in
	// "/..." for the path and every package below it ("..." alone is the whole module).
	from, except []string
	// deny are patterns of forbidden packages: module-relative as above, or full import paths
	// (with a dot in the first element) for packages outside the module.
	deny []string
	// denyFunc, when set, forbids the edges it reports true for, besides those of deny.
	denyFunc func(m *module, from, to string) bool
	// transitive forbids a dependency by any path; otherwise only the import itself.
	transitive bool
}

// A violation is a forbidden edge: From depends on To (imports it, or reaches it when the rule
// is transitive). From is module-relative; To is module-relative for a module package, and the
// deny pattern it matched for a package outside the module, which Via, the last module package
// on the path, brings in (so that a new way in to an outside package already reached is a new
// violation).
type violation struct {
	Rule, From, To, Via string
	// path is the chain of imports from From to the forbidden package, for the report.
	path []string
}

func (v violation) key() string {
	k := v.Rule + ": " + v.From + " -> " + v.To
	if v.Via != "" {
		k += " via " + v.Via
	}
	return k
}

// module is the package graph of the module's non-test files: every package ./... depends on,
// with its imports.
type module struct {
	path    string
	imports map[string][]string
	own     []string // the module's packages, sorted
}

// loadModule lists the module's packages and their dependencies with the go command.
func loadModule(t *testing.T) *module {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}}\t{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", stderrOf(err))
	}
	modPath, dir, ok := strings.Cut(strings.TrimSpace(string(out)), "\t")
	if !ok {
		t.Fatalf("go list -m: unexpected output %q", out)
	}
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Standard", "./...")
	cmd.Dir = dir
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v", stderrOf(err))
	}
	m := &module{path: modPath, imports: map[string][]string{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Standard   bool
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list's output: %v", err)
		}
		if p.Standard {
			continue // the standard library imports nothing of ours, and no rule denies it
		}
		m.imports[p.ImportPath] = p.Imports
		if m.isOwn(p.ImportPath) {
			m.own = append(m.own, p.ImportPath)
		}
	}
	slices.Sort(m.own)
	return m
}

func stderrOf(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return err
}

func (m *module) isOwn(p string) bool { return p == m.path || strings.HasPrefix(p, m.path+"/") }

// rel returns p relative to the module when it is one of the module's packages, else p.
func (m *module) rel(p string) string {
	if m.isOwn(p) {
		return strings.TrimPrefix(strings.TrimPrefix(p, m.path), "/")
	}
	return p
}

// external reports whether pattern names packages outside the module.
func external(pattern string) bool {
	first, _, _ := strings.Cut(pattern, "/")
	return strings.Contains(first, ".")
}

// match reports whether import path p matches pattern.
func (m *module) match(pattern, p string) bool {
	if !external(pattern) {
		if !m.isOwn(p) {
			return false
		}
		p = m.rel(p)
	}
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func (m *module) matchAny(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { return m.match(pat, p) })
}

// bound returns the module packages r binds.
func (m *module) bound(r rule) []string {
	var ps []string
	for _, p := range m.own {
		if m.matchAny(r.from, p) && !m.matchAny(r.except, p) {
			ps = append(ps, p)
		}
	}
	return ps
}

// denied returns the violation's To for the edge from -> to when r forbids it, or "".
func (m *module) denied(r rule, from, to string) string {
	for _, pat := range r.deny {
		if m.match(pat, to) {
			if external(pat) {
				return pat
			}
			return m.rel(to)
		}
	}
	if r.denyFunc != nil && r.denyFunc(m, from, to) {
		return m.rel(to)
	}
	return ""
}

// check returns the violations of r, one per bound package and forbidden To (and Via), with the
// first path found (breadth first, so a shortest one). A transitive walk does not go past a
// forbidden package: what lies behind it is reported as that one edge. Every import of a
// forbidden outside package is looked at, even of one reached before, so that each module
// package bringing it in is a violation of its own.
func (m *module) check(r rule) []violation {
	var vs []violation
	for _, from := range m.bound(r) {
		parent := map[string]string{from: ""}
		found := map[string]bool{}
		queue := []string{from}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, q := range m.imports[p] {
				if _, known := m.imports[q]; !known {
					continue // the standard library
				}
				_, seen := parent[q]
				if seen && m.isOwn(q) {
					continue
				}
				if to := m.denied(r, from, q); to != "" {
					v := violation{Rule: r.name, From: m.rel(from), To: to}
					if !m.isOwn(q) {
						v.Via = m.lastOwn(parent, p)
					}
					if !found[v.key()] {
						found[v.key()] = true
						v.path = append(m.pathTo(parent, p), m.rel(q))
						vs = append(vs, v)
					}
				} else if !seen && r.transitive {
					queue = append(queue, q)
				}
				if !seen {
					parent[q] = p
				}
			}
		}
	}
	return vs
}

// lastOwn returns the module package nearest to p on its path, module-relative.
func (m *module) lastOwn(parent map[string]string, p string) string {
	for ; p != ""; p = parent[p] {
		if m.isOwn(p) {
			return m.rel(p)
		}
	}
	return ""
}

func (m *module) pathTo(parent map[string]string, p string) []string {
	var path []string
	for ; p != ""; p = parent[p] {
		path = append(path, m.rel(p))
	}
	slices.Reverse(path)
	return path
}

func TestImportRules(t *testing.T) {
	t.Parallel()
	m := loadModule(t)
	if testing.Verbose() {
		writeMap(os.Stdout, m)
	}

	names := map[string]bool{}
	for _, r := range rules {
		names[r.name] = true
	}
	known := map[string]bool{}
	for _, v := range knownViolations {
		if !names[v.Rule] {
			t.Errorf("knownViolations: %s names no rule", v.key())
		}
		known[v.key()] = true
	}

	seen := map[string]bool{}
	for _, r := range rules {
		for _, v := range m.check(r) {
			seen[v.key()] = true
			if !known[v.key()] {
				t.Errorf("forbidden import: %s\n\tpath: %s\n\trule: %s", v.key(), strings.Join(v.path, " -> "), r.doc)
			}
		}
	}
	for _, v := range knownViolations {
		if !seen[v.key()] {
			t.Errorf("knownViolations: %s no longer occurs: delete it from the list", v.key())
		}
	}
}

// The rules see through the module's packages: a forbidden edge is found however deep it lies,
// the walk stops at it, and each module package that brings in a forbidden outside package is
// an edge of its own.
func TestCheckFindsForbiddenEdges(t *testing.T) {
	t.Parallel()
	m := &module{path: "example.com/m", imports: map[string][]string{
		"example.com/m/pkg/api":         {"example.com/m/internal/helper"},
		"example.com/m/internal/helper": {"example.com/m/internal/server", "example.com/dep/transport"},
		"example.com/m/internal/server": {"example.com/dep/transport"},
		"example.com/dep/transport":     nil,
		"example.com/m/services/a":      {"example.com/m/services/b/part", "example.com/m/services/a/sub"},
		"example.com/m/services/a/sub":  nil,
		"example.com/m/services/b/part": nil,
	}}
	for p := range m.imports {
		if m.isOwn(p) {
			m.own = append(m.own, p)
		}
	}
	slices.Sort(m.own)
	keys := func(vs []violation) []string {
		var ks []string
		for _, v := range vs {
			ks = append(ks, v.key()+" ("+strings.Join(v.path, " ")+")")
		}
		slices.Sort(ks)
		return ks
	}

	deep := rule{name: "r", from: []string{"pkg/..."}, deny: []string{"internal/server"}, transitive: true}
	if got, want := keys(m.check(deep)), []string{"r: pkg/api -> internal/server (pkg/api internal/helper internal/server)"}; !slices.Equal(got, want) {
		t.Errorf("transitive check = %q, want %q", got, want)
	}
	deep.transitive = false
	if got := m.check(deep); len(got) != 0 {
		t.Errorf("direct check = %+v, want none", got)
	}
	ext := rule{name: "x", from: []string{"pkg/..."}, deny: []string{"example.com/dep/..."}, transitive: true}
	if got, want := keys(m.check(ext)), []string{
		"x: pkg/api -> example.com/dep/... via internal/helper (pkg/api internal/helper example.com/dep/transport)",
		"x: pkg/api -> example.com/dep/... via internal/server (pkg/api internal/helper internal/server example.com/dep/transport)",
	}; !slices.Equal(got, want) {
		t.Errorf("external deny = %q, want %q", got, want)
	}
	for _, r := range rules {
		if r.name == "service-isolation" {
			if got, want := keys(m.check(r)), []string{"service-isolation: services/a -> services/b/part (services/a services/b/part)"}; !slices.Equal(got, want) {
				t.Errorf("service isolation = %q, want %q", got, want)
			}
		}
	}
}

func serviceOf(rel string) string {
	parts := strings.SplitN(rel, "/", 3)
	if len(parts) < 2 {
		return rel
	}
	return parts[1]
}

// writeMap prints the rules with the packages each binds today, then the known violations.
func writeMap(w io.Writer, m *module) {
	fmt.Fprintf(w, "Import rules of %s (internal/archtest; docs/architecture.md)\n", m.path)
	for _, r := range rules {
		kind := "direct"
		if r.transitive {
			kind = "transitive"
		}
		fmt.Fprintf(w, "\n%s (%s)\n  %s\n", r.name, kind, r.doc)
		bound := m.bound(r)
		rels := make([]string, len(bound))
		for i, p := range bound {
			rels[i] = m.rel(p)
		}
		if len(rels) == 0 {
			rels = []string{"(no package yet)"}
		}
		fmt.Fprintf(w, "  binds: %s\n", strings.Join(rels, " "))
		if len(r.deny) > 0 {
			fmt.Fprintf(w, "  denies: %s\n", strings.Join(r.deny, " "))
		}
	}
	fmt.Fprintf(w, "\nknown violations (%d):\n", len(knownViolations))
	for _, v := range knownViolations {
		fmt.Fprintf(w, "  %s\n", v.key())
	}
}
