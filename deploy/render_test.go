package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// No cluster runs where the tests do: the manifests are built with
// kustomize (in process, and with kubectl when it is installed), every
// object is decoded strictly into its Go type (an unknown or misspelt field
// fails), and the wiring between the objects and the binaries is checked.

const (
	baseDir = "k8s/base"
	devDir  = "k8s/overlays/dev"
)

// A renderer builds a kustomization directory into a YAML stream.
type renderer struct {
	name  string
	build func(t *testing.T, dir string) []byte
}

func renderers(t *testing.T) []renderer {
	rs := []renderer{{"krusty", buildKrusty}}
	if _, err := exec.LookPath("kubectl"); err == nil {
		rs = append(rs, renderer{"kubectl", buildKubectl})
	} else {
		t.Log("kubectl is not on PATH: the manifests are built with kustomize's Go library only")
	}
	return rs
}

// buildKrusty builds dir with kustomize's Go library (the code inside
// `kubectl kustomize`), with its default options.
func buildKrusty(t *testing.T, dir string) []byte {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return out
}

// buildKubectl runs `kubectl kustomize dir`, what `kubectl apply -k` does
// first.
func buildKubectl(t *testing.T, dir string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("kubectl", "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	return out
}

// objects is a built manifest, decoded.
type objects struct {
	all             []object
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	jobs            []*batchv1.Job
	scaledObjects   []*scaledObject
	triggerAuths    []*triggerAuthentication
	serviceAccounts []*corev1.ServiceAccount
	namespaces      []*corev1.Namespace
}

type object struct {
	kind, namespace, name string
}

func (o object) String() string { return o.kind + " " + o.namespace + "/" + o.name }

// decode splits a YAML stream and decodes every document strictly into the
// Go type of its apiVersion and kind. A kind not listed here fails: a new
// one needs its type (and its checks) added.
func decode(t *testing.T, stream []byte) *objects {
	t.Helper()
	objs := &objects{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var target any
		var meta *metav1.ObjectMeta
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			objs.deployments, target, meta = append(objs.deployments, o), o, &o.ObjectMeta
		case "v1 Service":
			o := &corev1.Service{}
			objs.services, target, meta = append(objs.services, o), o, &o.ObjectMeta
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			objs.configMaps, target, meta = append(objs.configMaps, o), o, &o.ObjectMeta
		case "v1 Secret":
			o := &corev1.Secret{}
			objs.secrets, target, meta = append(objs.secrets, o), o, &o.ObjectMeta
		case "v1 ServiceAccount":
			o := &corev1.ServiceAccount{}
			objs.serviceAccounts, target, meta = append(objs.serviceAccounts, o), o, &o.ObjectMeta
		case "v1 Namespace":
			o := &corev1.Namespace{}
			objs.namespaces, target, meta = append(objs.namespaces, o), o, &o.ObjectMeta
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			objs.pdbs, target, meta = append(objs.pdbs, o), o, &o.ObjectMeta
		case "autoscaling/v2 HorizontalPodAutoscaler":
			o := &autoscalingv2.HorizontalPodAutoscaler{}
			objs.hpas, target, meta = append(objs.hpas, o), o, &o.ObjectMeta
		case "batch/v1 Job":
			o := &batchv1.Job{}
			objs.jobs, target, meta = append(objs.jobs, o), o, &o.ObjectMeta
		case "keda.sh/v1alpha1 ScaledObject":
			o := &scaledObject{}
			objs.scaledObjects, target, meta = append(objs.scaledObjects, o), o, &o.ObjectMeta
		case "keda.sh/v1alpha1 TriggerAuthentication":
			o := &triggerAuthentication{}
			objs.triggerAuths, target, meta = append(objs.triggerAuths, o), o, &o.ObjectMeta
		default:
			t.Fatalf("document %d: %s %s has no Go type in this test: add it to decode", i, tm.APIVersion, tm.Kind)
		}
		// UnmarshalStrict: unknown fields and duplicate keys fail.
		if err := yaml.UnmarshalStrict(doc, target); err != nil {
			t.Fatalf("%s (document %d) does not decode strictly: %v", tm.Kind, i, err)
		}
		if meta.Name == "" {
			t.Errorf("document %d: %s without a name", i, tm.Kind)
		}
		objs.all = append(objs.all, object{tm.Kind, meta.Namespace, meta.Name})
	}
	if len(objs.all) == 0 {
		t.Fatal("no objects")
	}
	seen := map[object]bool{}
	for _, o := range objs.all {
		if seen[o] {
			t.Errorf("%s twice", o)
		}
		seen[o] = true
	}
	return objs
}

func (o *objects) names() []string {
	var out []string
	for _, x := range o.all {
		out = append(out, x.String())
	}
	sort.Strings(out)
	return out
}

func (o *objects) deployment(name string) *appsv1.Deployment {
	for _, d := range o.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

func (o *objects) secret(name string) *corev1.Secret {
	for _, s := range o.secrets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (o *objects) configMap(name string) *corev1.ConfigMap {
	for _, c := range o.configMaps {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// secretValue returns a key of a Secret in the output: from stringData or
// data, as the API server would merge them.
func secretValue(s *corev1.Secret, key string) (string, bool) {
	if v, ok := s.StringData[key]; ok {
		return v, true
	}
	if v, ok := s.Data[key]; ok {
		return string(v), true
	}
	return "", false
}

func TestManifestsBuild(t *testing.T) {
	for _, r := range renderers(t) {
		t.Run(r.name, func(t *testing.T) {
			for _, dir := range []string{baseDir, devDir} {
				objs := decode(t, r.build(t, dir))
				t.Logf("%s: %d objects", dir, len(objs.all))
			}
		})
	}
	// kubectl's kustomize and the library agree on what is built.
	if rs := renderers(t); len(rs) == 2 {
		for _, dir := range []string{baseDir, devDir} {
			a, b := decode(t, rs[0].build(t, dir)).names(), decode(t, rs[1].build(t, dir)).names()
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("%s: krusty builds %v, kubectl %v", dir, a, b)
			}
		}
	}
}

// TestManifestFilesAreListed fails on a YAML file in a kustomization
// directory that no kustomization.yaml lists: it would never be applied.
func TestManifestFilesAreListed(t *testing.T) {
	for _, dir := range []string{baseDir, devDir} {
		kb, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Resources      []string `json:"resources"`
			Configurations []string `json:"configurations"`
		}
		if err := yaml.Unmarshal(kb, &k); err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{"kustomization.yaml": true}
		for _, f := range append(k.Resources, k.Configurations...) {
			listed[f] = true
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, f := range files {
			if !listed[filepath.Base(f)] {
				t.Errorf("%s is in no kustomization's resources", f)
			}
		}
	}
}
