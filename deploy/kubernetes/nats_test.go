package kubernetes_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
)

// passwords are the variables auth.conf resolves, with the user each one belongs to.
var passwords = map[string]string{
	"NATS_HISTORY_PASSWORD":   "flow-history",
	"NATS_SCHEDULER_PASSWORD": "flow-scheduler",
	"NATS_INGRESS_PASSWORD":   "flow-ingress",
	"NATS_WORKER_PASSWORD":    "flow-worker",
	"NATS_CLIENT_PASSWORD":    "flow-client",
}

// Kustomize loads no file outside its root, so the base keeps a copy of the users that
// internal/natsperm generates into deploy/nats/auth.conf; the two must not drift apart.
func TestAuthConfIsDeployNATSAuthConf(t *testing.T) {
	t.Parallel()
	generated, err := os.ReadFile("../nats/auth.conf")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("deploy/nats/auth.conf does not exist in this tree yet; nothing to compare base/nats/auth.conf with")
	}
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile("base/nats/auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(generated, copied) {
		t.Fatal("deploy/kubernetes/base/nats/auth.conf differs from deploy/nats/auth.conf: " +
			"run `go test ./internal/natsperm -run TestAuthConf -rewrite`, which writes both, or copy the file")
	}
}

// nats-server accepts the configuration the overlay gives each pod of the StatefulSet (the
// ConfigMap and Secrets at their mount paths, the pod's environment), and that configuration
// holds what a hardened cluster needs: routes that authenticate and use mutual TLS, bcrypt hashes for
// every user's password, and lame-duck timing the pod's grace period covers.
func TestNATSServerAcceptsTheConfigMap(t *testing.T) {
	r := sortOut(t, mustBuild(t, devOverlay))
	if len(r.statefulSets) != 1 {
		t.Fatalf("want one StatefulSet, got %d", len(r.statefulSets))
	}
	for i := range *r.statefulSets[0].Spec.Replicas {
		for _, p := range natsConfigProblems(t, r, int(i)) {
			t.Error(p)
		}
	}
}

// The configuration checks catch a cluster block without authorization or TLS, and the rest.
func TestNATSConfigChecksRejectBrokenManifests(t *testing.T) {
	cases := []brokenManifest{
		{"no route TLS", "base/nats/nats.conf",
			"  tls {\n    cert_file: /etc/nats/routes-tls/tls.crt\n    key_file: /etc/nats/routes-tls/tls.key\n    ca_file: /etc/nats/routes-tls/ca.crt\n    verify: true\n    timeout: 5\n  }\n", "",
			"the routes have no TLS"},
		{"no route credentials", "base/nats/nats.conf", "  include ../routes/nats-routes.conf\n",
			"  routes: [\"nats-route://nats-0.nats-headless:6222\", \"nats-route://nats-1.nats-headless:6222\", \"nats-route://nats-2.nats-headless:6222\"]\n",
			"the routes need no authorization"},
		{"a plaintext password for a user", "overlays/dev/nats-password-hashes.env", "NATS_WORKER_PASSWORD=$2a$", "NATS_WORKER_PASSWORD=x2a$",
			"user flow-worker: its password is not a bcrypt hash"},
		{"a grace period shorter than lame duck", "base/nats/nats.conf", "lame_duck_duration: 30s", "lame_duck_duration: 50s",
			"terminationGracePeriodSeconds 60 does not cover lame_duck_duration 50s"},
		{"no pid file for the preStop hook", "base/nats/nats.conf", "pid_file: /var/run/nats/nats.pid", "pid_file: /var/run/nats/other.pid",
			"the preStop hook signals ldm=/var/run/nats/nats.pid, but nats.conf's pid_file is"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.requireProblem(t, func(r rendered) []string { return natsConfigProblems(t, r, 0) })
		})
	}
}

// natsPod is what pod i of the StatefulSet sees: a root directory holding its ConfigMap, Secret
// and emptyDir volumes at their mount paths, the path of its configuration under that root, and
// its environment.
type natsPod struct {
	root, config string
	env          map[string]string
	container    *corev1.Container
	pod          *corev1.PodSpec
}

