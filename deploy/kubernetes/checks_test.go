package kubernetes_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// The checks of TestDevOverlay catch mistakes that decode as valid Kubernetes objects.
func TestChecksRejectBrokenManifests(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, file, old, new string
		want                 string // in a problem
	}{
		{"readiness on the wrong path", "base/flow/history.yaml", "path: /readyz", "path: /ready",
			`Deployment flow-history: container history: readiness probe on "/ready", want "/readyz"`},
		{"liveness on the wrong path", "base/flow/ingress.yaml", "path: /healthz", "path: /livez",
			`Deployment flow-ingress: container ingress: liveness probe on "/livez", want "/healthz"`},
		{"probe on no container port", "base/flow/worker.yaml", "              port: http", "              port: 9999",
			"Deployment flow-worker: container worker: readiness probe port 9999 is none of the container's ports"},
		{"listening on loopback", "base/flow/scheduler.yaml", "value: 0.0.0.0:8422", "value: 127.0.0.1:8422",
			"Deployment flow-scheduler: FLOW_SCHEDULER_HTTP_ADDR"},
		{"the wrong container port", "base/flow/worker.yaml", "containerPort: 8423", "containerPort: 8424",
			"Deployment flow-worker: no container port 8423"},
		{"another service's password", "base/flow/ingress.yaml", "key: NATS_INGRESS_PASSWORD", "key: NATS_WORKER_PASSWORD",
			`Deployment flow-ingress: FLOW_NATS_PASSWORD is key "NATS_WORKER_PASSWORD"`},
		{"a Secret key that does not exist", "overlays/dev/nats-passwords.env", "NATS_HISTORY_PASSWORD=", "NATS_HISTORY_PASSWORDS=",
			`Deployment flow-history: refers to key "NATS_HISTORY_PASSWORD" of Secret flow-nats-passwords-`},
		{"a Secret that does not exist", "base/flow/ingress.yaml", "secretName: flow-ingress-tokens", "secretName: flow-ingres-tokens",
			`Deployment flow-ingress: refers to Secret "flow-ingres-tokens"`},
		{"no PodDisruptionBudget", "base/flow/scheduler.yaml", "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: flow-scheduler\n",
			"  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: flow-sched\n",
			"Deployment flow-scheduler: want one PodDisruptionBudget selecting its pods, got 0"},
		{"a selector that misses the pods", "base/flow/scheduler.yaml", "  selector:\n    matchLabels:\n      app.kubernetes.io/name: flow-scheduler\n",
			"  selector:\n    matchLabels:\n      app.kubernetes.io/name: flow-sched\n",
			"Deployment flow-scheduler: the selector does not select the pod template"},
		{"no anti-affinity", "base/flow/history.yaml", "topologyKey: kubernetes.io/hostname", "topologyKey: topology.kubernetes.io/zone",
			"Deployment flow-history: no anti-affinity term"},
		{"a request above its limit", "base/flow/worker.yaml", "cpu: 100m", `cpu: "4"`,
			"Deployment flow-worker: container worker: cpu request 4 exceeds its limit 2"},
		{"a writable root filesystem", "base/flow/history.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false",
			"Deployment flow-history: container history: set readOnlyRootFilesystem"},
		{"running as root", "base/flow/worker.yaml", "runAsUser: 65532", "runAsUser: 0",
			"Deployment flow-worker: pod securityContext must set runAsNonRoot and runAsUser 65532"},
		{"two NATS servers", "base/nats/statefulset.yaml", "replicas: 3", "replicas: 2",
			"StatefulSet nats: want 3 replicas"},
		{"routes only to ready servers", "base/nats/services.yaml", "publishNotReadyAddresses: true", "publishNotReadyAddresses: false",
			"StatefulSet nats: Service nats-headless must be headless"},
		{"JetStream off the volume", "base/nats/statefulset.yaml", "mountPath: /data\n", "mountPath: /var/data\n",
			"StatefulSet nats: the claim data is not mounted at /data"},
		{"a Service on a port the pods lack", "base/flow/ingress.yaml", "      targetPort: http", "      targetPort: web",
			"Service flow-ingress: port http targets web"},
		{"a streams replica per server", "base/flow/config.env", "FLOW_STREAMS_REPLICAS=3", "FLOW_STREAMS_REPLICAS=1",
			`Deployment flow-history: FLOW_STREAMS_REPLICAS = "1", want 3`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := copyManifests(t)
			edit(t, filepath.Join(dir, tc.file), tc.old, tc.new)
			problems := checkAll(sortOut(t, mustBuild(t, filepath.Join(dir, devOverlay))))
			for _, p := range problems {
				if strings.Contains(p, tc.want) {
					return
				}
			}
			t.Errorf("no problem says %q; the checks found:\n%s", tc.want, strings.Join(problems, "\n"))
		})
	}
}
