package kubernetes_test

import (
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/crypto/bcrypt"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The hardening checks of the manifests: zone spread, scrape annotations, the NATS pods'
// secrets and lame duck, network policies and the ingress's public URL. nats_test.go checks the
// NATS configuration itself (route authorization and TLS, bcrypt hashes, lame-duck timing).

// metricsScraperLabel marks the namespace whose pods (Prometheus) may scrape Flow's metrics.
const metricsScraperLabel = "flowrun.dev/metrics-scraper"

// checkZoneSpread checks that the pods spread over zones, where the nodes have zone labels.
func checkZoneSpread(p problems, pod *corev1.PodSpec, podLabels map[string]string) {
	for _, c := range pod.TopologySpreadConstraints {
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err == nil && c.TopologyKey == "topology.kubernetes.io/zone" && c.MaxSkew == 1 && !sel.Empty() && sel.Matches(labels.Set(podLabels)) {
			return
		}
	}
	p.errorf("no topology spread constraint spreads these pods (%v) over zones (topologyKey topology.kubernetes.io/zone, maxSkew 1)", podLabels)
}

// checkScrape checks that the pod template tells Prometheus where its metrics are.
func checkScrape(p problems, tpl *corev1.PodTemplateSpec) {
	a := tpl.Annotations
	if a["prometheus.io/scrape"] != "true" {
		p.errorf(`the pod template has no annotation prometheus.io/scrape: "true"`)
		return
	}
	port, err := strconv.Atoi(a["prometheus.io/port"])
	if _, ok := podPortNumber(&tpl.Spec, intstr.FromInt32(int32(port))); err != nil || !ok {
		p.errorf("annotation prometheus.io/port %q is none of the pod's container ports", a["prometheus.io/port"])
	}
	if a["prometheus.io/path"] != "/metrics" {
		p.errorf("annotation prometheus.io/path %q, want /metrics", a["prometheus.io/path"])
	}
}

// natsContainer is the nats-server container of the NATS pod, or nil.
func natsContainer(pod *corev1.PodSpec) *corev1.Container {
	for i := range pod.Containers {
		if pod.Containers[i].Name == "nats" {
			return &pod.Containers[i]
		}
	}
	return nil
}

// plainPasswords are the NATS passwords the Flow services log in with (each Deployment's
// FLOW_NATS_PASSWORD), and the Secrets that hold them.
func plainPasswords(r rendered) (values map[string]bool, secrets map[string]bool) {
	values, secrets = map[string]bool{}, map[string]bool{}
	for _, d := range r.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if e := envVar(&c, "FLOW_NATS_PASSWORD"); e != nil && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				ref := e.ValueFrom.SecretKeyRef
				secrets[ref.Name] = true
				if s := r.secrets[ref.Name]; s != nil && len(s.Data[ref.Key]) > 0 {
					values[string(s.Data[ref.Key])] = true
				}
			}
		}
	}
	return values, secrets
}

// checkNATSSecrets checks that no NATS container holds a role's password, in its environment or
// in a mounted Secret, and that the variables auth.conf resolves are bcrypt hashes.
func checkNATSSecrets(p problems, r rendered, pod *corev1.PodSpec) {
	plain, plainSecrets := plainPasswords(r)
	if len(plain) == 0 {
		p.errorf("found no password the Flow services log in with (FLOW_NATS_PASSWORD from a Secret)")
	}
	for _, v := range pod.Volumes {
		if v.Secret != nil && plainSecrets[v.Secret.SecretName] {
			p.errorf("mounts Secret %s, which holds the services' plaintext passwords", v.Secret.SecretName)
		}
	}
	hashed := map[string]bool{}
	value := func(c *corev1.Container, name string, v []byte) {
		if plain[string(v)] {
			p.errorf("container %s: variable %s holds a role's plaintext password: give the NATS pods bcrypt hashes (make k8s-secrets)", c.Name, name)
		}
		if _, role := passwords[name]; role {
			if _, err := bcrypt.Cost(v); err != nil {
				p.errorf("container %s: variable %s, which auth.conf resolves, is not a bcrypt hash (%v)", c.Name, name, err)
			} else if c.Name == "nats" {
				hashed[name] = true
			}
		}
	}
	for i := range pod.Containers {
		c := &pod.Containers[i]
		for _, from := range c.EnvFrom {
			if from.SecretRef == nil {
				continue
			}
			if plainSecrets[from.SecretRef.Name] {
				p.errorf("container %s: takes its environment from Secret %s, which holds the services' plaintext passwords", c.Name, from.SecretRef.Name)
			}
			if s := r.secrets[from.SecretRef.Name]; s != nil {
				for k, v := range s.Data {
					value(c, from.Prefix+k, v)
				}
			}
		}
		for _, e := range c.Env {
			switch {
			case e.ValueFrom == nil:
				value(c, e.Name, []byte(e.Value))
			case e.ValueFrom.SecretKeyRef != nil:
				if s := r.secrets[e.ValueFrom.SecretKeyRef.Name]; s != nil {
					value(c, e.Name, s.Data[e.ValueFrom.SecretKeyRef.Key])
				}
			}
		}
	}
	for name := range passwords {
		if !hashed[name] {
			p.errorf("container nats: auth.conf resolves $%s, which its environment gives no bcrypt hash for", name)
		}
	}
}

