package kubernetes_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"

	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// readBy are the FLOW_* variables each service reads: its Config's (cmd/flowd loads it with
// envconfig.Process("FLOW", &cfg)), and those cmd/flowd reads itself for the worker's example
// workflows. FLOW_<SERVICE>_HTTP_ADDR is left out: checkDeployment checks it by the name every
// service has (docs/kubernetes.md).
func readBy(t *testing.T) map[string][]string {
	t.Helper()
	keys := func(spec any, extra ...string) []string {
		var out bytes.Buffer
		if err := envconfig.Usagef("FLOW", spec, &out, "{{range .}}{{usage_key .}}\n{{end}}"); err != nil {
			t.Fatal(err)
		}
		return append(strings.Fields(out.String()), extra...)
	}
	return map[string][]string{
		"history":   keys(&history.Config{}),
		"ingress":   keys(&ingress.Config{}),
		"scheduler": keys(&scheduler.Config{}),
		"worker":    keys(&worker.Config{}, "FLOW_BUILD_ID", "FLOW_INGRESS_PUBLIC_URL"),
	}
}

// Every FLOW_* variable the manifests set is one a service reads: a misspelled name, which the
// services would silently ignore, fails.
func TestEveryFlowVariableIsRead(t *testing.T) {
	t.Parallel()
	for _, p := range unreadVariables(readBy(t), sortOut(t, mustBuild(t, devOverlay))) {
		t.Error(p)
	}
}

// A misspelled variable is caught, on a Deployment and in a ConfigMap.
func TestMisspelledVariablesAreCaught(t *testing.T) {
	t.Parallel()
	read := readBy(t)
	for file, edits := range map[string][2]string{
		"base/flow/scheduler.yaml": {"name: FLOW_SCHEDULER_NAME", "name: FLOW_SCHEDULER_NAMES"},
		"base/flow/config.env":     {"FLOW_QUEUE=", "FLOW_QEUE="},
	} {
		dir := copyManifests(t)
		edit(t, filepath.Join(dir, file), edits[0], edits[1])
		wrong := strings.TrimSuffix(strings.TrimPrefix(edits[1], "name: "), "=")
		problems := unreadVariables(read, sortOut(t, mustBuild(t, filepath.Join(dir, devOverlay))))
		if len(problems) != 1 || !strings.Contains(problems[0], wrong) {
			t.Errorf("with %s in %s, want the one problem naming it, got %q", wrong, file, problems)
		}
	}
}

// unreadVariables returns the FLOW_* variables of the manifests that no service reads. A variable
// set on a Deployment must be read by its service; one in a ConfigMap by at least one of the
// services that load it.
func unreadVariables(read map[string][]string, r rendered) []string {
	var problems []string
	fromConfigMaps := map[string]bool{} // name: read by a service that loads it
	for _, d := range r.deployments {
		svc := strings.TrimPrefix(d.Name, "flow-")
		reads := func(name string) bool {
			return name == "FLOW_"+strings.ToUpper(svc)+"_HTTP_ADDR" || slices.Contains(read[svc], name)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "FLOW_") && !reads(e.Name) {
					problems = append(problems, fmt.Sprintf("Deployment %s sets %s, which flowd %s does not read (it reads %v)", d.Name, e.Name, svc, read[svc]))
				}
			}
			for _, from := range c.EnvFrom {
				if from.ConfigMapRef == nil || r.configMaps[from.ConfigMapRef.Name] == nil {
					continue
				}
				for name := range r.configMaps[from.ConfigMapRef.Name].Data {
					name = from.Prefix + name
					if strings.HasPrefix(name, "FLOW_") {
						fromConfigMaps[name] = fromConfigMaps[name] || reads(name)
					}
				}
			}
		}
	}
	for name, isRead := range fromConfigMaps {
		if !isRead {
			problems = append(problems, fmt.Sprintf("a ConfigMap sets %s, which none of the services that load it reads", name))
		}
	}
	if len(fromConfigMaps) == 0 {
		problems = append(problems, "no Deployment takes FLOW_* variables from a ConfigMap")
	}
	return problems
}
