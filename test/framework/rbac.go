package framework

import (
	"time"

	"context"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// InstallRBAC applies deploy/rbac and binds the test users nodeset-controller
// and node-controller to the roles their ServiceAccounts get in a cluster, so
// that components under test run with exactly the permissions they ship with.
func InstallRBAC(ctx context.Context, cp *ControlPlane) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if err := Apply(ctx, cp.AdminConfig(), filepath.Join(root, "deploy", "rbac")); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	type binding struct{ kind, name, namespace string }
	bindings := map[string][]binding{
		"nodeset-controller": {
			{"ClusterRole", "nodeset:nodeset-controller", ""},
			{"Role", "nodeset:nodeset-controller:leader-election", "nodeset-system"},
		},
		"node-controller": {
			{"ClusterRole", "nodeset:node-controller", ""},
			{"Role", "nodeset:node-controller:leader-election", "nodeset-system"},
			{"Role", "nodeset:node-controller:node-leases", corev1.NamespaceNodeLease},
			{"Role", "nodeset:node-controller:credentials", "nodeset-system"},
			{"Role", "nodeset:node-controller:bootstrap-tokens", "kube-system"},
		},
		// The simulated kubelets run in the node controller's process and
		// need no more than it may do (Nodes, their status, node Leases).
		KubeletsName: {
			{"ClusterRole", "nodeset:node-controller", ""},
			{"Role", "nodeset:node-controller:node-leases", corev1.NamespaceNodeLease},
		},
	}
	for user, roles := range bindings {
		subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
		for _, b := range roles {
			ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: b.kind, Name: b.name}
			meta := metav1.ObjectMeta{Name: b.name + ":" + user, Namespace: b.namespace}
			if b.kind == "ClusterRole" {
				_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{})
			} else {
				_, err = kube.RbacV1().RoleBindings(b.namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{})
			}
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		}
	}
	return nil
}

// BindTenant makes user an editor of namespace, as a cluster admin does: a
// RoleBinding to the built-in edit ClusterRole, which reaches NodeSets only
// through kube-controller-manager's aggregation of nodeset:aggregate-to-edit
// (deploy/rbac). It waits until the user may do what the docs promise an
// editor: manage the namespace's NodeSets and read its Events.
func BindTenant(ctx context.Context, cp *ControlPlane, user, namespace string) error {
	kube, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	_, err = kube.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "edit:" + user, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The authorizer sees new bindings and aggregated rules through its
	// informers: wait until it lets the user do what the binding grants.
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, attrs := range []authorizationv1.ResourceAttributes{
			{Namespace: namespace, Verb: "create", Group: "nodeset.dev", Resource: "nodesets"},
			{Namespace: namespace, Verb: "update", Group: "nodeset.dev", Resource: "nodesets", Subresource: "scale"},
			{Namespace: namespace, Verb: "list", Resource: "events"},
		} {
			review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &attrs}}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if !review.Status.Allowed {
				return false, nil
			}
		}
		return true, nil
	})
}
