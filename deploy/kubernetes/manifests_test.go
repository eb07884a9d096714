package kubernetes_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const devOverlay = "overlays/dev"

// services are the Deployments and the port of each one's HTTP listener (docs/kubernetes.md).
var services = map[string]int32{"history": 8420, "ingress": 8421, "scheduler": 8422, "worker": 8423}

// rendered is the output of a kustomization, by kind.
type rendered struct {
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	pdbs         []*policyv1.PodDisruptionBudget
	policies     []*networkingv1.NetworkPolicy
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	namespaces   []*corev1.Namespace
	all          []metav1.Object
}

func sortOut(t *testing.T, objs []runtime.Object) rendered {
	r := rendered{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			r.deployments = append(r.deployments, o)
		case *appsv1.StatefulSet:
			r.statefulSets = append(r.statefulSets, o)
		case *corev1.Service:
			r.services = append(r.services, o)
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *networkingv1.NetworkPolicy:
			r.policies = append(r.policies, o)
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *corev1.Secret:
			r.secrets[o.Name] = o
		case *corev1.Namespace:
			r.namespaces = append(r.namespaces, o)
		default:
			t.Fatalf("the manifests hold a %T, which this test does not check: add checks for it", o)
		}
		r.all = append(r.all, o.(metav1.Object))
	}
	return r
}

// The base renders on its own and every object in it decodes strictly. (It cannot be applied on
// its own: the overlay supplies the Secrets.)
func TestBaseDecodesStrictly(t *testing.T) {
	t.Parallel()
	sortOut(t, mustBuild(t, "base"))
}

func TestDevOverlay(t *testing.T) {
	t.Parallel()
	for _, p := range checkAll(sortOut(t, mustBuild(t, devOverlay))) {
		t.Error(p)
	}
}

// problems collects what is wrong with the manifests, each line naming the object.
type problems struct {
	subject string
	list    *[]string
}

func (p problems) errorf(format string, args ...any) {
	*p.list = append(*p.list, p.subject+": "+fmt.Sprintf(format, args...))
}

// about is p for another object.
func (p problems) about(subject string) problems { return problems{subject, p.list} }

// checkAll returns what is wrong with the rendered dev overlay.
func checkAll(r rendered) []string {
	var list []string
	p := problems{"manifests", &list}
	if len(r.namespaces) != 1 || r.namespaces[0].Name != "flow-dev" {
		p.errorf("the dev overlay must create exactly the namespace flow-dev, got %d namespaces", len(r.namespaces))
	}
	for _, o := range r.all {
		if _, ns := o.(*corev1.Namespace); !ns && o.GetNamespace() != "flow-dev" {
			p.about(o.GetName()).errorf("in namespace %q, want flow-dev", o.GetNamespace())
		}
	}

	var names []string
	for _, d := range r.deployments {
		names = append(names, d.Name)
	}
	for svc := range services {
		if !slices.Contains(names, "flow-"+svc) {
			p.errorf("no Deployment flow-%s among %v", svc, names)
		}
	}
	for _, d := range r.deployments {
		checkDeployment(p.about("Deployment "+d.Name), r, d)
		checkReferences(p.about("Deployment "+d.Name), r, &d.Spec.Template.Spec)
	}

	if len(r.statefulSets) != 1 {
		p.errorf("want the one StatefulSet nats, got %d", len(r.statefulSets))
	}
	for _, s := range r.statefulSets {
		checkNATS(p.about("StatefulSet "+s.Name), r, s)
		checkReferences(p.about("StatefulSet "+s.Name), r, &s.Spec.Template.Spec)
	}

	for _, s := range r.services {
		checkService(p.about("Service "+s.Name), r, s)
	}
	// A Service for every process: the history's and ingress's APIs, the scheduler's and worker's
	// metrics and probes, the NATS clients' address and the routes' headless Service.
	for _, name := range []string{"flow-history", "flow-ingress", "flow-scheduler", "flow-worker", "nats", "nats-headless"} {
		if !slices.ContainsFunc(r.services, func(s *corev1.Service) bool { return s.Name == name }) {
			p.errorf("no Service %s", name)
		}
	}
	checkNetworkPolicies(p, r)
	checkPublicURL(p, r)
	return list
}

