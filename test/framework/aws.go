package framework

import (
	"context"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// MotoCredentials are the static keys the AWS tests use (moto takes any).
var MotoCredentials = map[string][]byte{"aws_access_key_id": []byte("testing"), "aws_secret_access_key": []byte("testing")}

// ReportAWSNodesReady stands in for the kubelets of EC2 instances: until ctx
// is done, every Node with an aws:/// providerID that is not being deleted
// is reported Ready and heartbeats as a kubelet does (ReportNodesReady).
func ReportAWSNodesReady(ctx context.Context, kube kubernetes.Interface) {
	ReportNodesReady(ctx, kube, "aws:///")
}

// ReportNodesReady stands in for the kubelets of machines that run none:
// until ctx is done, every Node whose providerID starts with prefix and
// that is not being deleted is reported Ready and heartbeats as a kubelet
// does, renewing its Lease in kube-node-lease every 10s. Without the
// heartbeat, kube-controller-manager's node lifecycle controller marks a
// Node Unknown once its grace period (50s) passes, which a slow test on a
// loaded machine outlives.
func ReportNodesReady(ctx context.Context, kube kubernetes.Interface, prefix string) {
	const renewEvery = 10 * time.Second
	renewed := map[string]time.Time{} // by Node UID
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		live := map[string]bool{}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if !strings.HasPrefix(n.Spec.ProviderID, prefix) || n.DeletionTimestamp != nil {
				continue
			}
			live[string(n.UID)] = true
			if time.Since(renewed[string(n.UID)]) >= renewEvery && renewNodeLease(ctx, kube, n) == nil {
				renewed[string(n.UID)] = time.Now()
			}
			if nodeutil.IsReady(n) {
				continue
			}
			setCondition(n, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"})
			_, _ = kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		}
		for uid := range renewed {
			if !live[uid] {
				delete(renewed, uid)
			}
		}
		return false, nil
	})
}

// setCondition sets the Node's condition of c's type in place (a Node has
// one of each type), dated now.
func setCondition(n *corev1.Node, c corev1.NodeCondition) {
	now := metav1.Now()
	c.LastHeartbeatTime = now
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == c.Type {
			if n.Status.Conditions[i].Status == c.Status {
				c.LastTransitionTime = n.Status.Conditions[i].LastTransitionTime
			} else {
				c.LastTransitionTime = now
			}
			n.Status.Conditions[i] = c
			return
		}
	}
	c.LastTransitionTime = now
	n.Status.Conditions = append(n.Status.Conditions, c)
}

// renewNodeLease renews (or makes) the Node's Lease in kube-node-lease, as
// its kubelet would, owned by the Node so that it goes with it.
func renewNodeLease(ctx context.Context, kube kubernetes.Interface, n *corev1.Node) error {
	leases := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, n.Name, metav1.GetOptions{})
	if err == nil && len(lease.OwnerReferences) > 0 && lease.OwnerReferences[0].UID != n.UID {
		// A Lease left by an earlier Node of the same name (moto reuses
		// instance ids across tests) whose garbage collection is pending.
		if err := leases.Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &lease.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		err = apierrors.NewNotFound(coordinationv1.Resource("leases"), n.Name)
	}
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: corev1.NamespaceNodeLease, OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.Name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	case err != nil:
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// ASGClass is an eks-asg NodeClass (cluster "prod") launching t3.large
// instances into network, with the credentials of the Secret
// nodeset-system/<secret>.
func ASGClass(name, region string, network MotoNetwork, secret string) *nodesetv1alpha1.NodeClass {
	return &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver:               nodesetv1alpha1.DriverEKSASG,
			CredentialsSecretRef: &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: secret},
			DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{
				ClusterName: "prod", Region: region, ImageID: network.Image, InstanceType: "t3.large", SubnetIDs: []string{network.Subnet},
				Bootstrap: &nodesetv1alpha1.EKSBootstrap{APIServerEndpoint: "https://prod.example.com", CertificateAuthority: "Q0E="},
			}},
			RegistrationTimeout: &metav1.Duration{Duration: 5 * time.Minute},
			Drain:               &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 20 * time.Second}},
		},
	}
}
