package framework

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Apply creates, or updates when they exist, the objects in the given YAML
// files or directories of YAML files (applied in file-name order).
func Apply(ctx context.Context, cfg *rest.Config, paths ...string) error {
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var files []string
	for _, path := range paths {
		matches, err := filepath.Glob(filepath.Join(path, "*.yaml"))
		if err != nil {
			return err
		}
		if len(matches) == 0 {
			matches = []string{path}
		}
		sort.Strings(matches)
		files = append(files, matches...)
	}
	for _, file := range files {
		objs, err := ReadObjects(file)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			gvk := obj.GroupVersionKind()
			mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				mapper.Reset()
				if mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
					return fmt.Errorf("%s: %s: %w", file, gvk, err)
				}
			}
			resource := dynamic.ResourceInterface(client.Resource(mapping.Resource))
			if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
				resource = client.Resource(mapping.Resource).Namespace(obj.GetNamespace())
			}
			_, err = resource.Create(ctx, obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				existing, getErr := resource.Get(ctx, obj.GetName(), metav1.GetOptions{})
				if getErr != nil {
					return getErr
				}
				obj.SetResourceVersion(existing.GetResourceVersion())
				_, err = resource.Update(ctx, obj, metav1.UpdateOptions{})
			}
			if err != nil {
				return fmt.Errorf("%s: %s %s: %w", file, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return nil
}

// Delete deletes the objects in the given YAML files, in reverse order; an
// object already gone is no error.
func Delete(ctx context.Context, cfg *rest.Config, paths ...string) error {
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for i := len(paths) - 1; i >= 0; i-- {
		objs, err := ReadObjects(paths[i])
		if err != nil {
			return err
		}
		for j := len(objs) - 1; j >= 0; j-- {
			obj := objs[j]
			gvk := obj.GroupVersionKind()
			mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", paths[i], gvk, err)
			}
			resource := dynamic.ResourceInterface(client.Resource(mapping.Resource))
			if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
				resource = client.Resource(mapping.Resource).Namespace(obj.GetNamespace())
			}
			if err := resource.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s: %s %s: %w", paths[i], obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return nil
}
