package kubernetes_test

import (
	"errors"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// scheme knows the kinds the manifests may use, and no other: decoding an object of any other
// kind fails.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strict decodes YAML or JSON into the typed object its apiVersion and kind name, the way the
// API server's strict field validation does: an unknown field, a field spelled with the wrong
// case, a duplicate field and an unregistered kind are errors.
var strict = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// decode decodes one object strictly.
func decode(data []byte) (runtime.Object, error) {
	obj, gvk, err := strict.Decode(data, nil, nil)
	if err != nil {
		if gvk != nil {
			return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
		}
		return nil, err
	}
	return obj, nil
}

// build renders the kustomization in dir and decodes every object strictly, returning the
// objects in kustomize's order, or the errors of every object that did not decode.
func build(dir string) ([]runtime.Object, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []runtime.Object
	var errs []error
	for _, r := range m.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.CurId(), err))
			continue
		}
		obj, err := decode(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.CurId(), err))
			continue
		}
		objs = append(objs, obj)
	}
	return objs, errors.Join(errs...)
}

// mustBuild is build, failing the test on any error.
func mustBuild(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	objs, err := build(dir)
	if err != nil {
		t.Fatalf("%s does not render to valid Kubernetes objects:\n%v", dir, err)
	}
	if len(objs) == 0 {
		t.Fatalf("%s renders no object", dir)
	}
	return objs
}
