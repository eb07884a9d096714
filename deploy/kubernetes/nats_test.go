package kubernetes_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
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

// nats-server accepts the configuration the overlay ships in the ConfigMap nats-config, with the
// environment the pods give it: a cluster of the StatefulSet's pods, JetStream on the volume, the
// monitoring port of the probes, and the five users with their passwords from the Secret.
func TestNATSServerAcceptsTheConfigMap(t *testing.T) {
	r := sortOut(t, mustBuild(t, devOverlay))
	var cm *corev1.ConfigMap
	for name, c := range r.configMaps {
		if c.Labels["app.kubernetes.io/part-of"] == "flow" && c.Data["nats.conf"] != "" {
			if cm != nil {
				t.Fatalf("two ConfigMaps hold nats.conf: %s and %s", cm.Name, name)
			}
			cm = c
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap holds nats.conf")
	}
	dir := t.TempDir()
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.statefulSets) != 1 {
		t.Fatalf("want one StatefulSet, got %d", len(r.statefulSets))
	}
	sts := r.statefulSets[0]
	// The Secret the pods take their environment from (its generated name has a hash suffix).
	var secret *corev1.Secret
	for _, from := range sts.Spec.Template.Spec.Containers[0].EnvFrom {
		if from.SecretRef != nil {
			secret = r.secrets[from.SecretRef.Name]
		}
	}
	if secret == nil {
		t.Fatal("the nats pods take their environment from no Secret of the manifests")
	}
	t.Setenv("POD_NAME", sts.Name+"-0")
	for env := range passwords {
		t.Setenv(env, string(secret.Data[env]))
	}

	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("nats-server rejects the ConfigMap's nats.conf: %v", err)
	}
	if opts.ServerName != sts.Name+"-0" {
		t.Errorf("server_name %q, want the pod's name %s-0", opts.ServerName, sts.Name)
	}
	if !opts.JetStream || opts.StoreDir != "/data/jetstream" {
		t.Errorf("JetStream %v in %q, want it on in /data/jetstream (the volume)", opts.JetStream, opts.StoreDir)
	}
	if opts.HTTPPort != 8222 || opts.Port != 4222 || opts.Cluster.Port != 6222 {
		t.Errorf("ports client %d cluster %d monitor %d, want 4222, 6222 and 8222 (the container's)", opts.Port, opts.Cluster.Port, opts.HTTPPort)
	}
	if opts.Cluster.Name == "" {
		t.Errorf("the cluster has no name")
	}
	var routes, want []string
	for _, u := range opts.Routes {
		routes = append(routes, u.Host)
	}
	for i := range *sts.Spec.Replicas {
		want = append(want, fmt.Sprintf("%s-%d.%s:6222", sts.Name, i, sts.Spec.ServiceName))
	}
	slices.Sort(routes)
	if !slices.Equal(routes, want) {
		t.Errorf("routes %v, want one to each pod through the headless Service: %v", routes, want)
	}
	users := map[string]string{}
	var names []string
	for _, u := range opts.Users {
		users[u.Username] = u.Password
		names = append(names, u.Username)
	}
	for env, user := range passwords {
		got, ok := users[user]
		switch {
		case !ok:
			t.Errorf("auth.conf has no user %s", user)
		case got == "" || got != string(secret.Data[env]):
			t.Errorf("user %s's password is not $%s from the Secret", user, env)
		}
	}
	if len(users) != len(passwords) {
		t.Errorf("users %v, want exactly those of %v", names, passwords)
	}
}
