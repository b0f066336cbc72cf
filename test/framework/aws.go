package framework

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// MotoCredentials are the static keys the AWS tests use (moto takes any).
var MotoCredentials = map[string][]byte{"aws_access_key_id": []byte("testing"), "aws_secret_access_key": []byte("testing")}

// ReportAWSNodesReady stands in for the kubelets of EC2 instances: until ctx
// is done, every Node with an aws:/// providerID that is not being deleted
// is reported Ready.
func ReportAWSNodesReady(ctx context.Context, kube kubernetes.Interface) {
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if !strings.HasPrefix(n.Spec.ProviderID, "aws:///") || n.DeletionTimestamp != nil || nodeutil.IsReady(n) {
				continue
			}
			now := metav1.Now()
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now})
			_, _ = kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		}
		return false, nil
	})
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
