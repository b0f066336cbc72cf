package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"k8s.io/utils/ptr"

	"nodeset.dev/nodeset/test/framework"
)

// certManagerStubCRDs stand in for cert-manager's CRDs, so that the API server
// accepts the chart's Issuers and Certificates in a dry run: it checks that
// they are cert-manager.io/v1 objects of those kinds in the release's
// namespace, not their fields.
const certManagerStubCRDs = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: issuers.cert-manager.io}
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: Issuer, plural: issuers, singular: issuer, listKind: IssuerList}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: certificates.cert-manager.io}
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: Certificate, plural: certificates, singular: certificate, listKind: CertificateList}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`

// TestChartDryRun renders the Helm chart with each documented values file of
// its ci/ directory (helm pinned in hack/chart, built by hack/chart-tools.sh),
// checks what each configuration must have, and applies the result to the
// real API server with a server-side dry run.
func TestChartDryRun(t *testing.T) {
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	framework.Shared(t)
	helm := filepath.Join(chartTools(t, root), "helm")
	chart := filepath.Join(root, "deploy", "charts", "nodeset")

	_, err = kubeClient(t).CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nodeset-system"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	stubCertManager(t)

	files, err := filepath.Glob(filepath.Join(chart, "ci", "*.yaml"))
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	// The configurations the chart's README documents, each with its checks.
	tests := []struct {
		name  string
		check func(t *testing.T, r renderedChart)
	}{
		{name: "default-values.yaml", check: func(t *testing.T, r renderedChart) {
			assert.Contains(t, r.args(t, "node-controller"), "--drivers=simulated")
			require.Equal(t, 1, r.kinds["Job"], "certificates are provisioned at install")
			for _, obj := range r.objects {
				if obj.GetKind() == "Job" {
					assert.True(t, strings.HasPrefix(obj.GetName(), "nodeset-certs-"), "by nodeset-certs: %s", obj.GetName())
				}
			}
			assert.NotNil(t, r.get("CronJob", "nodeset-certs"), "and renewed")
			assert.Zero(t, r.kinds["Certificate"])
			// The API server admits the controllers' pods in nodeset-system
			// at the priority of a system-cluster-critical pod.
			for _, name := range []string{"nodeset-controller", "node-controller"} {
				var template corev1.PodTemplateSpec
				raw, _, _ := unstructured.NestedMap(r.get("Deployment", name), "spec", "template")
				require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &template))
				// Under the namespace's default ServiceAccount, which
				// kube-controller-manager makes: the release's is not installed.
				template.Spec.ServiceAccountName = ""
				var pod *corev1.Pod
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					pod, err = kubeClient(t).CoreV1().Pods("nodeset-system").Create(context.Background(), &corev1.Pod{
						ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Labels: template.Labels}, Spec: template.Spec,
					}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
					assert.NoError(c, err, name)
				}, 30*time.Second, 100*time.Millisecond)
				assert.Equal(t, ptr.To[int32](2000000000), pod.Spec.Priority, "%s: system-cluster-critical's priority", name)
			}
		}},
		{name: "docker-machine-values.yaml", check: func(t *testing.T, r renderedChart) {
			args := r.args(t, "node-controller")
			assert.Contains(t, args, "--drivers=simulated,docker-machine")
			assert.Contains(t, args, "--docker-machine-store-path=/var/lib/nodeset/docker-machine")
			pod := r.podSpec(t, "node-controller")
			init, _, _ := unstructured.NestedSlice(pod, "initContainers")
			require.Len(t, init, 1, "the plugins come from an init container")
			assert.Equal(t, "registry.example.com/docker-machine-plugins:v1", init[0].(map[string]any)["image"])
			container := r.container(t, "node-controller")
			assert.Contains(t, container["env"], map[string]any{"name": "PATH", "value": "/opt/nodeset/plugins:/usr/local/bin:/usr/bin:/bin"})
			claim := r.get("PersistentVolumeClaim", "docker-machine-store")
			require.NotNil(t, claim)
			class, _, _ := unstructured.NestedString(claim, "spec", "storageClassName")
			assert.Equal(t, "nfs-client", class)
		}},
		{name: "aws-values.yaml", check: func(t *testing.T, r renderedChart) {
			args := r.args(t, "node-controller")
			assert.Contains(t, args, "--drivers=eks-asg,eks-managed")
			assert.Contains(t, args, "--cluster-name=prod")
			sa := r.get("ServiceAccount", "node-controller")
			require.NotNil(t, sa)
			role, _, _ := unstructured.NestedString(sa, "metadata", "annotations", "eks.amazonaws.com/role-arn")
			assert.Equal(t, "arn:aws:iam::111122223333:role/nodeset-node-controller", role, "IRSA")
		}},
		{name: "cert-manager-values.yaml", check: func(t *testing.T, r renderedChart) {
			assert.Zero(t, r.kinds["Job"], "no nodeset-certs with cert-manager")
			assert.Zero(t, r.kinds["CronJob"])
			secrets := map[string]bool{}
			for _, obj := range r.objects {
				if obj.GetKind() == "Certificate" {
					name, _, _ := unstructured.NestedString(obj.Object, "spec", "secretName")
					secrets[name] = true
				}
			}
			assert.Equal(t, map[string]bool{"nodeset-ca": true, "nodeset-webhook-tls": true, "nodeset-autoscaler-tls": true,
				"nodeset-autoscaler-client-ca": true, "cluster-autoscaler-client-tls": true}, secrets)
			webhook := r.get("ValidatingWebhookConfiguration", "nodeset.dev")
			require.NotNil(t, webhook)
			inject, _, _ := unstructured.NestedString(webhook, "metadata", "annotations", "cert-manager.io/inject-ca-from")
			assert.Equal(t, "nodeset-system/nodeset-webhook", inject)
		}},
	}
	var want []string
	for _, tc := range tests {
		want = append(want, tc.name)
	}
	assert.ElementsMatch(t, want, names, "every values file in ci/ is tested, and only those")

	for _, tc := range tests {
		t.Run(strings.TrimSuffix(tc.name, "-values.yaml"), func(t *testing.T) {
			manifest := run(t, helm, "template", "nodeset", chart, "--namespace", "nodeset-system",
				"--include-crds", "-f", filepath.Join(chart, "ci", tc.name))
			r := decodeRendered(t, manifest)
			assert.Equal(t, 2, r.kinds["CustomResourceDefinition"])
			assert.Equal(t, 4, r.kinds["ValidatingAdmissionPolicy"], "Dedicated tenancy is enforced at pod admission, kubelets' Node claims at Node admission, a cloud controller manager's deletions of Nodes whose machines are being made at Node deletion, the depth of spec.parameters at NodeSet and NodeClass admission")
			assert.Equal(t, 4, r.kinds["ValidatingAdmissionPolicyBinding"])
			assert.NotNil(t, r.get("ValidatingAdmissionPolicy", "dedicated-tenancy.nodeset.dev"))
			assert.NotNil(t, r.get("ValidatingAdmissionPolicy", "kubelet-node-claims.nodeset.dev"))
			assert.NotNil(t, r.get("ValidatingAdmissionPolicy", "parameters-depth.nodeset.dev"))
			assert.Equal(t, 2, r.kinds["FlowSchema"], "the controllers' requests, and their leader election")
			assert.Zero(t, r.kinds["Namespace"], "left to helm install --create-namespace")
			webhook := r.get("ValidatingWebhookConfiguration", "nodeset.dev")
			require.NotNil(t, webhook)
			hooks, _, _ := unstructured.NestedSlice(webhook, "webhooks")
			assert.Len(t, hooks, 2)
			for _, h := range hooks {
				_, set, _ := unstructured.NestedFieldNoCopy(h.(map[string]any), "clientConfig", "caBundle")
				assert.False(t, set, "caBundle is injected, never rendered")
			}
			for _, name := range []string{"nodeset-controller", "node-controller"} {
				replicas, _, _ := unstructured.NestedFieldNoCopy(r.get("Deployment", name), "spec", "replicas")
				assert.EqualValues(t, 2, replicas, "%s runs a standby", name)
				assert.Contains(t, r.args(t, name), "--leader-elect=true")
			}
			assertHighlyAvailable(t, r.objects)
			nodeset := r.args(t, "nodeset-controller")
			// Mutual TLS; TestChartAutoscalerClientCAIsNodesetsOwn checks which CA.
			assert.True(t, slices.ContainsFunc(nodeset, func(arg string) bool {
				return strings.HasPrefix(arg, "--autoscaler-tls-client-ca-file=/etc/nodeset/")
			}), "mutual TLS: %v", nodeset)
			assert.Contains(t, nodeset, "--webhook-cert-file=/etc/nodeset/webhook/tls.crt")
			tc.check(t, r)

			file := filepath.Join(t.TempDir(), "chart.yaml")
			require.NoError(t, os.WriteFile(file, []byte(manifest), 0o644))
			out := kubectl(t, "apply", "--server-side", "--force-conflicts", "--field-manager=helm",
				"--dry-run=server", "-f", file)
			assert.Contains(t, out, "deployment.apps/nodeset-controller serverside-applied (server dry run)")
			assert.Contains(t, out, "deployment.apps/node-controller serverside-applied (server dry run)")
			assert.Contains(t, out, "validatingadmissionpolicy.admissionregistration.k8s.io/dedicated-tenancy.nodeset.dev serverside-applied (server dry run)")
			assert.Equal(t, len(r.objects), strings.Count(out, "serverside-applied (server dry run)"), out)
		})
	}
}

// stubCertManager installs certManagerStubCRDs for the test.
func stubCertManager(t *testing.T) {
	t.Helper()
	stubCRDs(t, certManagerStubCRDs, "issuers.cert-manager.io", "certificates.cert-manager.io")
}

// stubCRDs installs the CRDs of manifest, named crds, for the test. Its
// cleanup waits until they are gone: a CRD still terminating when the next
// test applies the same stubs takes that apply as a no-op, then vanishes
// under that test's wait for Established.
func stubCRDs(t *testing.T, manifest string, crds ...string) {
	t.Helper()
	stubs := filepath.Join(t.TempDir(), "crds.yaml")
	require.NoError(t, os.WriteFile(stubs, []byte(manifest), 0o644))
	kubectl(t, "apply", "-f", stubs)
	t.Cleanup(func() { kubectl(t, "delete", "-f", stubs, "--wait=true", "--timeout=50s") })
	args := []string{"wait", "--for=condition=Established", "--timeout=30s"}
	for _, crd := range crds {
		args = append(args, "crd/"+crd)
	}
	kubectl(t, args...)
}

// TestChartAutoscalerClientCAIsNodesetsOwn: the autoscaler API accepts, as
// cluster-autoscaler, every client certificate its client CA signed, and
// that caller may scale and delete every tenant's nodes. So whatever
// certificates.certManager.issuerRef names (a ClusterIssuer anyone may
// request certificates from, say), cluster-autoscaler's client certificate
// comes from a CA the chart makes for it alone, the nodeset-controller's
// --autoscaler-tls-client-ca-file is that CA's certificate (and the pod
// holds nothing else of its Secret), and issuerRef issues the serving
// certificates only. Each rendering is applied with a server-side dry run,
// cert-manager's CRDs stubbed.
func TestChartAutoscalerClientCAIsNodesetsOwn(t *testing.T) {
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	framework.Shared(t)
	helm := filepath.Join(chartTools(t, root), "helm")
	chart := filepath.Join(root, "deploy", "charts", "nodeset")
	ensureNamespace(t, "nodeset-system")
	stubCertManager(t)

	certManager := []string{"--set", "certificates.provider=cert-manager"}
	tests := []struct {
		name string
		args []string
		// servingIssuer issues the webhook's and the autoscaler API's
		// certificates; nil without cert-manager.
		servingIssuer map[string]any
	}{
		{name: "cert-manager with a ClusterIssuer", args: append([]string{"--set", "certificates.certManager.issuerRef.kind=ClusterIssuer",
			"--set", "certificates.certManager.issuerRef.name=corp-ca"}, certManager...),
			servingIssuer: map[string]any{"kind": "ClusterIssuer", "name": "corp-ca"}},
		{name: "cert-manager with an Issuer", args: append([]string{"--set", "certificates.certManager.issuerRef.kind=Issuer",
			"--set", "certificates.certManager.issuerRef.name=team-ca"}, certManager...),
			servingIssuer: map[string]any{"kind": "Issuer", "name": "team-ca"}},
		{name: "cert-manager self-signed", args: certManager, servingIssuer: map[string]any{"kind": "Issuer", "name": "nodeset-ca"}},
		{name: "nodeset-certs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			manifest := run(t, helm, append([]string{"template", "nodeset", chart, "--namespace", "nodeset-system"}, tc.args...)...)
			r := decodeRendered(t, manifest)
			var caFile string
			for _, arg := range r.args(t, "nodeset-controller") {
				if v, ok := strings.CutPrefix(arg, "--autoscaler-tls-client-ca-file="); ok {
					caFile = v
				}
			}
			require.NotEmpty(t, caFile, "mutual TLS")
			clientCASecret, key, onlyKey := r.mountedSecretFile(t, "nodeset-controller", caFile)
			assert.Equal(t, "ca.crt", key)
			if tc.servingIssuer == nil {
				// nodeset-certs' CA (Secret nodeset-ca) signs nodeset's
				// certificates only.
				assert.Equal(t, "nodeset-autoscaler-tls", clientCASecret)
				assert.Zero(t, r.kinds["Certificate"])
				return
			}
			assert.True(t, onlyKey, "the pod gets the client CA's certificate, not its key")

			certificates := map[string]map[string]any{} // by secretName
			for _, obj := range r.objects {
				if obj.GetKind() == "Certificate" {
					secret, _, _ := unstructured.NestedString(obj.Object, "spec", "secretName")
					certificates[secret] = obj.Object
				}
			}
			issuerOf := func(secret string) map[string]any {
				require.Contains(t, certificates, secret)
				ref, _, _ := unstructured.NestedMap(certificates[secret], "spec", "issuerRef")
				return ref
			}
			for _, secret := range []string{"nodeset-webhook-tls", "nodeset-autoscaler-tls"} {
				assert.Equal(t, tc.servingIssuer, issuerOf(secret), "issuerRef issues %s", secret)
			}

			// The client certificate's Issuer is a CA Issuer of the
			// release whose CA is the controller's client CA, a
			// self-signed CA Certificate of its own.
			clientIssuer := issuerOf("cluster-autoscaler-client-tls")
			assert.Equal(t, "Issuer", clientIssuer["kind"], "a namespaced Issuer of the release, never %v", clientIssuer)
			issuer := r.get("Issuer", fmt.Sprint(clientIssuer["name"]))
			require.NotNil(t, issuer, "Issuer %v is the chart's", clientIssuer["name"])
			caSecret, _, _ := unstructured.NestedString(issuer, "spec", "ca", "secretName")
			assert.Equal(t, clientCASecret, caSecret, "the controller trusts exactly the CA that issues cluster-autoscaler's certificate")
			isCA, _, _ := unstructured.NestedBool(certificates[caSecret], "spec", "isCA")
			assert.True(t, isCA, "%s is a CA certificate", caSecret)
			root := r.get("Issuer", fmt.Sprint(issuerOf(caSecret)["name"]))
			require.NotNil(t, root)
			assert.Equal(t, "Issuer", issuerOf(caSecret)["kind"])
			_, selfSigned, _ := unstructured.NestedMap(root, "spec", "selfSigned")
			assert.True(t, selfSigned, "the client CA is self-signed, not from issuerRef")

			// And that CA issues nothing else.
			for secret := range certificates {
				if secret != "cluster-autoscaler-client-tls" {
					assert.NotEqual(t, clientIssuer, issuerOf(secret), "the client CA issues %s", secret)
				}
			}
			for _, obj := range r.objects {
				if obj.GetKind() == "Issuer" && obj.GetName() != issuer["metadata"].(map[string]any)["name"] {
					other, _, _ := unstructured.NestedString(obj.Object, "spec", "ca", "secretName")
					assert.NotEqual(t, caSecret, other, "Issuer %s signs with the client CA", obj.GetName())
				}
			}

			file := filepath.Join(t.TempDir(), "chart.yaml")
			require.NoError(t, os.WriteFile(file, []byte(manifest), 0o644))
			out := kubectl(t, "apply", "--server-side", "--force-conflicts", "--field-manager=helm",
				"--dry-run=server", "-f", file)
			assert.Equal(t, len(r.objects), strings.Count(out, "serverside-applied (server dry run)"), out)
		})
	}
}

// TestChartRefusals renders the chart with values it must refuse.
func TestChartRefusals(t *testing.T) {
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	framework.SkipIfShort(t, "helm, built from the Go module proxy")
	helm := filepath.Join(chartTools(t, root), "helm")
	chart := filepath.Join(root, "deploy", "charts", "nodeset")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "another namespace", args: []string{"--namespace", "default"}, want: "install nodeset into the namespace nodeset-system"},
		{name: "eks without a cluster name", args: []string{"--namespace", "nodeset-system", "--set", "drivers.enabled={eks-asg}"},
			want: "drivers.aws.clusterName"},
		{name: "unknown driver", args: []string{"--namespace", "nodeset-system", "--set", "drivers.enabled={gce}"},
			want: `unknown driver "gce"`},
		{name: "a driver listed twice", args: []string{"--namespace", "nodeset-system", "--set", "drivers.enabled={simulated,eks-asg,simulated}",
			"--set", "drivers.aws.clusterName=prod"}, want: "at '/drivers/enabled': items at 0 and 2 are equal"},
		{name: "a driver listed twice, the schema skipped", args: []string{"--namespace", "nodeset-system", "--skip-schema-validation",
			"--set", "drivers.enabled={docker-machine,docker-machine}"}, want: `drivers.enabled: driver "docker-machine" is listed twice`},
		{name: "replicas without leader election", args: []string{"--namespace", "nodeset-system",
			"--set", "nodeController.leaderElect=false"}, want: "nodeController: more than one replica needs leaderElect"},
		{name: "unknown certificate provider", args: []string{"--namespace", "nodeset-system",
			"--set", "certificates.provider=vault"}, want: `"vault" is neither nodeset-certs nor cert-manager`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(helm, append([]string{"template", "nodeset", chart}, tc.args...)...)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "%s", out)
			assert.Contains(t, string(out), tc.want)
		})
	}
}

// chartTools builds helm and nodeset-chart once (cached by hack/chart-tools.sh)
// and returns their directory.
func chartTools(t *testing.T, root string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "chart-tools.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "hack/chart-tools.sh: %s", stderr.String())
	return strings.TrimSpace(string(out))
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), stderr.String())
	return string(out)
}

// renderedChart is the chart's objects as helm template renders them.
type renderedChart struct {
	objects []*unstructured.Unstructured
	kinds   map[string]int
}

func decodeRendered(t *testing.T, manifest string) renderedChart {
	t.Helper()
	r := renderedChart{kinds: map[string]int{}}
	decoder := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		if obj.Object == nil {
			continue
		}
		r.objects = append(r.objects, obj)
		r.kinds[obj.GetKind()]++
	}
	return r
}

// get returns the object of that kind and name, or nil.
func (r renderedChart) get(kind, name string) map[string]any {
	for _, obj := range r.objects {
		if obj.GetKind() == kind && obj.GetName() == name {
			return obj.Object
		}
	}
	return nil
}

func (r renderedChart) podSpec(t *testing.T, deployment string) map[string]any {
	t.Helper()
	d := r.get("Deployment", deployment)
	require.NotNil(t, d, "Deployment %s", deployment)
	pod, _, _ := unstructured.NestedMap(d, "spec", "template", "spec")
	return pod
}

func (r renderedChart) container(t *testing.T, deployment string) map[string]any {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(r.podSpec(t, deployment), "containers")
	require.Len(t, containers, 1)
	return containers[0].(map[string]any)
}

func (r renderedChart) args(t *testing.T, deployment string) []string {
	t.Helper()
	args, _, _ := unstructured.NestedStringSlice(r.container(t, deployment), "args")
	return args
}

// mountedSecretFile says which Secret and key the file at path comes from in
// the deployment's container, and whether its volume holds that key only.
func (r renderedChart) mountedSecretFile(t *testing.T, deployment, path string) (secret, key string, onlyKey bool) {
	t.Helper()
	dir, file := filepath.Dir(path), filepath.Base(path)
	mounts, _, _ := unstructured.NestedSlice(r.container(t, deployment), "volumeMounts")
	var volume string
	for _, m := range mounts {
		if m.(map[string]any)["mountPath"] == dir {
			volume = m.(map[string]any)["name"].(string)
		}
	}
	require.NotEmpty(t, volume, "%s: no volume mounted at %s", deployment, dir)
	volumes, _, _ := unstructured.NestedSlice(r.podSpec(t, deployment), "volumes")
	for _, v := range volumes {
		if v.(map[string]any)["name"] != volume {
			continue
		}
		secret, _, _ = unstructured.NestedString(v.(map[string]any), "secret", "secretName")
		require.NotEmpty(t, secret, "%s: volume %s is a Secret", deployment, volume)
		items, _, _ := unstructured.NestedSlice(v.(map[string]any), "secret", "items")
		if len(items) == 0 {
			return secret, file, false
		}
		for _, item := range items {
			if item.(map[string]any)["path"] == file {
				key = item.(map[string]any)["key"].(string)
			}
		}
		return secret, key, len(items) == 1
	}
	t.Fatalf("%s: no volume %s", deployment, volume)
	return "", "", false
}

// assertHighlyAvailable checks that each controller's Deployment survives
// what a cluster does to its pods: a node drain or upgrade evicts its
// replicas one at a time (a PodDisruptionBudget selecting exactly its pods,
// at most one unavailable), the scheduler spreads them over nodes (so one
// node going leaves a standby), and pods waiting for the capacity the
// controllers add cannot preempt them (system-cluster-critical, as
// cluster-autoscaler runs).
func assertHighlyAvailable(t *testing.T, objects []*unstructured.Unstructured) {
	t.Helper()
	budgets := map[string]map[string]any{}
	for _, obj := range objects {
		if obj.GetKind() == "PodDisruptionBudget" {
			budgets[obj.GetName()] = obj.Object
		}
	}
	for _, name := range []string{"nodeset-controller", "node-controller"} {
		var d *unstructured.Unstructured
		for _, obj := range objects {
			if obj.GetKind() == "Deployment" && obj.GetName() == name {
				d = obj
			}
		}
		require.NotNil(t, d, "Deployment %s", name)
		podLabels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
		selector, _, _ := unstructured.NestedStringMap(d.Object, "spec", "selector", "matchLabels")
		pdb := budgets[name]
		if assert.NotNil(t, pdb, "a PodDisruptionBudget keeps a drain from evicting both replicas of %s at once", name) {
			assert.Equal(t, "nodeset-system", pdb["metadata"].(map[string]any)["namespace"])
			match, _, _ := unstructured.NestedStringMap(pdb, "spec", "selector", "matchLabels")
			assert.Equal(t, selector, match, "the budget of %s selects its pods", name)
			assert.Subset(t, podLabels, match)
			unavailable, _, _ := unstructured.NestedFieldNoCopy(pdb, "spec", "maxUnavailable")
			assert.EqualValues(t, 1, unavailable, "one replica of %s at a time (and a single replica may still be evicted)", name)
		}
		pod, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec")
		assert.Equal(t, "system-cluster-critical", pod["priorityClassName"], "%s is not preempted by the pods waiting for its nodes", name)
		terms, _, _ := unstructured.NestedSlice(pod, "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
		spread := false
		for _, term := range terms {
			key, _, _ := unstructured.NestedString(term.(map[string]any), "podAffinityTerm", "topologyKey")
			match, _, _ := unstructured.NestedStringMap(term.(map[string]any), "podAffinityTerm", "labelSelector", "matchLabels")
			spread = spread || (key == "kubernetes.io/hostname" && reflect.DeepEqual(match, selector))
		}
		assert.True(t, spread, "the replicas of %s prefer different nodes: %v", name, terms)
	}
}
