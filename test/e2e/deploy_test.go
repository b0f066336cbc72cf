package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"nodeset.dev/nodeset/test/framework"
)

// TestDeployOverlays renders each kustomize overlay with kubectl's built-in
// kustomize, checks what every container runs as, and applies it to the real
// API server with a server-side dry run.
func TestDeployOverlays(t *testing.T) {
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	// Namespaced objects are only checked against an existing namespace.
	_, err = kubeClient(t).CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nodeset-system"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	for _, overlay := range []string{"simulated", "docker-machine", "aws"} {
		t.Run(overlay, func(t *testing.T) {
			dir := filepath.Join(root, "deploy", "overlays", overlay)
			rendered := kubectl(t, "kustomize", dir)
			kinds := map[string]int{}
			decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(rendered)), 4096)
			var deployments []appsv1.Deployment
			var webhooks, objects []*unstructured.Unstructured
			for {
				obj := &unstructured.Unstructured{}
				if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
					break
				} else {
					require.NoError(t, err)
				}
				kinds[obj.GetKind()]++
				objects = append(objects, obj)
				if obj.GetKind() == "ValidatingWebhookConfiguration" {
					webhooks = append(webhooks, obj)
				}
				if obj.GetKind() == "Deployment" {
					var d appsv1.Deployment
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d))
					deployments = append(deployments, d)
				}
			}
			assert.Equal(t, 2, kinds["CustomResourceDefinition"])
			assert.Equal(t, 2, kinds["Deployment"])
			assert.Equal(t, 1, kinds["ValidatingWebhookConfiguration"])
			assert.Equal(t, 2, kinds["FlowSchema"], "the controllers' requests have a priority level of their own, their leader election another")
			assert.Equal(t, 4, kinds["ValidatingAdmissionPolicy"], "Dedicated tenancy is enforced at pod admission, kubelets' Node claims at Node admission, a cloud controller manager's deletions of Nodes whose machines are being made at Node deletion, the depth of spec.parameters at NodeSet and NodeClass admission")
			assert.Equal(t, 4, kinds["ValidatingAdmissionPolicyBinding"])
			assert.Equal(t, 1, kinds["Job"], "certificates are provisioned at install")
			assert.Equal(t, 1, kinds["CronJob"], "and renewed")
			assertHighlyAvailable(t, objects)
			for _, w := range webhooks {
				hooks, _, _ := unstructured.NestedSlice(w.Object, "webhooks")
				for _, h := range hooks {
					_, set, _ := unstructured.NestedFieldNoCopy(h.(map[string]any), "clientConfig", "caBundle")
					assert.False(t, set, "caBundle is injected, never applied (a re-apply would clear it)")
				}
			}
			for _, d := range deployments {
				if d.Name != "nodeset-controller" {
					continue
				}
				// The autoscaler API is served with mutual TLS, from the Secret deploy/certs makes.
				args := d.Spec.Template.Spec.Containers[0].Args
				assert.Contains(t, args, "--autoscaler-tls-cert-file=/etc/nodeset/autoscaler/tls.crt")
				assert.Contains(t, args, "--autoscaler-tls-key-file=/etc/nodeset/autoscaler/tls.key")
				assert.Contains(t, args, "--autoscaler-tls-client-ca-file=/etc/nodeset/autoscaler/ca.crt")
				assert.Contains(t, args, "--webhook-cert-file=/etc/nodeset/webhook/tls.crt")
				secrets := map[string]string{}
				for _, v := range d.Spec.Template.Spec.Volumes {
					if v.Secret != nil {
						secrets[v.Secret.SecretName] = v.Name
					}
				}
				assert.Contains(t, secrets, "nodeset-autoscaler-tls")
				assert.Contains(t, secrets, "nodeset-webhook-tls")
				mounts := map[string]string{}
				for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
					mounts[m.Name] = m.MountPath
				}
				assert.Equal(t, "/etc/nodeset/autoscaler", mounts[secrets["nodeset-autoscaler-tls"]])
				assert.Equal(t, "/etc/nodeset/webhook", mounts[secrets["nodeset-webhook-tls"]])
			}
			for _, d := range deployments {
				assert.GreaterOrEqual(t, *d.Spec.Replicas, int32(2), "%s runs a standby", d.Name)
				pod := d.Spec.Template.Spec
				require.NotNil(t, pod.SecurityContext)
				assert.True(t, *pod.SecurityContext.RunAsNonRoot, d.Name)
				for _, c := range pod.Containers {
					sc := c.SecurityContext
					require.NotNil(t, sc, c.Name)
					assert.True(t, *sc.ReadOnlyRootFilesystem, c.Name)
					assert.False(t, *sc.AllowPrivilegeEscalation, c.Name)
					assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, c.Name)
					assert.NotEmpty(t, c.Resources.Requests, c.Name)
					assert.NotNil(t, c.ReadinessProbe, c.Name)
					assert.NotNil(t, c.LivenessProbe, c.Name)
					assert.Contains(t, c.Args, "--leader-elect=true", c.Name)
				}
			}
			out := kubectl(t, "apply", "-k", dir, "--dry-run=server")
			assert.Contains(t, out, "deployment.apps/node-controller created (server dry run)")
			assert.Contains(t, out, "deployment.apps/nodeset-controller created (server dry run)")
			assert.Contains(t, out, "flowschema.flowcontrol.apiserver.k8s.io/nodeset-controllers created (server dry run)")
			assert.Contains(t, out, "flowschema.flowcontrol.apiserver.k8s.io/nodeset-leader-election created (server dry run)")
			assert.Contains(t, out, "validatingadmissionpolicy.admissionregistration.k8s.io/dedicated-tenancy.nodeset.dev created (server dry run)")
			assert.Contains(t, out, "validatingadmissionpolicy.admissionregistration.k8s.io/kubelet-node-claims.nodeset.dev created (server dry run)")
			assert.Contains(t, out, "validatingadmissionpolicy.admissionregistration.k8s.io/parameters-depth.nodeset.dev created (server dry run)")
			assert.Contains(t, out, "job.batch/nodeset-certs created (server dry run)")
		})
	}
}