// checkLameDuck checks that nats-server enters lame-duck mode before it is stopped, within a
// grace period that lets it finish (nats_test.go checks the durations against nats.conf).
func checkLameDuck(p problems, pod *corev1.PodSpec, c *corev1.Container) {
	var cmd []string
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Exec != nil {
		cmd = c.Lifecycle.PreStop.Exec.Command
	}
	if len(cmd) < 2 || path.Base(cmd[0]) != "nats-server" || !slices.ContainsFunc(cmd, func(a string) bool { return strings.Contains(a, "ldm") }) {
		p.errorf("container %s: no preStop hook that puts nats-server in lame-duck mode (nats-server --signal ldm=<pid file>), got %q", c.Name, cmd)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 45 {
		p.errorf("terminationGracePeriodSeconds %v: lame-duck mode needs time to move the clients and leaderships away", g)
	}
}

// peer is a pod that opens a connection to one of Flow's pods.
type peer struct {
	name   string
	pod    labels.Set
	ns     labels.Set
	sameNS bool // in the overlay's namespace
}

// podTemplates are the pod templates of the workloads, by "Kind name".
func podTemplates(r rendered) map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, d := range r.deployments {
		out["Deployment "+d.Name] = &d.Spec.Template
	}
	for _, s := range r.statefulSets {
		out["StatefulSet "+s.Name] = &s.Spec.Template
	}
	return out
}

// admits says whether the policies let from open a connection to port of a pod labelled target.
// An ipBlock peer counts as anyone (the checks are pessimistic).
func admits(r rendered, target labels.Set, port corev1.ContainerPort, from peer) bool {
	selected := false
	for _, pol := range r.policies {
		sel, err := metav1.LabelSelectorAsSelector(&pol.Spec.PodSelector)
		if err != nil || !sel.Matches(target) || !slices.Contains(ingressTypes(pol), networkingv1.PolicyTypeIngress) {
			continue
		}
		selected = true
		for _, rule := range pol.Spec.Ingress {
			if !portMatches(rule.Ports, port) {
				continue
			}
			if len(rule.From) == 0 {
				return true
			}
			for _, f := range rule.From {
				if f.IPBlock != nil {
					return true
				}
				nsOK := from.sameNS
				if f.NamespaceSelector != nil {
					s, err := metav1.LabelSelectorAsSelector(f.NamespaceSelector)
					nsOK = err == nil && s.Matches(from.ns)
				}
				podOK := true
				if f.PodSelector != nil {
					s, err := metav1.LabelSelectorAsSelector(f.PodSelector)
					podOK = err == nil && s.Matches(from.pod)
				}
				if nsOK && podOK {
					return true
				}
			}
		}
	}
	return !selected
}

// ingressTypes are the policy's types: Ingress when unset, as the API server defaults them.
func ingressTypes(pol *networkingv1.NetworkPolicy) []networkingv1.PolicyType {
	if len(pol.Spec.PolicyTypes) == 0 {
		return []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	}
	return pol.Spec.PolicyTypes
}

func portMatches(ports []networkingv1.NetworkPolicyPort, cp corev1.ContainerPort) bool {
	if len(ports) == 0 {
		return true
	}
	for _, np := range ports {
		switch {
		case np.Protocol != nil && *np.Protocol != corev1.ProtocolTCP:
		case np.Port == nil:
			return true
		case np.Port.Type == intstr.String && np.Port.StrVal == cp.Name:
			return true
		case np.Port.Type == intstr.Int && (np.Port.IntVal == cp.ContainerPort ||
			np.EndPort != nil && np.Port.IntVal <= cp.ContainerPort && cp.ContainerPort <= *np.EndPort):
			return true
		}
	}
	return false
}

