package deploy_test

// Tests of deploy/k8s/: every YAML document decodes strictly (unknown
// fields refused) into the Kubernetes API type its apiVersion and kind
// name, from k8s.io/api, and passes the checks of k8s.io/apimachinery's
// validation (names, labels, ports, selectors); then the references
// between the files hold: the ConfigMap carries nats-cluster.conf and
// accounts.conf unchanged, the StatefulSet and its service give the pods
// the names the routes dial, the secrets are those deploy/README.md tells
// how to make, and the probes, ports, metrics annotations, image and
// binary path agree with each other, with the systemd units and with the
// Containerfile.

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite deploy/k8s/nats-config.yaml from nats-cluster.conf and accounts.conf")

// image is the gpuq image every manifest runs and the README builds.
const image = "ghcr.io/gpuq/gpuq:latest"

// manifests is every object of deploy/k8s, by kind and name.
type manifests struct {
	configMaps   map[string]*corev1.ConfigMap
	services     map[string]*corev1.Service
	statefulSets map[string]*appsv1.StatefulSet
	deployments  map[string]*appsv1.Deployment
	daemonSets   map[string]*appsv1.DaemonSet
	pdbs         map[string]*policyv1.PodDisruptionBudget
	namespaces   map[string]*corev1.Namespace
}

// loadManifests decodes every document of every file in deploy/k8s
// strictly into its type.
func loadManifests(t *testing.T) manifests {
	t.Helper()
	m := manifests{configMaps: map[string]*corev1.ConfigMap{}, services: map[string]*corev1.Service{},
		statefulSets: map[string]*appsv1.StatefulSet{}, deployments: map[string]*appsv1.Deployment{},
		daemonSets: map[string]*appsv1.DaemonSet{}, pdbs: map[string]*policyv1.PodDisruptionBudget{}, namespaces: map[string]*corev1.Namespace{}}
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/k8s: %v", err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			where := fmt.Sprintf("%s document %d", file, i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var obj metav1.Object
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 ConfigMap":
				obj = decode(t, where, doc, m.configMaps)
			case "v1 Service":
				obj = decode(t, where, doc, m.services)
			case "apps/v1 StatefulSet":
				obj = decode(t, where, doc, m.statefulSets)
			case "apps/v1 Deployment":
				obj = decode(t, where, doc, m.deployments)
			case "apps/v1 DaemonSet":
				obj = decode(t, where, doc, m.daemonSets)
			case "policy/v1 PodDisruptionBudget":
				obj = decode(t, where, doc, m.pdbs)
			case "v1 Namespace":
				obj = decode(t, where, doc, m.namespaces)
			default:
				t.Fatalf("%s: apiVersion %q kind %q is none this test knows", where, tm.APIVersion, tm.Kind)
			}
			for _, msg := range validation.IsDNS1123Subdomain(obj.GetName()) {
				t.Errorf("%s: name %q: %s", where, obj.GetName(), msg)
			}
			if tm.Kind != "Namespace" && obj.GetNamespace() != "gpuq" {
				t.Errorf("%s: namespace %q, want gpuq", where, obj.GetNamespace())
			}
			checkLabels(t, where, obj.GetLabels())
		}
	}
	return m
}

// decode decodes doc into a new T, refusing unknown and duplicate fields,
// and files it in into by name.
func decode[T any, P interface {
	*T
	metav1.Object
}](t *testing.T, where, doc string, into map[string]P) P {
	t.Helper()
	obj := P(new(T))
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if _, dup := into[obj.GetName()]; dup {
		t.Fatalf("%s: a second object named %s", where, obj.GetName())
	}
	into[obj.GetName()] = obj
	return obj
}

func checkLabels(t *testing.T, where string, l map[string]string) {
	t.Helper()
	for k, v := range l {
		for _, msg := range validation.IsQualifiedName(k) {
			t.Errorf("%s: label key %q: %s", where, k, msg)
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			t.Errorf("%s: label %s=%q: %s", where, k, v, msg)
		}
	}
}

func stripComments(doc string) string {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")
}