// TestObservabilityScrapesBothControllers: the alerts and dashboard of
// deploy/observability read metrics that something must scrape. For the
// Prometheus Operator it ships a ServiceMonitor that selects the
// nodeset-metrics Service (as kustomize and the chart make it) and its
// metrics port, and that keeps the metrics' own namespace label (the
// NodeSet's) instead of renaming it exported_namespace in favour of the
// target's, which would name nodeset-system in every alert. Both files
// apply to a real API server.
func TestObservabilityScrapesBothControllers(t *testing.T) {
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	var service *unstructured.Unstructured
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(kubectl(t, "kustomize", filepath.Join(root, "deploy", "overlays", "simulated")))), 4096)
	var podLabels []map[string]string
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		switch {
		case obj.GetKind() == "Service" && obj.GetName() == "nodeset-metrics":
			service = obj
		case obj.GetKind() == "Deployment":
			l, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "template", "metadata", "labels")
			podLabels = append(podLabels, l)
		}
	}
	require.NotNil(t, service, "deploy/ makes the nodeset-metrics Service")
	selector, _, _ := unstructured.NestedStringMap(service.Object, "spec", "selector")
	require.Len(t, podLabels, 2)
	for _, l := range podLabels {
		assert.Subset(t, l, selector, "the Service reaches both controllers")
	}

	objs, err := framework.ReadObjects(filepath.Join(root, "deploy", "observability", "service-monitor.yaml"))
	require.NoError(t, err, "deploy/observability has a ServiceMonitor")
	require.Len(t, objs, 1)
	monitor := objs[0]
	assert.Equal(t, "ServiceMonitor", monitor.GetKind())
	assert.Equal(t, service.GetNamespace(), monitor.GetNamespace(), "it selects Services of its own namespace")
	match, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
	require.NotEmpty(t, match)
	assert.Subset(t, service.GetLabels(), match, "it selects the nodeset-metrics Service")
	ports, _, _ := unstructured.NestedSlice(service.Object, "spec", "ports")
	require.Len(t, ports, 1)
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	require.Len(t, endpoints, 1)
	endpoint := endpoints[0].(map[string]any)
	assert.Equal(t, ports[0].(map[string]any)["name"], endpoint["port"], "it scrapes the Service's metrics port")
	assert.Equal(t, true, endpoint["honorLabels"], "the metrics' namespace label is the NodeSet's")

	ensureNamespace(t, "nodeset-system")
	stubCRDs(t, prometheusOperatorStubCRDs, "servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com")
	out := kubectl(t, "apply", "--dry-run=server", "-f", filepath.Join(root, "deploy", "observability", "service-monitor.yaml"),
		"-f", filepath.Join(root, "deploy", "observability", "prometheus-rules.yaml"))
	assert.Contains(t, out, "servicemonitor.monitoring.coreos.com/nodeset created (server dry run)")
	assert.Contains(t, out, "prometheusrule.monitoring.coreos.com/nodeset created (server dry run)")
}

// prometheusOperatorStubCRDs stand in for the Prometheus Operator's CRDs in
// a dry run: they check kind, group and namespace, not the fields.
const prometheusOperatorStubCRDs = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, plural: servicemonitors, singular: servicemonitor, listKind: ServiceMonitorList}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: prometheusrules.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: PrometheusRule, plural: prometheusrules, singular: prometheusrule, listKind: PrometheusRuleList}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`
