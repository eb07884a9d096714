package natsperm

import (
	"bytes"
	"fmt"
	"strconv"
)

// AuthConfPath is where the repository keeps the generated configuration, relative to its root.
const AuthConfPath = "deploy/nats/auth.conf"

// KubernetesAuthConfPath is its identical copy for the Kubernetes manifests (kustomize loads no
// file outside its root).
const KubernetesAuthConfPath = "deploy/kubernetes/base/nats/auth.conf"

// AuthConf returns the nats-server configuration include file that defines one user per role
// with the role's permissions: an authorization block, whose users are in the server's global
// account, so that the JetStream the server enables (a top-level jetstream block) is theirs.
// Each password is the variable $<PasswordEnv>, which nats-server resolves from its environment
// when it loads the file (and refuses to start when it is unset).
func AuthConf() []byte {
	var b bytes.Buffer
	b.WriteString(`# Flow's NATS users, one per role, with least-privilege permissions.
# Generated from internal/natsperm by ` + "`go test ./internal/natsperm -rewrite`" + `: do not edit.
# Include it in nats-server.conf (include auth.conf) next to a jetstream block. nats-server reads
# each password from the environment variable named below when it loads the configuration.
# See docs/operations.md, "Who writes what: NATS permissions by role".
authorization {
  users = [
`)
	for i, r := range Roles() {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "    # %s: %s; its inbox prefix is %s\n", r.Name, r.Who, r.InboxPrefix)
		fmt.Fprintf(&b, "    {\n      user: %s\n      password: $%s\n      permissions: {\n", strconv.Quote(r.User), r.PasswordEnv)
		list := func(key string, subjects []string) {
			fmt.Fprintf(&b, "        %s: {\n          allow: [\n", key)
			for _, s := range subjects {
				fmt.Fprintf(&b, "            %s\n", strconv.Quote(s))
			}
			b.WriteString("          ]\n        }\n")
		}
		list("publish", r.Publish)
		list("subscribe", r.Subscribe)
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.Bytes()
}