// checkPod checks what every pod template must get right: its selector
// selects it, its names, ports and environment are valid, each port a
// probe names is one of its container's, and each volume it mounts it
// has or claims (a StatefulSet's volume claim templates). It returns the
// template's only container.
func checkPod(t *testing.T, where string, sel *metav1.LabelSelector, tpl corev1.PodTemplateSpec, claims ...string) corev1.Container {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() || !s.Matches(labels.Set(tpl.Labels)) {
		t.Errorf("%s: selector %v does not select its pods %v (%v)", where, sel, tpl.Labels, err)
	}
	checkLabels(t, where, tpl.Labels)
	if len(tpl.Spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", where, len(tpl.Spec.Containers))
	}
	c := tpl.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		for _, msg := range append(validation.IsValidPortName(p.Name), validation.IsValidPortNum(int(p.ContainerPort))...) {
			t.Errorf("%s: port %s %d: %s", where, p.Name, p.ContainerPort, msg)
		}
		ports[p.Name] = p.ContainerPort
	}
	for _, e := range c.Env {
		for _, msg := range validation.IsEnvVarName(e.Name) {
			t.Errorf("%s: env %s: %s", where, e.Name, msg)
		}
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			continue
		}
		if _, ok := ports[p.HTTPGet.Port.String()]; !ok {
			t.Errorf("%s: %s probe on port %s, which the container does not name", where, name, p.HTTPGet.Port.String())
		}
	}
	vols := map[string]bool{}
	for _, c := range claims {
		vols[c] = true
	}
	for _, v := range tpl.Spec.Volumes {
		vols[v.Name] = true
	}
	for _, vm := range c.VolumeMounts {
		if !vols[vm.Name] {
			t.Errorf("%s: mounts volume %s, which the pod does not have", where, vm.Name)
		}
	}
	return c
}

// env returns the value of the container's variable name.
func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func TestK8sNATSConfigMap(t *testing.T) {
	want := natsConfigMap(t)
	got, err := os.ReadFile("k8s/nats-config.yaml")
	if *update {
		if err := os.WriteFile("k8s/nats-config.yaml", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("k8s/nats-config.yaml does not carry nats-cluster.conf and accounts.conf as they are (%v): run go test ./deploy -run TestK8sNATSConfigMap -update", err)
	}
}

// natsConfigMap is deploy/k8s/nats-config.yaml: ConfigMap nats-config
// with nats-cluster.conf as nats.conf and accounts.conf, which it
// includes, next to it.
func natsConfigMap(t *testing.T) []byte {
	t.Helper()
	cm := corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "nats-config", Namespace: "gpuq", Labels: map[string]string{"app.kubernetes.io/name": "nats", "app.kubernetes.io/part-of": "gpuq"}},
		Data:       map[string]string{"nats.conf": readFile(t, "nats-cluster.conf"), "accounts.conf": readFile(t, "accounts.conf")},
	}
	b, err := yaml.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	head := "# Generated from deploy/nats-cluster.conf (as nats.conf) and\n" +
		"# deploy/accounts.conf by `go test ./deploy -run TestK8sNATSConfigMap -update`;\n" +
		"# edit those files, not this one (deploy/k8s_test.go fails while they differ).\n"
	return append([]byte(head), b...)
}