// checkNetworkPolicies checks who may reach which port: only the ingress's HTTP port from
// outside Flow; NATS's client port from Flow's pods, its route port from NATS servers only;
// each pod's metrics port from a namespace labelled for scraping, and no other port from it.
func checkNetworkPolicies(p problems, r rendered) {
	if len(r.policies) == 0 {
		p.errorf("no NetworkPolicy: every pod may be reached from anywhere, any pod may join NATS as a route")
		return
	}
	ownNS := labels.Set{}
	if len(r.namespaces) == 1 {
		for k, v := range r.namespaces[0].Labels {
			ownNS[k] = v
		}
		ownNS["kubernetes.io/metadata.name"] = r.namespaces[0].Name
	}
	intruders := []peer{
		{name: "a pod of another namespace", pod: labels.Set{"app.kubernetes.io/name": "intruder"}, ns: labels.Set{"kubernetes.io/metadata.name": "elsewhere"}},
		{name: "a pod of the namespace that is not Flow's", pod: labels.Set{"app.kubernetes.io/name": "intruder"}, ns: ownNS, sameNS: true},
	}
	scraper := peer{name: "Prometheus in a namespace labelled " + metricsScraperLabel, pod: labels.Set{"app.kubernetes.io/name": "prometheus"},
		ns: labels.Set{"kubernetes.io/metadata.name": "monitoring", metricsScraperLabel: "true"}}
	templates := podTemplates(r)
	names := make([]string, 0, len(templates))
	for name := range templates {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		tpl := templates[name]
		q := p.about(name)
		target := labels.Set(tpl.Labels)
		selected := false
		for _, pol := range r.policies {
			sel, err := metav1.LabelSelectorAsSelector(&pol.Spec.PodSelector)
			if err == nil && sel.Matches(target) && slices.Contains(ingressTypes(pol), networkingv1.PolicyTypeIngress) {
				selected = true
			}
		}
		if !selected {
			q.errorf("no NetworkPolicy selects its pods (%v): anyone may reach them", tpl.Labels)
		}
		public := name == "Deployment flow-ingress"
		scrapePort := tpl.Annotations["prometheus.io/port"]
		for _, c := range tpl.Spec.Containers {
			for _, cp := range c.Ports {
				for _, in := range intruders {
					open := admits(r, target, cp, in)
					switch {
					case open && !(public && cp.Name == "http"):
						q.errorf("port %s (%d) admits %s: only Flow's pods may reach it", cp.Name, cp.ContainerPort, in.name)
					case !open && public && cp.Name == "http":
						q.errorf("port %s (%d) refuses %s: the ingress is Flow's door to the outside", cp.Name, cp.ContainerPort, in.name)
					}
				}
				isScrape := strconv.Itoa(int(cp.ContainerPort)) == scrapePort
				if open := admits(r, target, cp, scraper); isScrape && !open {
					q.errorf("metrics port %s (%d) refuses %s", cp.Name, cp.ContainerPort, scraper.name)
				} else if open && !isScrape && !public {
					q.errorf("port %s (%d) admits %s, which needs only the metrics port %s", cp.Name, cp.ContainerPort, scraper.name, scrapePort)
				}
			}
		}
	}
	// NATS: the routes only between NATS servers, the clients from every Flow service.
	for _, s := range r.statefulSets {
		q := p.about("StatefulSet " + s.Name)
		c := natsContainer(&s.Spec.Template.Spec)
		if c == nil {
			continue
		}
		target := labels.Set(s.Spec.Template.Labels)
		for _, cp := range c.Ports {
			for _, name := range names {
				tpl := templates[name]
				from := peer{name: "the pods of " + name, pod: labels.Set(tpl.Labels), ns: ownNS, sameNS: true}
				open := admits(r, target, cp, from)
				isNATS := labels.Set(tpl.Labels).Get("app.kubernetes.io/name") == s.Spec.Template.Labels["app.kubernetes.io/name"]
				switch {
				case cp.ContainerPort == 6222 && open && !isNATS:
					q.errorf("route port %d admits %s: only NATS servers may open routes", cp.ContainerPort, from.name)
				case cp.ContainerPort == 6222 && !open && isNATS:
					q.errorf("route port %d refuses %s: the servers cannot form their cluster", cp.ContainerPort, from.name)
				case cp.ContainerPort == 4222 && !open && !isNATS:
					q.errorf("client port %d refuses %s: the service cannot reach NATS", cp.ContainerPort, from.name)
				}
			}
		}
	}
}

// checkPublicURL checks that the ingress hands third parties a URL they can reach: set by the
// overlay, absolute, and not a name that resolves only inside the cluster.
func checkPublicURL(p problems, r rendered) {
	var d *appsv1.Deployment
	for _, dep := range r.deployments {
		if dep.Name == "flow-ingress" {
			d = dep
		}
	}
	if d == nil || len(d.Spec.Template.Spec.Containers) == 0 {
		return // checkAll reports the missing Deployment
	}
	q := p.about("Deployment flow-ingress")
	raw := containerEnv(r, &d.Spec.Template.Spec.Containers[0])["FLOW_INGRESS_PUBLIC_URL"]
	if raw == "" {
		q.errorf("no FLOW_INGRESS_PUBLIC_URL: hook URLs would name the pod's listen address; set the public URL in the overlay's flow-config")
		return
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		q.errorf("FLOW_INGRESS_PUBLIC_URL %q is not an absolute http or https URL", raw)
		return
	}
	host := u.Hostname()
	internal := host == "0.0.0.0" || strings.HasSuffix(host, ".svc") || strings.HasSuffix(host, ".cluster.local") || strings.Contains(host, ".svc.")
	for _, s := range r.services {
		if host == s.Name || strings.HasPrefix(host, s.Name+".") && !strings.Contains(strings.TrimPrefix(host, s.Name+"."), ".") {
			internal = true
		}
	}
	if internal {
		q.errorf("FLOW_INGRESS_PUBLIC_URL %q names a cluster-internal host: third parties given hook URLs cannot reach it", raw)
	}
}