// checkDeployment checks a Flow service's Deployment: image, arguments, listen address, probes,
// resources, security context, anti-affinity and PodDisruptionBudget.
func checkDeployment(p problems, r rendered, d *appsv1.Deployment) {
	svc := strings.TrimPrefix(d.Name, "flow-")
	port, known := services[svc]
	if !known {
		p.errorf("no Flow service (%v)", services)
		return
	}
	pod := &d.Spec.Template.Spec
	checkWorkload(p, r, &d.Spec.Template, d.Spec.Selector, d.Spec.Replicas)
	if len(pod.Containers) != 1 {
		p.errorf("want one container, got %d", len(pod.Containers))
		return
	}
	c := &pod.Containers[0]
	if c.Image != "flowrun/flow:dev" {
		p.errorf("image %q, want flowrun/flow:dev", c.Image)
	}
	if len(c.Command) != 0 || !slices.Equal(c.Args, []string{svc}) {
		p.errorf("command %q args %q: want the image's entrypoint /flowd with args [%q]", c.Command, c.Args, svc)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == port }) {
		p.errorf("no container port %d among %v", port, c.Ports)
	}
	addr := "FLOW_" + strings.ToUpper(svc) + "_HTTP_ADDR"
	if v, ok := envValue(c, addr); !ok || v != fmt.Sprintf("0.0.0.0:%d", port) {
		p.errorf("%s = %q, want 0.0.0.0:%d (the probes and the Service reach the pod's address)", addr, v, port)
	}
	if v, _ := envValue(c, "FLOW_NATS_USER"); v != "flow-"+svc {
		p.errorf("FLOW_NATS_USER = %q, want flow-%s", v, svc)
	}
	if e := envVar(c, "FLOW_NATS_PASSWORD"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		p.errorf("FLOW_NATS_PASSWORD must come from a Secret (secretKeyRef)")
	} else if want := "NATS_" + strings.ToUpper(svc) + "_PASSWORD"; e.ValueFrom.SecretKeyRef.Key != want {
		p.errorf("FLOW_NATS_PASSWORD is key %q, want %q", e.ValueFrom.SecretKeyRef.Key, want)
	}
	env := containerEnv(r, c)
	if env["FLOW_STREAMS_REPLICAS"] != "3" {
		p.errorf("FLOW_STREAMS_REPLICAS = %q, want 3 (one replica per NATS server)", env["FLOW_STREAMS_REPLICAS"])
	}
	if env["FLOW_NATS_URL"] != "nats://nats:4222" {
		p.errorf("FLOW_NATS_URL = %q, want nats://nats:4222", env["FLOW_NATS_URL"])
	}
	if svc == "ingress" {
		checkTokensFile(p, r, pod, c)
	}
	checkProbe(p, c, "readiness", c.ReadinessProbe, "/readyz", port)
	checkProbe(p, c, "liveness", c.LivenessProbe, "/healthz", port)
	checkResources(p, c)
	checkContainerSecurity(p, c)
}

// checkWorkload checks what the pod template of every Deployment and StatefulSet must hold: pod
// security, anti-affinity, zone spread, a selector that selects it, one PodDisruptionBudget for
// its replicas and the scrape annotations.
func checkWorkload(p problems, r rendered, tpl *corev1.PodTemplateSpec, selector *metav1.LabelSelector, replicas *int32) {
	checkPodSecurity(p, &tpl.Spec)
	checkAntiAffinity(p, &tpl.Spec, tpl.Labels)
	checkZoneSpread(p, &tpl.Spec, tpl.Labels)
	checkSelector(p, selector, tpl.Labels)
	checkPDB(p, r, tpl.Labels, replicas)
	checkScrape(p, tpl)
}

// checkProbe checks that probe is an HTTP GET of path on a port of c, the one numbered want.
func checkProbe(p problems, c *corev1.Container, kind string, probe *corev1.Probe, path string, want int32) {
	if probe == nil || probe.HTTPGet == nil {
		p.errorf("container %s: no HTTP %s probe", c.Name, kind)
		return
	}
	if probe.HTTPGet.Path != path {
		p.errorf("container %s: %s probe on %q, want %q", c.Name, kind, probe.HTTPGet.Path, path)
	}
	got, ok := portNumber(c, probe.HTTPGet.Port)
	if !ok {
		p.errorf("container %s: %s probe port %s is none of the container's ports %v", c.Name, kind, probe.HTTPGet.Port.String(), c.Ports)
	} else if want != 0 && got != want {
		p.errorf("container %s: %s probe on port %d, want %d", c.Name, kind, got, want)
	}
}