func TestK8sManifests(t *testing.T) {
	m := loadManifests(t)
	readme := readFile(t, "README.md")

	// NATS: the StatefulSet runs the ConfigMap's nats.conf, under the
	// headless service its routes dial, as many pods as routes.
	cm := m.configMaps["nats-config"]
	if cm == nil || cm.Data["nats.conf"] != readFile(t, "nats-cluster.conf") || cm.Data["accounts.conf"] != readFile(t, "accounts.conf") {
		t.Fatal("ConfigMap nats-config does not carry nats-cluster.conf as nats.conf and accounts.conf")
	}
	sts, svc := m.statefulSets["nats"], m.services["nats"]
	if sts == nil || svc == nil {
		t.Fatal("no StatefulSet nats or Service nats")
	}
	var claims []string
	for _, c := range sts.Spec.VolumeClaimTemplates {
		claims = append(claims, c.Name)
	}
	nats := checkPod(t, "StatefulSet nats", sts.Spec.Selector, sts.Spec.Template, claims...)
	if sts.Spec.ServiceName != svc.Name || svc.Spec.ClusterIP != corev1.ClusterIPNone || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("StatefulSet nats: service %q; Service nats: clusterIP %q, selector %v; want the headless service selecting the pods", sts.Spec.ServiceName, svc.Spec.ClusterIP, svc.Spec.Selector)
	}
	// The routes log in with the password of the Secret the README makes,
	// set before the routes that expand it.
	pw, ok := env(nats, "GPUQ_ROUTE_PASSWORD")
	if !ok || pw.ValueFrom == nil || pw.ValueFrom.SecretKeyRef == nil || pw.ValueFrom.SecretKeyRef.Name != "gpuq-nats-route" || pw.ValueFrom.SecretKeyRef.Key != "password" ||
		!slices.Equal(readmeSecretKeys(t, readme, "gpuq-nats-route"), []string{"password"}) {
		t.Errorf("StatefulSet nats: GPUQ_ROUTE_PASSWORD %+v, want key password of the README's Secret gpuq-nats-route", pw)
	}
	routesVar, _ := env(nats, "GPUQ_NATS_ROUTES")
	if slices.IndexFunc(nats.Env, func(e corev1.EnvVar) bool { return e.Name == "GPUQ_NATS_ROUTES" }) < slices.IndexFunc(nats.Env, func(e corev1.EnvVar) bool { return e.Name == "GPUQ_ROUTE_PASSWORD" }) {
		t.Error("StatefulSet nats: GPUQ_NATS_ROUTES comes before GPUQ_ROUTE_PASSWORD, so $(GPUQ_ROUTE_PASSWORD) is not expanded in it")
	}
	routes := routeHosts(t, routesVar.Value)
	if sts.Spec.Replicas == nil || int(*sts.Spec.Replicas) != len(routes) || len(routes) != 3 {
		t.Errorf("StatefulSet nats: %v replicas for %d routes, want 3 and 3", sts.Spec.Replicas, len(routes))
	}
	for i, r := range routes {
		if r != fmt.Sprintf("%s-%d.%s", sts.Name, i, svc.Name) {
			t.Errorf("route %d of GPUQ_NATS_ROUTES dials %s, not pod %s-%d of service %s", i, r, sts.Name, i, svc.Name)
		}
	}
	if !slices.Equal(nats.Args, []string{"--config", "/etc/nats/nats.conf"}) || mountOf(nats, "config") != "/etc/nats" || volumeOf(sts.Spec.Template.Spec, "config").ConfigMap == nil ||
		volumeOf(sts.Spec.Template.Spec, "config").ConfigMap.Name != cm.Name {
		t.Errorf("StatefulSet nats does not run /etc/nats/nats.conf from ConfigMap %s: args %v", cm.Name, nats.Args)
	}
	if e, ok := env(nats, "GPUQ_NATS_NAME"); !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("StatefulSet nats: GPUQ_NATS_NAME %+v, want the pod's name", e)
	}
	// The server as each pod parses the file: its name, its store on the
	// data volume and under the volume's size, its ports the service's.
	for _, v := range readmeSecretKeys(t, readme, "gpuq-nats-users") {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(v, pub)
	}
	keys := regexp.MustCompile(`\$(GPUQ_[A-Z0-9_]+_NKEY)`).FindAllStringSubmatch(cm.Data["accounts.conf"], -1)
	for _, k := range keys {
		if !slices.Contains(readmeSecretKeys(t, readme, "gpuq-nats-users"), k[1]) {
			t.Errorf("accounts.conf reads $%s, which the README's Secret gpuq-nats-users does not set", k[1])
		}
	}
	if len(nats.EnvFrom) != 1 || nats.EnvFrom[0].SecretRef == nil || nats.EnvFrom[0].SecretRef.Name != "gpuq-nats-users" {
		t.Errorf("StatefulSet nats: envFrom %+v, want Secret gpuq-nats-users", nats.EnvFrom)
	}
	dir := t.TempDir()
	for name, body := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GPUQ_NATS_NAME", "nats-0")
	t.Setenv("GPUQ_ROUTE_PASSWORD", "gpuq-0123456789abcdef")
	t.Setenv("GPUQ_NATS_ROUTES", strings.ReplaceAll(routesVar.Value, "$(GPUQ_ROUTE_PASSWORD)", "gpuq-0123456789abcdef"))
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("the ConfigMap's nats.conf: %v", err)
	}
	if opts.Cluster.Username != "gpuq-route" || opts.Cluster.Password != "gpuq-0123456789abcdef" || len(opts.Routes) != 3 {
		t.Errorf("the ConfigMap's nats.conf: routes log in as %q/%q, %d routes; want gpuq-route with $GPUQ_ROUTE_PASSWORD and the 3 of $GPUQ_NATS_ROUTES", opts.Cluster.Username, opts.Cluster.Password, len(opts.Routes))
	}
	if data := mountOf(nats, "data"); data == "" || !strings.HasPrefix(opts.StoreDir, data+"/") {
		t.Errorf("store_dir %s is not on the data volume (mounted at %q)", opts.StoreDir, data)
	}
	if pid := mountOf(nats, "run"); pid == "" || filepath.Dir(opts.PidFile) != pid {
		t.Errorf("pid_file %s is not on the run volume (mounted at %q), where the preStop hook looks", opts.PidFile, pid)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatal("StatefulSet nats: want one volume claim template, data")
	}
	claim := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
	if sts.Spec.VolumeClaimTemplates[0].Name != "data" || opts.JetStreamMaxStore >= claim.Value() {
		t.Errorf("max_file_store %d is not under the data volume's %s", opts.JetStreamMaxStore, claim.String())
	}
	for name, port := range map[string]int{"client": opts.Port, "cluster": opts.Cluster.Port, "monitor": opts.HTTPPort} {
		if containerPort(nats, name) != int32(port) || servicePort(svc, name) != int32(port) {
			t.Errorf("port %s: %d in nats.conf, %d in the container, %d in the service", name, port, containerPort(nats, name), servicePort(svc, name))
		}
	}
	for _, p := range []*corev1.Probe{nats.StartupProbe, nats.LivenessProbe, nats.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "monitor" || !strings.HasPrefix(p.HTTPGet.Path, "/healthz") {
			t.Errorf("StatefulSet nats: probe %+v, want /healthz on the monitor port", p)
		}
	}
	if pdb := m.pdbs["nats"]; pdb == nil || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
		!mustSelector(t, pdb.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Error("PodDisruptionBudget nats: want maxUnavailable 1 of the NATS pods")
	}
	if want := "nats:" + natsServerVersion(t) + "-alpine"; nats.Image != want {
		t.Errorf("StatefulSet nats runs %s; the tests run nats-server %s: want %s", nats.Image, natsServerVersion(t), want)
	}

	// gpuq: the scheduler and the worker run the image the README builds,
	// its binary, against every NATS node, with probes and metrics on
	// the port of --metrics-listen.
	natsURL := clusterURLs(t)
	dep, ds := m.deployments["gpuq-scheduler"], m.daemonSets["gpuq-worker"]
	if dep == nil || ds == nil {
		t.Fatal("no Deployment gpuq-scheduler or DaemonSet gpuq-worker")
	}
	sched := checkPod(t, "Deployment gpuq-scheduler", dep.Spec.Selector, dep.Spec.Template)
	work := checkPod(t, "DaemonSet gpuq-worker", ds.Spec.Selector, ds.Spec.Template)
	metricsPort, err := strconv.Atoi(strings.TrimPrefix(metricsListen, ":"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name string
		c    corev1.Container
		tpl  corev1.PodTemplateSpec
		sub  string
	}{{"Deployment gpuq-scheduler", sched, dep.Spec.Template, "scheduler"}, {"DaemonSet gpuq-worker", work, ds.Spec.Template, "worker"}} {
		if p.c.Image != image || !slices.Equal(p.c.Command, []string{installedBinary}) || len(p.c.Args) == 0 || p.c.Args[0] != p.sub {
			t.Errorf("%s: image %s, command %v, args %v; want %s, [%s], %s …", p.name, p.c.Image, p.c.Command, p.c.Args, image, installedBinary, p.sub)
		}
		if v := flagValue(p.c.Args, "--metrics-listen"); v != metricsListen || containerPort(p.c, "metrics") != int32(metricsPort) {
			t.Errorf("%s: --metrics-listen %q, port metrics %d; want %s and %d", p.name, v, containerPort(p.c, "metrics"), metricsListen, metricsPort)
		}
		a := p.tpl.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != strconv.Itoa(metricsPort) || a["prometheus.io/path"] != "/metrics" {
			t.Errorf("%s: Prometheus annotations %v", p.name, a)
		}
		if p.c.LivenessProbe == nil || p.c.LivenessProbe.HTTPGet == nil || p.c.LivenessProbe.HTTPGet.Path != "/healthz" ||
			p.c.ReadinessProbe == nil || p.c.ReadinessProbe.HTTPGet == nil || p.c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: want a liveness probe on /healthz and a readiness probe on /readyz", p.name)
		}
		if e, _ := env(p.c, "NATS_URL"); e.Value != natsURL {
			t.Errorf("%s: NATS_URL %q, want every node: %s", p.name, e.Value, natsURL)
		}
		if sc := p.c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s: want allowPrivilegeEscalation false and every capability dropped", p.name)
		}
	}
	if flagValue(sched.Args, "--replicas") != "3" {
		t.Errorf("Deployment gpuq-scheduler: args %v, want --replicas 3", sched.Args)
	}
	if e, _ := env(sched, "NATS_NKEY"); mountOf(sched, "nkey") == "" || e.Value != mountOf(sched, "nkey")+"/seed" ||
		secretOf(dep.Spec.Template.Spec, "nkey") != "gpuq-scheduler-nkey" || !slices.Contains(readmeSecretKeys(t, readme, "gpuq-scheduler-nkey"), "seed") {
		t.Errorf("Deployment gpuq-scheduler: NATS_NKEY %q is not key seed of Secret gpuq-scheduler-nkey as the README makes it", e.Value)
	}

	// The worker: on GPU nodes only, with every GPU through the NVIDIA
	// runtime, its seed by its node's name, and the capabilities of
	// gpuq-worker.service.
	spec := ds.Spec.Template.Spec
	if spec.ShareProcessNamespace == nil || !*spec.ShareProcessNamespace {
		t.Error("DaemonSet gpuq-worker: shareProcessNamespace is not true, so the worker is PID 1 and the zombies of its jobs' orphans are never reaped")
	}
	if spec.RuntimeClassName == nil || *spec.RuntimeClassName != "nvidia" || spec.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("DaemonSet gpuq-worker: runtimeClassName %v, nodeSelector %v; want nvidia and nvidia.com/gpu.present=true", spec.RuntimeClassName, spec.NodeSelector)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == "nvidia.com/gpu" && tol.Operator == corev1.TolerationOpExists && tol.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("DaemonSet gpuq-worker: tolerations %+v, want nvidia.com/gpu:NoSchedule", spec.Tolerations)
	}
	if e, _ := env(work, "NVIDIA_VISIBLE_DEVICES"); e.Value != "all" {
		t.Errorf("DaemonSet gpuq-worker: NVIDIA_VISIBLE_DEVICES %q, want all", e.Value)
	}
	host, _ := env(work, "GPUQ_HOST")
	if host.ValueFrom == nil || host.ValueFrom.FieldRef == nil || host.ValueFrom.FieldRef.FieldPath != "spec.nodeName" || flagValue(work.Args, "--host") != "$(GPUQ_HOST)" {
		t.Errorf("DaemonSet gpuq-worker: --host %q, GPUQ_HOST %+v; want the node's name", flagValue(work.Args, "--host"), host)
	}
	if e, _ := env(work, "NATS_INBOX_PREFIX"); e.Value != "_INBOX_$(GPUQ_HOST)" {
		t.Errorf("DaemonSet gpuq-worker: NATS_INBOX_PREFIX %q, want _INBOX_$(GPUQ_HOST)", e.Value)
	}
	if e, _ := env(work, "NATS_NKEY"); mountOf(work, "nkeys") == "" || e.Value != mountOf(work, "nkeys")+"/$(GPUQ_HOST)" || secretOf(spec, "nkeys") != "gpuq-worker-nkeys" {
		t.Errorf("DaemonSet gpuq-worker: NATS_NKEY %q, want the node's key of Secret gpuq-worker-nkeys", e.Value)
	}
	for _, k := range readmeSecretKeys(t, readme, "gpuq-worker-nkeys") {
		if !strings.Contains(cm.Data["accounts.conf"], `subscribe: ["_INBOX_`+k+`.>"]`) {
			t.Errorf("the README's Secret gpuq-worker-nkeys has key %s, no GPU host user of accounts.conf", k)
		}
	}
	var caps []string
	if sc := work.SecurityContext; sc != nil && sc.Capabilities != nil {
		for _, c := range sc.Capabilities.Add {
			caps = append(caps, "CAP_"+string(c))
		}
	}
	slices.Sort(caps)
	if !slices.Equal(caps, workerCaps()) || work.SecurityContext.RunAsUser == nil || *work.SecurityContext.RunAsUser != 0 || flagValue(work.Args, "--job-uids") != "61000-61099" {
		t.Errorf("DaemonSet gpuq-worker: capabilities %v, want those of gpuq-worker.service %v, as root with --job-uids 61000-61099", caps, workerCaps())
	}
	if mountOf(work, "state") != flagValue(work.Args, "--state-dir") || mountOf(work, "jobs") != flagValue(work.Args, "--job-root") {
		t.Errorf("DaemonSet gpuq-worker: --state-dir and --job-root are not its volumes state and jobs")
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g <= 300 {
		t.Errorf("DaemonSet gpuq-worker: terminationGracePeriodSeconds %v, want more than the worker's 5m drain", g)
	}
	for _, obj := range []metav1.Object{dep, ds, sts, svc, cm} {
		if _, ok := m.namespaces[obj.GetNamespace()]; !ok {
			t.Errorf("%s is in namespace %s, which no manifest makes", obj.GetName(), obj.GetNamespace())
		}
	}
	var q resource.Quantity = sched.Resources.Requests[corev1.ResourceMemory]
	if q.IsZero() {
		t.Error("Deployment gpuq-scheduler: no memory request")
	}
}

