package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/test/framework"
)

// TestInstallDriverRemovalCheck: docs/install.md's check before a driver
// is taken out of drivers.enabled, run as written, names each class with
// its driver and each Node of a class with its class and the driver that
// made its machine.
func TestInstallDriverRemovalCheck(t *testing.T) {
	root := mustRepoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	require.NoError(t, err)
	check := shellBlockAfter(t, string(doc), "uses it, and no Node was made by it (read-only):")
	shared := framework.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube := kubernetes.NewForConfigOrDie(shared.AdminConfig())
	nodesets := versioned.NewForConfigOrDie(shared.AdminConfig())
	const class, node = "driver-check", "driver-check-1"
	_, err = nodesets.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = nodesets.NodesetV1alpha1().NodeClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	_, err = kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Labels:      map[string]string{nodesetv1alpha1.LabelNodeClass: class},
		Annotations: map[string]string{nodesetv1alpha1.AnnotationDriver: nodesetv1alpha1.DriverSimulated}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })

	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", check)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+shared.KubeconfigPath, "PATH="+filepath.Dir(shared.Kubectl())+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "docs/install.md's check, verbatim:\n%s\n%s", check, out)
	assert.Regexp(t, regexp.MustCompile(`(?m)^CLASS\s+DRIVER$`), string(out))
	assert.Regexp(t, regexp.MustCompile(`(?m)^`+class+`\s+simulated$`), string(out), "the class and its driver")
	assert.Regexp(t, regexp.MustCompile(`(?m)^`+node+`\s+`+class+`\s+simulated$`), string(out), "the Node, its class and its machine's driver")
}
