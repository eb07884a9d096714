package kubernetes_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyManifests copies base/ and overlays/ into a temporary directory, so that a test can break
// a copy and render it.
func copyManifests(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, root := range []string{"base", "overlays"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return os.MkdirAll(filepath.Join(dst, path), 0o755)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, path), data, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// edit replaces old, which must occur in the file, with new.
func edit(t *testing.T, file, old, new string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s holds no %q to break", file, old)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The decoder the manifests pass rejects a broken copy of them: the test would catch the mistake.
func TestStrictDecodingRejectsBrokenManifests(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, file, old, new string
		want                 []string // in the error
	}{
		{"misspelled field", "base/flow/history.yaml", "readinessProbe:", "readynessProbe:",
			[]string{"Deployment", "unknown field", "readynessProbe"}},
		{"field in the wrong case", "base/flow/worker.yaml", "containerPort:", "containerport:",
			[]string{"Deployment", "containerport"}},
		{"misspelled field in a volume claim", "base/nats/statefulset.yaml", "accessModes:", "accesModes:",
			[]string{"StatefulSet", "unknown field", "accesModes"}},
		{"field at the wrong level", "base/nats/pdb.yaml", "  maxUnavailable: 1\n  selector:\n", "  selector:\n    maxUnavailable: 1\n",
			[]string{"PodDisruptionBudget", "unknown field", "selector.maxUnavailable"}},
		{"field given twice", "base/nats/pdb.yaml", "  maxUnavailable: 1\n", "  maxUnavailable: 1\n  maxUnavailable: 2\n",
			[]string{"PodDisruptionBudget", "maxUnavailable", "already defined"}},
		{"value of the wrong type", "base/flow/scheduler.yaml", "replicas: 2", `replicas: "two"`,
			[]string{"Deployment", "replicas"}},
		{"unknown kind", "base/flow/ingress.yaml", "kind: Service\n", "kind: Servcie\n",
			[]string{"Servcie"}},
		{"misspelled field in a patch", "overlays/dev/nats-anti-affinity.yaml", "topologyKey:", "topologykey:",
			[]string{"StatefulSet", "topologykey"}},
		{"misspelled field in a NetworkPolicy", "base/network-policies.yaml", "policyTypes:", "policyType:",
			[]string{"NetworkPolicy", "unknown field", "policyType"}},
		{"misspelled field in a sidecar", "base/nats/statefulset.yaml", "image: natsio/prometheus-nats-exporter", "imag: natsio/prometheus-nats-exporter",
			[]string{"StatefulSet", "unknown field", "imag"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := copyManifests(t)
			edit(t, filepath.Join(dir, tc.file), tc.old, tc.new)
			_, err := build(filepath.Join(dir, devOverlay))
			if err == nil {
				t.Fatalf("the overlay renders and decodes with %s broken (%q for %q)", tc.file, tc.new, tc.old)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

// The unbroken copy renders and passes the checks: the failures of the broken copies come from
// the edits alone.
func TestCopiedManifestsPass(t *testing.T) {
	t.Parallel()
	for _, p := range checkAll(sortOut(t, mustBuild(t, filepath.Join(copyManifests(t), devOverlay)))) {
		t.Error(p)
	}
}
