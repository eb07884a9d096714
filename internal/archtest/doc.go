// Package archtest checks the module's import rules: the architecture's map of rooms (the SDK,
// the pure core, the engine, the JetStream backend, the services and the composition roots) and
// the edges between them that are forbidden. The rules are written at the top of
// archtest_test.go and explained in docs/architecture.md; the package has no code of its own.
//
// Run the check alone; with -v it prints the map: each rule, the packages it binds today and the
// known violations.
//
//	go test -v -run TestImportRules ./internal/archtest
package archtest