// podPortNumber resolves a port given by number or by name against the ports of the pod's
// containers.
func podPortNumber(pod *corev1.PodSpec, port intstr.IntOrString) (int32, bool) {
	for i := range pod.Containers {
		if n, ok := portNumber(&pod.Containers[i], port); ok {
			return n, true
		}
	}
	return 0, false
}

// portNumber resolves a port given by number or by name against c's ports.
func portNumber(c *corev1.Container, port intstr.IntOrString) (int32, bool) {
	for _, p := range c.Ports {
		if (port.Type == intstr.Int && p.ContainerPort == port.IntVal) ||
			(port.Type == intstr.String && p.Name == port.StrVal) {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

func checkResources(p problems, c *corev1.Container) {
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[res], c.Resources.Limits[res]
		if req.IsZero() || lim.IsZero() {
			p.errorf("container %s: %s request %s limit %s: set both", c.Name, res, req.String(), lim.String())
		} else if req.Cmp(lim) > 0 {
			p.errorf("container %s: %s request %s exceeds its limit %s", c.Name, res, req.String(), lim.String())
		}
	}
}

func checkPodSecurity(p problems, pod *corev1.PodSpec) {
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		p.errorf("pod securityContext must set runAsNonRoot and runAsUser 65532 (the images' user)")
	}
	if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		p.errorf("pod securityContext must set seccompProfile RuntimeDefault")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		p.errorf("the pods use no Kubernetes API: set automountServiceAccountToken false")
	}
}

func checkContainerSecurity(p problems, c *corev1.Container) {
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		p.errorf("container %s: set readOnlyRootFilesystem", c.Name)
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		p.errorf("container %s: set allowPrivilegeEscalation false", c.Name)
	}
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		p.errorf("container %s: drop ALL capabilities and add none", c.Name)
	}
}

// checkAntiAffinity checks that the pods keep apart from each other across nodes.
func checkAntiAffinity(p problems, pod *corev1.PodSpec, podLabels map[string]string) {
	if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil {
		p.errorf("no pod anti-affinity")
		return
	}
	aa := pod.Affinity.PodAntiAffinity
	terms := slices.Clone(aa.RequiredDuringSchedulingIgnoredDuringExecution)
	for _, w := range aa.PreferredDuringSchedulingIgnoredDuringExecution {
		terms = append(terms, w.PodAffinityTerm)
	}
	for _, term := range terms {
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err == nil && term.TopologyKey == "kubernetes.io/hostname" && !sel.Empty() && sel.Matches(labels.Set(podLabels)) {
			return
		}
	}
	p.errorf("no anti-affinity term keeps these pods (%v) on distinct nodes (topologyKey kubernetes.io/hostname)", podLabels)
}

// checkSelector checks that a workload's selector selects its own pod template.
func checkSelector(p problems, selector *metav1.LabelSelector, podLabels map[string]string) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(podLabels)) {
		p.errorf("the selector does not select the pod template (%v)", podLabels)
	}
}

// checkPDB checks that exactly one PodDisruptionBudget selects the pods, allowing one down, and
// that there are at least two of them: over one replica a budget protects nothing (a drain
// evicts it anyway once maxUnavailable 1 allows it, and minAvailable 1 would block drains).
func checkPDB(p problems, r rendered, podLabels map[string]string, replicas *int32) {
	var found []*policyv1.PodDisruptionBudget
	for _, pdb := range r.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			p.errorf("PodDisruptionBudget %s: %v", pdb.Name, err)
			continue
		}
		if !sel.Empty() && sel.Matches(labels.Set(podLabels)) {
			found = append(found, pdb)
		}
	}
	if len(found) != 1 {
		p.errorf("want one PodDisruptionBudget selecting its pods, got %d", len(found))
		return
	}
	if mu := found[0].Spec.MaxUnavailable; mu == nil || mu.String() != "1" || found[0].Spec.MinAvailable != nil {
		p.errorf("PodDisruptionBudget %s must set maxUnavailable 1 (and no minAvailable)", found[0].Name)
	}
	if replicaCount(replicas) < 2 {
		p.errorf("PodDisruptionBudget %s covers %d replica(s): run at least 2, or drop the budget", found[0].Name, replicaCount(replicas))
	}
}

