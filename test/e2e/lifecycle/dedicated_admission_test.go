package lifecycle

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/test/framework"
)

// TestDedicatedNodesRunOnlyTheirNamespacesPods applies the shipped
// ValidatingAdmissionPolicy (deploy/admission) and attacks a Dedicated node of
// namespace A from namespace B, as B's editor: every pod that could get past
// A's taint or aims at A's nodes is refused by kube-apiserver with a message
// that says why; A's own pod is admitted and kube-scheduler binds it to A's
// node; B's plain pod is admitted and kept off A's node by the taint. An
// admin-exempted namespace may tolerate everything.
func TestDedicatedNodesRunOnlyTheirNamespacesPods(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	admin, _ := clients(t)
	cp := framework.Shared(t)
	root, err := framework.RepoRoot()
	require.NoError(t, err)
	policy := filepath.Join(root, "deploy", "admission", "dedicated-tenancy.yaml")
	require.NoError(t, framework.Apply(ctx, cp.AdminConfig(), policy))
	t.Cleanup(func() { require.NoError(t, framework.Delete(context.Background(), cp.AdminConfig(), policy)) })

	nsA := createNamespace(t, fmt.Sprintf("dedicated-a-%d", time.Now().UnixNano()%100000))
	nsB := createNamespace(t, fmt.Sprintf("dedicated-b-%d", time.Now().UnixNano()%100000))
	createClass(t, "dedicated-admission-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Tenancy = nodesetv1alpha1.TenancyDedicated
	})
	createClass(t, "dedicated-admission-shared-sim", nil)
	_, cs := clients(t)
	for ns, name := range map[string]string{nsA: "own", nsB: "shared"} {
		t.Cleanup(func() {
			_ = cs.NodesetV1alpha1().NodeSets(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	createSet(t, nsA, "own", "dedicated-admission-sim", 1)
	createSet(t, nsB, "shared", "dedicated-admission-shared-sim", 1)
	eventually(t, 2*time.Minute, "A's Dedicated node", converged(c, t, nsA, "own", 1))
	eventually(t, 2*time.Minute, "B's shared node", converged(c, t, nsB, "shared", 1))
	nodes, err := setNodes(ctx, t, nsA, "own")
	require.NoError(t, err)
	dedicated := nodes[0].Name
	require.Equal(t, nsA, nodes[0].Labels["nodeset.dev/tenant"])
	nodes, err = setNodes(ctx, t, nsB, "shared")
	require.NoError(t, err)
	shared := nodes[0].Name

	tenantA := podEditor(t, "tenant-a", nsA)
	tenantB := podEditor(t, "tenant-b", nsB)
	pod := func(name string, mutate func(*corev1.PodSpec)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			},
		}
		mutate(&p.Spec)
		return p
	}
	tolerate := func(value string) corev1.Toleration {
		return corev1.Toleration{Key: "nodeset.dev/tenant", Operator: corev1.TolerationOpEqual, Value: value, Effect: corev1.TaintEffectNoSchedule}
	}
	intoA := func(s *corev1.PodSpec) {
		s.Tolerations = []corev1.Toleration{tolerate(nsA)}
		s.NodeSelector = map[string]string{"nodeset.dev/tenant": nsA}
	}

	// The policy takes effect once kube-apiserver has loaded it.
	eventually(t, time.Minute, "the policy enforced", func(ctx context.Context) (bool, string) {
		_, err := tenantB.CoreV1().Pods(nsB).Create(ctx, pod("probe", intoA), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "dedicated-tenancy.nodeset.dev"), fmt.Sprintf("dry-run create: %v", err)
	})

	for _, tc := range []struct {
		name    string
		spec    func(*corev1.PodSpec)
		wantMsg string
	}{
		{name: "tolerates A's taint, selects A", spec: intoA, wantMsg: "tolerates nodeset.dev/tenant=" + nsA},
		{name: "tolerates A's taint only", spec: func(s *corev1.PodSpec) { s.Tolerations = []corev1.Toleration{tolerate(nsA)} },
			wantMsg: "tolerates nodeset.dev/tenant=" + nsA},
		{name: "tolerates everything", spec: func(s *corev1.PodSpec) {
			s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}, wantMsg: `operator Exists and key "" (every key)`},
		{name: "tolerates every tenant", spec: func(s *corev1.PodSpec) {
			s.Tolerations = []corev1.Toleration{{Key: "nodeset.dev/tenant", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}, wantMsg: `operator Exists and key "nodeset.dev/tenant"`},
		{name: "selects A's nodes", spec: func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"nodeset.dev/tenant": nsA} },
			wantMsg: "selects nodeset.dev/tenant=" + nsA},
		{name: "requires A's nodes by affinity", spec: func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "nodeset.dev/tenant", Operator: corev1.NodeSelectorOpIn, Values: []string{nsB, nsA}}}}}}}}
		}, wantMsg: "node affinity term on nodeset.dev/tenant"},
		{name: "selects A's nodes by the restricted label", spec: func(s *corev1.PodSpec) {
			s.NodeSelector = map[string]string{nodesetv1alpha1.LabelTenantRestricted: nsA}
		}, wantMsg: "selects node-restriction.kubernetes.io/nodeset-tenant=" + nsA},
		{name: "prefers A's nodes by the restricted label", spec: func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: nodesetv1alpha1.LabelTenantRestricted, Operator: corev1.NodeSelectorOpNotIn, Values: []string{nsB}}}}}}}}
		}, wantMsg: "node affinity term on node-restriction.kubernetes.io/nodeset-tenant"},
		{name: "names A's node, skipping the scheduler", spec: func(s *corev1.PodSpec) { s.NodeName = dedicated },
			wantMsg: "sets spec.nodeName (" + dedicated + ")"},
	} {
		t.Run("B refused: "+tc.name, func(t *testing.T) {
			_, err := tenantB.CoreV1().Pods(nsB).Create(ctx, pod("attack", tc.spec), metav1.CreateOptions{})
			require.Error(t, err, "kube-apiserver admitted B's pod")
			assert.True(t, apierrors.IsInvalid(err) || apierrors.IsForbidden(err), "%v", err)
			assert.ErrorContains(t, err, "dedicated-tenancy.nodeset.dev")
			assert.ErrorContains(t, err, tc.wantMsg)
			t.Logf("refused: %v", err)
		})
	}

	boundTo := func(kube kubernetes.Interface, ns, name, node string) func(ctx context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return p.Spec.NodeName == node, fmt.Sprintf("on %q", p.Spec.NodeName)
		}
	}
	deletePod := func(ns, name string) {
		t.Cleanup(func() {
			_ = admin.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
	}

	// A's own pod is admitted and scheduled onto A's node, selected by the
	// label no kubelet can forge, as docs/tenancy.md says.
	_, err = tenantA.CoreV1().Pods(nsA).Create(ctx, pod("own", func(s *corev1.PodSpec) {
		s.Tolerations = []corev1.Toleration{tolerate(nsA)}
		s.NodeSelector = map[string]string{nodesetv1alpha1.LabelTenantRestricted: nsA}
	}), metav1.CreateOptions{})
	require.NoError(t, err, "A's pod tolerating A's taint")
	deletePod(nsA, "own")
	eventually(t, time.Minute, "A's pod on A's Dedicated node", boundTo(tenantA, nsA, "own", dedicated))

	// Adding a toleration of another namespace's taint to a running pod is refused too.
	own, err := tenantA.CoreV1().Pods(nsA).Get(ctx, "own", metav1.GetOptions{})
	require.NoError(t, err)
	own.Spec.Tolerations = append(own.Spec.Tolerations, tolerate(nsB))
	_, err = tenantA.CoreV1().Pods(nsA).Update(ctx, own, metav1.UpdateOptions{})
	assert.ErrorContains(t, err, "tolerates nodeset.dev/tenant="+nsB)
	// An update that leaves placement alone is never held up.
	own, err = tenantA.CoreV1().Pods(nsA).Get(ctx, "own", metav1.GetOptions{})
	require.NoError(t, err)
	own.Labels = map[string]string{"touched": "true"}
	_, err = tenantA.CoreV1().Pods(nsA).Update(ctx, own, metav1.UpdateOptions{})
	assert.NoError(t, err, "a label update")

	// B's pod without the toleration is admitted: aimed at A's node by host
	// name it stays Pending (the taint), aimed at B's node it runs there.
	_, err = tenantB.CoreV1().Pods(nsB).Create(ctx, pod("aimed", func(s *corev1.PodSpec) {
		s.NodeSelector = map[string]string{"kubernetes.io/hostname": dedicated}
	}), metav1.CreateOptions{})
	require.NoError(t, err, "B's pod without the toleration")
	deletePod(nsB, "aimed")
	_, err = tenantB.CoreV1().Pods(nsB).Create(ctx, pod("plain", func(s *corev1.PodSpec) {
		s.NodeSelector = map[string]string{"kubernetes.io/hostname": shared}
	}), metav1.CreateOptions{})
	require.NoError(t, err)
	deletePod(nsB, "plain")
	eventually(t, time.Minute, "B's plain pod on B's shared node", boundTo(tenantB, nsB, "plain", shared))
	eventually(t, time.Minute, "B's aimed pod unschedulable for A's taint", func(ctx context.Context) (bool, string) {
		p, err := tenantB.CoreV1().Pods(nsB).Get(ctx, "aimed", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return p.Spec.NodeName == "", cond.Message
			}
		}
		return false, fmt.Sprintf("on %q, conditions %v", p.Spec.NodeName, p.Status.Conditions)
	})
	p, err := tenantB.CoreV1().Pods(nsB).Get(ctx, "aimed", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, p.Spec.NodeName, "never bound to A's node")

	// A namespace the admin exempts (DaemonSets of agents) may tolerate everything.
	exempt := createNamespace(t, fmt.Sprintf("dedicated-exempt-%d", time.Now().UnixNano()%100000))
	ns, err := admin.CoreV1().Namespaces().Get(ctx, exempt, metav1.GetOptions{})
	require.NoError(t, err)
	ns.Labels["nodeset.dev/tenancy-exempt"] = "true"
	_, err = admin.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	require.NoError(t, err)
	agent := pod("agent", func(s *corev1.PodSpec) {
		s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		s.NodeSelector = map[string]string{"kubernetes.io/hostname": dedicated}
	})
	// kube-apiserver matches the policy's namespaceSelector against its
	// cache of Namespaces, which shows the label a moment after the update.
	eventually(t, time.Minute, "a pod of the exempt namespace admitted", func(ctx context.Context) (bool, string) {
		_, err := admin.CoreV1().Pods(exempt).Create(ctx, agent, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, fmt.Sprintf("dry-run create: %v", err)
	})
	_, err = admin.CoreV1().Pods(exempt).Create(ctx, agent, metav1.CreateOptions{})
	require.NoError(t, err, "a pod of an exempt namespace")
	deletePod(exempt, "agent")
	eventually(t, time.Minute, "the exempt agent on A's node", boundTo(admin, exempt, "agent", dedicated))
}

// podEditor returns clients acting as user, who may manage pods in namespace
// (what the built-in edit role grants, which has no rules here: no
// kube-controller-manager aggregates it).
func podEditor(t *testing.T, user, namespace string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	admin, _ := clients(t)
	_, err := admin.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-editor:" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-editor"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return kubernetes.NewForConfigOrDie(framework.Shared(t).Config(user))
}
