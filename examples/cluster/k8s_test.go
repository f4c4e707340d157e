package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// manifests are the objects of k8s/*.yaml, decoded strictly into the
// Kubernetes API types: an unknown or misspelt field fails.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	claims      map[string]*corev1.PersistentVolumeClaim
}

func readManifests(t *testing.T) manifests {
	t.Helper()
	m := manifests{deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}, claims: map[string]*corev1.PersistentVolumeClaim{}}
	files, err := filepath.Glob("k8s/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm metav1.TypeMeta
			require.NoError(t, yaml.Unmarshal([]byte(doc), &tm), "%s #%d", f, i)
			var obj interface{ GetName() string }
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				obj, m.deployments[name(t, doc)] = d, d
			case "v1 Service":
				s := &corev1.Service{}
				obj, m.services[name(t, doc)] = s, s
			case "v1 ConfigMap":
				c := &corev1.ConfigMap{}
				obj, m.configMaps[name(t, doc)] = c, c
			case "v1 Secret":
				s := &corev1.Secret{}
				obj, m.secrets[name(t, doc)] = s, s
			case "v1 PersistentVolumeClaim":
				c := &corev1.PersistentVolumeClaim{}
				obj, m.claims[name(t, doc)] = c, c
			default:
				t.Fatalf("%s #%d: unexpected kind %q %q", f, i, tm.APIVersion, tm.Kind)
			}
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), obj), "%s #%d", f, i)
		}
	}
	return m
}

func stripComments(doc string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func name(t *testing.T, doc string) string {
	var o struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &o))
	require.NotEmpty(t, o.Metadata.Name)
	return o.Metadata.Name
}

// parseArgs parses a container's arguments with the example's own flag
// set, as the binary would, with $(VAR) references of the container's
// environment replaced by a sample value.
func parseArgs(t *testing.T, args []string) (params, options, *flag.FlagSet) {
	t.Helper()
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var p params
	var o options
	flags(fs, &p, &o)
	expanded := make([]string, len(args))
	for i, a := range args {
		expanded[i] = regexp.MustCompile(`\$\([A-Z_]+\)`).ReplaceAllString(a, "10.0.0.1")
	}
	require.NoError(t, fs.Parse(expanded), "arguments %q", args)
	require.Empty(t, fs.Args(), "arguments %q", args)
	return p, o, fs
}

func envNames(c corev1.Container) []string {
	var names []string
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	return names
}

func portNames(c corev1.Container) map[string]int32 {
	ps := map[string]int32{}
	for _, p := range c.Ports {
		ps[p.Name] = p.ContainerPort
	}
	return ps
}

// The manifests run the example as the job needs: two coordinators with
// high availability on etcd and checkpoints on object storage, workers
// that advertise their pod's IP, the same job parameters in every
// process, the dashboard and Prometheus ports exposed and probed, and a
// Service that reaches them.
func TestKubernetesManifests(t *testing.T) {
	m := readManifests(t)
	coord, worker := m.deployments["weir-coordinator"], m.deployments["weir-worker"]
	require.NotNil(t, coord)
	require.NotNil(t, worker)
	require.NotNil(t, coord.Spec.Replicas)
	require.Equal(t, int32(2), *coord.Spec.Replicas, "two coordinators: one leads, one stands by")
	require.NotNil(t, worker.Spec.Replicas)
	for _, d := range []*appsv1.Deployment{coord, worker} {
		require.NotNil(t, d.Spec.Selector)
		for k, v := range d.Spec.Selector.MatchLabels {
			require.Equal(t, v, d.Spec.Template.Labels[k], "%s: the selector matches the pods", d.Name)
		}
		require.Len(t, d.Spec.Template.Spec.Containers, 1)
		sc := d.Spec.Template.Spec.SecurityContext
		require.True(t, sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "%s runs as non-root", d.Name)
		c := d.Spec.Template.Spec.Containers[0]
		require.NotNil(t, c.ReadinessProbe, d.Name)
		require.NotNil(t, c.LivenessProbe, d.Name)
		require.Subset(t, envNames(c), []string{"POD_NAME", "POD_IP"}, d.Name)
		var refs []string
		for _, e := range c.EnvFrom {
			switch {
			case e.ConfigMapRef != nil:
				require.Contains(t, m.configMaps, e.ConfigMapRef.Name)
				refs = append(refs, "configmap")
			case e.SecretRef != nil:
				require.Contains(t, m.secrets, e.SecretRef.Name)
				refs = append(refs, "secret")
			}
		}
		require.ElementsMatch(t, []string{"configmap", "secret"}, refs, d.Name)
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				require.Contains(t, m.claims, v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
	cfg := m.configMaps["weir-wordcount"]
	require.NotEmpty(t, cfg.Data["WEIR_ETCD"], "etcd endpoints for -etcd's default")
	require.NotEmpty(t, m.secrets["weir-wordcount"].StringData["WEIR_TOKEN"], "the planes' token for -token's default")

	cc, wc := coord.Spec.Template.Spec.Containers[0], worker.Spec.Template.Spec.Containers[0]
	cp, co, _ := parseArgs(t, cc.Args)
	wp, wo, _ := parseArgs(t, wc.Args)
	require.Equal(t, "coordinator", co.role)
	require.Equal(t, "worker", wo.role)
	require.True(t, strings.HasPrefix(cp.chk, "s3://"), "checkpoints on object storage: %q", cp.chk)
	job := func(p params) params {
		return params{lines: p.lines, par: p.par, rate: p.rate, out: p.out, chk: p.chk, job: p.job}
	}
	require.Equal(t, job(cp), job(wp), "coordinators and workers build the same job")
	require.Equal(t, int(*worker.Spec.Replicas), co.workers, "the coordinator waits for the workers the Deployment runs")

	ports := portNames(cc)
	for flagValue, port := range map[string]string{co.listen: "control", co.dashboard: "dashboard", co.prometheus: "metrics"} {
		require.Contains(t, ports, port)
		require.True(t, strings.HasSuffix(flagValue, ":"+itoa(ports[port])), "%s port %d vs flag %q", port, ports[port], flagValue)
	}
	require.True(t, strings.HasPrefix(co.advertise, "10.0.0.1:"), "the coordinator advertises its pod IP: %q", co.advertise)
	require.Equal(t, "/metrics", cc.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "metrics", cc.ReadinessProbe.HTTPGet.Port.String())
	wports := portNames(wc)
	require.True(t, strings.HasSuffix(wo.dataListen, ":"+itoa(wports["data"])), "data port vs %q", wo.dataListen)
	require.True(t, strings.HasPrefix(wo.dataAdvertise, "10.0.0.1:"), "workers advertise their pod IP: %q", wo.dataAdvertise)

	svc := m.services["weir-coordinator"]
	require.NotNil(t, svc)
	for k, v := range svc.Spec.Selector {
		require.Equal(t, v, coord.Spec.Template.Labels[k], "the Service selects the coordinators")
	}
	var targets []string
	for _, p := range svc.Spec.Ports {
		require.Contains(t, ports, p.TargetPort.String(), "Service port %s", p.Name)
		targets = append(targets, p.TargetPort.String())
	}
	require.True(t, slices.Contains(targets, "dashboard") && slices.Contains(targets, "metrics"), "dashboard and Prometheus exposed")
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