// replicaCount is a workload's replicas, 1 when unset (the API's default).
func replicaCount(replicas *int32) int32 {
	if replicas == nil {
		return 1
	}
	return *replicas
}

// checkNATS checks the nats-server StatefulSet: 3 servers, JetStream on persistent volumes, a
// headless Service for the routes, probes on /healthz, a PodDisruptionBudget and anti-affinity.
func checkNATS(p problems, r rendered, s *appsv1.StatefulSet) {
	if s.Spec.Replicas == nil || *s.Spec.Replicas != 3 {
		p.errorf("StatefulSet %s: want 3 replicas, got %v", s.Name, s.Spec.Replicas)
	}
	if len(s.Spec.VolumeClaimTemplates) == 0 {
		p.errorf("no volumeClaimTemplates: JetStream needs a persistent volume per server")
		return
	}
	pod := &s.Spec.Template.Spec
	checkWorkload(p, r, &s.Spec.Template, s.Spec.Selector, s.Spec.Replicas)
	checkNATSSecrets(p, r, pod)
	c := natsContainer(pod)
	if c == nil {
		p.errorf("no container named nats among %d", len(pod.Containers))
		return
	}
	for i := range pod.Containers {
		checkResources(p, &pod.Containers[i])
		checkContainerSecurity(p, &pod.Containers[i])
	}
	checkLameDuck(p, pod, c)
	if c.Image != "flowrun/nats:dev" {
		p.errorf("image %q, want flowrun/nats:dev", c.Image)
	}
	claim := s.Spec.VolumeClaimTemplates[0].Name
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == claim && m.MountPath == "/data" }) {
		p.errorf("the claim %s is not mounted at /data, JetStream's store_dir", claim)
	}
	for kind, probe := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe != nil && probe.HTTPGet != nil {
			checkProbe(p, c, kind, probe, probe.HTTPGet.Path, 8222)
			if path, _, _ := strings.Cut(probe.HTTPGet.Path, "?"); path != "/healthz" {
				p.errorf("%s probe on %s, want nats-server's /healthz", kind, probe.HTTPGet.Path)
			}
		} else {
			p.errorf("no HTTP %s probe", kind)
		}
	}
	// Ready only when JetStream is current: /healthz without options checks the meta leader and
	// every stream and consumer replica of the server; js-server-only checks none of it,
	// js-enabled-only only that JetStream is on, js-meta-only not the streams.
	if probe := c.ReadinessProbe; probe != nil && probe.HTTPGet != nil && probe.HTTPGet.Path != "/healthz" {
		p.errorf("readiness probe on %s admits a server whose JetStream is not current: want /healthz without options", probe.HTTPGet.Path)
	}
	var headless *corev1.Service
	for _, svc := range r.services {
		if svc.Name == s.Spec.ServiceName {
			headless = svc
		}
	}
	switch {
	case headless == nil:
		p.errorf("serviceName %q names no Service", s.Spec.ServiceName)
	case headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses:
		p.errorf("Service %s must be headless (clusterIP None) and publishNotReadyAddresses, for the routes", headless.Name)
	case !slices.ContainsFunc(headless.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 6222 }):
		p.errorf("Service %s has no route port 6222", headless.Name)
	}
}

// checkTokensFile checks that the ingress reads its bearer tokens from a mounted Secret.
func checkTokensFile(p problems, r rendered, pod *corev1.PodSpec, c *corev1.Container) {
	file, ok := envValue(c, "FLOW_INGRESS_TOKENS_FILE")
	if !ok {
		p.errorf("the ingress has no FLOW_INGRESS_TOKENS_FILE")
		return
	}
	for _, m := range c.VolumeMounts {
		dir := strings.TrimSuffix(m.MountPath, "/") + "/"
		if !strings.HasPrefix(file, dir) {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			key := strings.TrimPrefix(file, dir)
			for _, it := range v.Secret.Items {
				if it.Path == key {
					key = it.Key
				}
			}
			if sec := r.secrets[v.Secret.SecretName]; sec == nil || len(sec.Data[key]) == 0 {
				p.errorf("FLOW_INGRESS_TOKENS_FILE %s: Secret %s has no key %s", file, v.Secret.SecretName, key)
			}
			return
		}
	}
	p.errorf("FLOW_INGRESS_TOKENS_FILE %s is in no mounted Secret", file)
}

