package kubernetes_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// The checks of TestDevOverlay catch mistakes that decode as valid Kubernetes objects.
func TestChecksRejectBrokenManifests(t *testing.T) {
	t.Parallel()
	cases := []brokenManifest{
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

		// What the hardened manifests must keep.
		{"no NetworkPolicy", "base/kustomization.yaml", "  - network-policies.yaml\n", "",
			"manifests: no NetworkPolicy"},
		{"routes open to every Flow pod", "base/network-policies.yaml",
			"              app.kubernetes.io/name: nats\n      ports:\n        - port: cluster\n",
			"              app.kubernetes.io/part-of: flow\n      ports:\n        - port: cluster\n",
			"StatefulSet nats: route port 6222 admits the pods of Deployment flow-worker: only NATS servers may open routes"},
		{"NATS clients from anywhere", "base/network-policies.yaml",
			"    - from:\n        - podSelector:\n            matchLabels:\n              app.kubernetes.io/part-of: flow\n      ports:\n        - port: client\n",
			"    - ports:\n        - port: client\n",
			"StatefulSet nats: port client (4222) admits a pod of another namespace"},
		{"NATS monitoring open to the scraper", "base/network-policies.yaml",
			"              flowrun.dev/metrics-scraper: \"true\"\n      ports:\n        - port: metrics\n",
			"              flowrun.dev/metrics-scraper: \"true\"\n      ports:\n        - port: metrics\n        - port: monitor\n",
			"StatefulSet nats: port monitor (8222) admits Prometheus"},
		{"the history API open to every namespace", "base/network-policies.yaml",
			"        - namespaceSelector:\n            matchLabels:\n              flowrun.dev/metrics-scraper: \"true\"\n      ports:\n        - port: http\n",
			"        - namespaceSelector: {}\n      ports:\n        - port: http\n",
			"Deployment flow-history: port http (8420) admits a pod of another namespace"},
		{"the worker's metrics unreachable", "base/network-policies.yaml", "values: [flow-history, flow-scheduler, flow-worker]", "values: [flow-history, flow-scheduler]",
			"Deployment flow-worker: metrics port http (8423) refuses Prometheus"},
		{"the ingress closed to the outside", "base/network-policies.yaml", "    - ports:\n        - port: http\n",
			"    - from:\n        - podSelector:\n            matchLabels:\n              app.kubernetes.io/part-of: flow\n      ports:\n        - port: http\n",
			"Deployment flow-ingress: port http (8421) refuses a pod of another namespace"},
		{"no scrape annotation", "base/flow/worker.yaml", `prometheus.io/scrape: "true"`, `prometheus.io/scrape: "false"`,
			"Deployment flow-worker: the pod template has no annotation prometheus.io/scrape"},
		{"a scrape port the pod lacks", "base/flow/scheduler.yaml", `prometheus.io/port: "8422"`, `prometheus.io/port: "9090"`,
			`Deployment flow-scheduler: annotation prometheus.io/port "9090" is none of the pod's container ports`},
		{"NATS without scrape annotations", "base/nats/statefulset.yaml", `prometheus.io/scrape: "true"`, `prometheus.io/scrapes: "true"`,
			"StatefulSet nats: the pod template has no annotation prometheus.io/scrape"},
		{"no Service for the worker", "base/flow/worker.yaml",
			"kind: Service\nmetadata:\n  name: flow-worker\n", "kind: Service\nmetadata:\n  name: flow-wrkr\n",
			"manifests: no Service flow-worker"},
		{"NATS pods with the plaintext passwords", "base/nats/statefulset.yaml", "name: flow-nats-password-hashes", "name: flow-nats-passwords",
			"StatefulSet nats: container nats: takes its environment from Secret flow-nats-passwords-"},
		{"a password the NATS pods hold as is", "overlays/dev/nats-password-hashes.env", "NATS_CLIENT_PASSWORD=$2a$", "NATS_CLIENT_PASSWORD=plain$2a$",
			"StatefulSet nats: container nats: variable NATS_CLIENT_PASSWORD, which auth.conf resolves, is not a bcrypt hash"},
		{"NATS readiness before JetStream is current", "base/nats/statefulset.yaml",
			"          readinessProbe:\n            httpGet:\n              path: /healthz\n",
			"          readinessProbe:\n            httpGet:\n              path: /healthz?js-server-only=true\n",
			"StatefulSet nats: readiness probe on /healthz?js-server-only=true admits a server whose JetStream is not current"},
		{"no lame duck", "base/nats/statefulset.yaml", "            preStop:\n", "            postStart:\n",
			"StatefulSet nats: container nats: no preStop hook that puts nats-server in lame-duck mode"},
		{"a PodDisruptionBudget over one replica", "overlays/dev/kustomization.yaml", "\nconfigMapGenerator:\n",
			"\nreplicas:\n  - name: flow-scheduler\n    count: 1\n\nconfigMapGenerator:\n",
			"Deployment flow-scheduler: PodDisruptionBudget flow-scheduler covers 1 replica(s)"},
		{"no zone spread", "base/flow/history.yaml", "topologyKey: topology.kubernetes.io/zone", "topologyKey: kubernetes.io/hostname",
			"Deployment flow-history: no topology spread constraint spreads these pods"},
		{"NATS without zone spread", "base/nats/statefulset.yaml", "topologyKey: topology.kubernetes.io/zone", "topologyKey: example.com/rack",
			"StatefulSet nats: no topology spread constraint spreads these pods"},
		{"a cluster-internal public URL", "overlays/dev/kustomization.yaml", "FLOW_INGRESS_PUBLIC_URL=http://127.0.0.1:8421", "FLOW_INGRESS_PUBLIC_URL=http://flow-ingress:8421",
			`Deployment flow-ingress: FLOW_INGRESS_PUBLIC_URL "http://flow-ingress:8421" names a cluster-internal host`},
		{"no public URL", "overlays/dev/kustomization.yaml", "FLOW_INGRESS_PUBLIC_URL=http://127.0.0.1:8421", "FLOW_QUEUE=default",
			"Deployment flow-ingress: no FLOW_INGRESS_PUBLIC_URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.requireProblem(t, checkAll)
		})
	}
}

// brokenManifest is a mistake made in a copy of the manifests (old replaced by new in file) and
// a problem the checks must report about the dev overlay built from it.
type brokenManifest struct {
	name, file, old, new string
	want                 string // in a problem
}

// requireProblem makes the mistake in a copy of the manifests, builds the dev overlay and fails t
// unless one of the problems check finds in it contains b.want.
func (b brokenManifest) requireProblem(t *testing.T, check func(rendered) []string) {
	t.Helper()
	dir := copyManifests(t)
	edit(t, filepath.Join(dir, b.file), b.old, b.new)
	problems := check(sortOut(t, mustBuild(t, filepath.Join(dir, devOverlay))))
	for _, p := range problems {
		if strings.Contains(p, b.want) {
			return
		}
	}
	t.Errorf("no problem says %q; the checks found:\n%s", b.want, strings.Join(problems, "\n"))
}