func mustSelector(t *testing.T, sel *metav1.LabelSelector) labels.Selector {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mountOf(c corev1.Container, volume string) string {
	for _, vm := range c.VolumeMounts {
		if vm.Name == volume {
			return vm.MountPath
		}
	}
	return ""
}

func volumeOf(spec corev1.PodSpec, name string) corev1.Volume {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	return corev1.Volume{}
}

func secretOf(spec corev1.PodSpec, volume string) string {
	if s := volumeOf(spec, volume).Secret; s != nil {
		return s.SecretName
	}
	return ""
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func servicePort(s *corev1.Service, name string) int32 {
	for _, p := range s.Spec.Ports {
		if p.Name == name && p.TargetPort.String() == name {
			return p.Port
		}
	}
	return 0
}

// readmeSecretKeys returns the keys the README's `kubectl create secret
// generic NAME` command gives Secret name (--from-literal=KEY=… and
// --from-file=KEY=…), failing the test if the README has no such command.
func readmeSecretKeys(t *testing.T, readme, name string) []string {
	t.Helper()
	m := regexp.MustCompile(`kubectl -n gpuq create secret generic ` + regexp.QuoteMeta(name) + `((?: \\\n)?(?: +--from-(?:literal|file)=[^ \n]+(?: \\\n)?)+)`).FindStringSubmatch(readme)
	if m == nil {
		t.Fatalf("deploy/README.md has no `kubectl -n gpuq create secret generic %s` command", name)
	}
	var keys []string
	for _, kv := range regexp.MustCompile(`--from-(?:literal|file)=([^= \n]+)=`).FindAllStringSubmatch(m[1], -1) {
		keys = append(keys, kv[1])
	}
	return keys
}

// natsServerVersion is the nats-server version go.mod requires, which
// the tests run, without its "v".
func natsServerVersion(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`github.com/nats-io/nats-server/v2 v([0-9.]+)`).FindStringSubmatch(readFile(t, "../go.mod"))
	if m == nil {
		t.Fatal("go.mod requires no nats-server")
	}
	return m[1]
}