// checkReferences checks that every Secret and ConfigMap, and every key, that a pod refers to
// exists in the output.
func checkReferences(p problems, r rendered, pod *corev1.PodSpec) {
	secret := func(name, key string) {
		s, ok := r.secrets[name]
		switch {
		case !ok:
			p.errorf("refers to Secret %q, which the manifests do not define", name)
		case key != "" && len(s.Data[key]) == 0 && s.StringData[key] == "":
			p.errorf("refers to key %q of Secret %s, which has none", key, name)
		}
	}
	configMap := func(name, key string) {
		cm, ok := r.configMaps[name]
		switch {
		case !ok:
			p.errorf("refers to ConfigMap %q, which the manifests do not define", name)
		case key != "" && cm.Data[key] == "":
			p.errorf("refers to key %q of ConfigMap %s, which has none", key, name)
		}
	}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secret(v.Secret.SecretName, "")
			for _, it := range v.Secret.Items {
				secret(v.Secret.SecretName, it.Key)
			}
		}
		if v.ConfigMap != nil {
			configMap(v.ConfigMap.Name, "")
			for _, it := range v.ConfigMap.Items {
				configMap(v.ConfigMap.Name, it.Key)
			}
		}
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		for _, from := range c.EnvFrom {
			if from.SecretRef != nil {
				secret(from.SecretRef.Name, "")
			}
			if from.ConfigMapRef != nil {
				configMap(from.ConfigMapRef.Name, "")
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if ref := e.ValueFrom.SecretKeyRef; ref != nil {
				secret(ref.Name, ref.Key)
			}
			if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil {
				configMap(ref.Name, ref.Key)
			}
		}
		for _, m := range c.VolumeMounts {
			if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) &&
				!slices.ContainsFunc(r.volumeClaims(), func(n string) bool { return n == m.Name }) {
				p.errorf("container %s mounts volume %q, which the pod does not have", c.Name, m.Name)
			}
		}
	}
}

// volumeClaims are the names of the StatefulSets' volume claim templates.
func (r rendered) volumeClaims() []string {
	var names []string
	for _, s := range r.statefulSets {
		for _, c := range s.Spec.VolumeClaimTemplates {
			names = append(names, c.Name)
		}
	}
	return names
}

// checkService checks that a Service selects some pods and targets ports they have.
func checkService(p problems, r rendered, s *corev1.Service) {
	var templates []corev1.PodTemplateSpec
	for _, d := range r.deployments {
		templates = append(templates, d.Spec.Template)
	}
	for _, st := range r.statefulSets {
		templates = append(templates, st.Spec.Template)
	}
	sel := labels.SelectorFromSet(s.Spec.Selector)
	matched := 0
	for _, tpl := range templates {
		if len(s.Spec.Selector) == 0 || !sel.Matches(labels.Set(tpl.Labels)) {
			continue
		}
		matched++
		for _, port := range s.Spec.Ports {
			if _, ok := podPortNumber(&tpl.Spec, port.TargetPort); !ok {
				p.errorf("port %s targets %s, which pods %v do not have", port.Name, port.TargetPort.String(), tpl.Labels)
			}
		}
	}
	if matched == 0 {
		p.errorf("selects no pods (%v)", s.Spec.Selector)
	}
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// envValue is the literal value of the container's variable name.
func envValue(c *corev1.Container, name string) (string, bool) {
	if e := envVar(c, name); e != nil && e.ValueFrom == nil {
		return e.Value, true
	}
	return "", false
}

// containerEnv is the container's environment from its ConfigMaps and literal variables (later
// ones win, as in Kubernetes).
func containerEnv(r rendered, c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef != nil {
			if cm := r.configMaps[from.ConfigMapRef.Name]; cm != nil {
				for k, v := range cm.Data {
					env[from.Prefix+k] = v
				}
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}