// mountNATSPod writes pod i's volumes under a temporary root. Every file of a ConfigMap or
// Secret that names a mount path has it moved under the root, so that nats-server finds the
// included files and certificates where the pod would.
func mountNATSPod(t *testing.T, r rendered, i int) natsPod {
	t.Helper()
	sts := r.statefulSets[0]
	pod := &sts.Spec.Template.Spec
	c := natsContainer(pod)
	if c == nil {
		t.Fatal("the StatefulSet has no container nats")
	}
	np := natsPod{root: t.TempDir(), env: map[string]string{}, container: c, pod: pod}
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.MountPath)
	}
	// Longest first: /etc/nats/routes-tls before /etc/nats/routes.
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, m := range mounts {
		pairs = append(pairs, m, filepath.Join(np.root, m))
	}
	move := strings.NewReplacer(pairs...)
	for _, m := range c.VolumeMounts {
		dir := filepath.Join(np.root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var data map[string][]byte
		var items []corev1.KeyToPath
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case v.ConfigMap != nil:
				cm := r.configMaps[v.ConfigMap.Name]
				if cm == nil {
					t.Fatalf("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name)
				}
				data = map[string][]byte{}
				for k, s := range cm.Data {
					data[k] = []byte(s)
				}
				items = v.ConfigMap.Items
			case v.Secret != nil:
				s := r.secrets[v.Secret.SecretName]
				if s == nil {
					t.Fatalf("volume %s: no Secret %s", v.Name, v.Secret.SecretName)
				}
				data, items = s.Data, v.Secret.Items
			}
		}
		if len(items) == 0 {
			for k := range data {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		for _, it := range items {
			content := data[it.Key]
			if strings.HasSuffix(it.Path, ".conf") {
				content = []byte(move.Replace(string(content)))
			}
			if err := os.WriteFile(filepath.Join(dir, it.Path), content, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for j, a := range c.Args {
		if (a == "--config" || a == "-c") && j+1 < len(c.Args) {
			np.config = move.Replace(c.Args[j+1])
		}
	}
	if np.config == "" {
		t.Fatalf("container nats: no --config among its args %q", c.Args)
	}
	for _, from := range c.EnvFrom {
		if from.SecretRef != nil && r.secrets[from.SecretRef.Name] != nil {
			for k, v := range r.secrets[from.SecretRef.Name].Data {
				np.env[from.Prefix+k] = string(v)
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			np.env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			np.env[e.Name] = fmt.Sprintf("%s-%d", sts.Name, i)
		case e.ValueFrom.SecretKeyRef != nil && r.secrets[e.ValueFrom.SecretKeyRef.Name] != nil:
			np.env[e.Name] = string(r.secrets[e.ValueFrom.SecretKeyRef.Name].Data[e.ValueFrom.SecretKeyRef.Key])
		}
	}
	return np
}

// load processes the pod's configuration as nats-server does, in the pod's environment.
func (np natsPod) load(t *testing.T) (*server.Options, error) {
	t.Helper()
	for k, v := range np.env {
		t.Setenv(k, v)
	}
	return server.ProcessConfigFile(np.config)
}

// natsConfigProblems loads pod i's configuration and returns what is wrong with it.
func natsConfigProblems(t *testing.T, r rendered, i int) []string {
	t.Helper()
	sts := r.statefulSets[0]
	name := fmt.Sprintf("%s-%d", sts.Name, i)
	np := mountNATSPod(t, r, i)
	opts, err := np.load(t)
	if err != nil {
		return []string{fmt.Sprintf("pod %s: nats-server rejects its configuration: %v", name, err)}
	}
	var list []string
	p := problems{"pod " + name, &list}
	if opts.ServerName != name {
		p.errorf("server_name %q, want the pod's name", opts.ServerName)
	}
	if !opts.JetStream || opts.StoreDir != filepath.Join(np.root, "/data/jetstream") {
		p.errorf("JetStream %v in %q, want it on in /data/jetstream (the volume)", opts.JetStream, strings.TrimPrefix(opts.StoreDir, np.root))
	}
	if opts.HTTPPort != 8222 || opts.Port != 4222 || opts.Cluster.Port != 6222 {
		p.errorf("ports client %d cluster %d monitor %d, want 4222, 6222 and 8222 (the container's)", opts.Port, opts.Cluster.Port, opts.HTTPPort)
	}
	if opts.Cluster.Name == "" {
		p.errorf("the cluster has no name")
	}

	// Routes: one to each pod through the headless Service, each with the route user's
	// credentials, which the servers require of the routes they accept.
	var routes, want []string
	for _, u := range opts.Routes {
		routes = append(routes, u.Host)
		pw, _ := u.User.Password()
		if opts.Cluster.Username != "" && (u.User.Username() != opts.Cluster.Username || pw != opts.Cluster.Password) {
			p.errorf("route %s does not log in as the route user %s", u.Redacted(), opts.Cluster.Username)
		}
	}
	for j := range *sts.Spec.Replicas {
		want = append(want, fmt.Sprintf("%s-%d.%s:6222", sts.Name, j, sts.Spec.ServiceName))
	}
	slices.Sort(routes)
	if !slices.Equal(routes, want) {
		p.errorf("routes %v, want one to each pod through the headless Service: %v", routes, want)
	}
	if opts.Cluster.Username == "" || opts.Cluster.Password == "" {
		p.errorf("the routes need no authorization: any pod that reaches port 6222 joins the cluster and bypasses every user's permissions")
	}

	// Mutual TLS: a route presents a certificate the CA signed for the pod's name, and the
	// servers require one of every route.
	switch tc := opts.Cluster.TLSConfig; {
	case tc == nil:
		p.errorf("the routes have no TLS: a cluster block without tls sends every message in clear")
	case tc.ClientAuth != tls.RequireAndVerifyClientCert: // nats-server requires it of routes whatever verify says
		p.errorf("the routes do not require a client certificate (ClientAuth %v): set verify: true", tc.ClientAuth)
	case len(tc.Certificates) == 0 || tc.ClientCAs == nil:
		p.errorf("the routes' TLS has no certificate or no CA")
	default:
		leaf, err := x509.ParseCertificate(tc.Certificates[0].Certificate[0])
		if err != nil {
			p.errorf("the route certificate: %v", err)
			break
		}
		for _, host := range want {
			host, _, _ = strings.Cut(host, ":")
			_, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: tc.ClientCAs,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
			if err != nil {
				p.errorf("the route certificate does not serve route %s: %v", host, err)
			}
		}
		if time.Until(leaf.NotAfter) < 30*24*time.Hour {
			p.errorf("the route certificate expires %s: renew it (make k8s-secrets FORCE=1 for the dev overlay)", leaf.NotAfter.Format(time.DateOnly))
		}
	}

	// Users: the five roles, each password a bcrypt hash of the one its service logs in with.
	plain := map[string]string{} // user: the password its service logs in with
	_, plainSecrets := plainPasswords(r)
	for name := range plainSecrets {
		for env, user := range passwords {
			if s := r.secrets[name]; s != nil && len(s.Data[env]) > 0 {
				plain[user] = string(s.Data[env])
			}
		}
	}
	users := map[string]string{}
	for _, u := range opts.Users {
		users[u.Username] = u.Password
	}
	for _, user := range passwords {
		hash, ok := users[user]
		switch {
		case !ok:
			p.errorf("auth.conf has no user %s", user)
		case !strings.HasPrefix(hash, "$2"):
			p.errorf("user %s: its password is not a bcrypt hash: the NATS pod holds the password itself", user)
		case !bcryptMatches(hash, plain[user]):
			p.errorf("user %s: its bcrypt hash does not match the password its service logs in with", user)
		}
	}
	if len(users) != len(passwords) {
		p.errorf("users %v, want exactly those of %v", users, passwords)
	}

	// Lame duck: the preStop hook signals the pid in pid_file, which is on a writable volume,
	// and the grace period covers lame-duck mode with time to spare for JetStream's shutdown.
	var pidArg string
	if h := np.container.Lifecycle; h != nil && h.PreStop != nil && h.PreStop.Exec != nil {
		for _, a := range h.PreStop.Exec.Command {
			if _, pid, ok := strings.Cut(a, "ldm="); ok {
				pidArg = pid
			}
		}
	}
	if pid := strings.TrimPrefix(opts.PidFile, np.root); pidArg == "" || pid != pidArg {
		p.errorf("the preStop hook signals ldm=%s, but nats.conf's pid_file is %q", pidArg, pid)
	}
	writable := false
	for _, m := range np.container.VolumeMounts {
		for _, v := range np.pod.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil && filepath.Dir(pidArg) == m.MountPath {
				writable = true
			}
		}
	}
	if !writable {
		p.errorf("the pid file %s is on no emptyDir volume (the root filesystem is read-only)", pidArg)
	}
	grace := time.Duration(*np.pod.TerminationGracePeriodSeconds) * time.Second
	if ldm := opts.LameDuckDuration; ldm == 0 || grace < ldm+15*time.Second {
		p.errorf("terminationGracePeriodSeconds %d does not cover lame_duck_duration %s and 15s for JetStream's shutdown", *np.pod.TerminationGracePeriodSeconds, ldm)
	}
	return list
}

// bcryptMatches memoizes bcrypt comparisons, which take a tenth of a second each at the cost
// the hashes are made with, and which the broken copies repeat.
func bcryptMatches(hash, password string) bool {
	key := hash + "\x00" + password
	if v, ok := bcryptCache.Load(key); ok {
		return v.(bool)
	}
	ok := bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) == nil
	bcryptCache.Store(key, ok)
	return ok
}

var bcryptCache sync.Map
