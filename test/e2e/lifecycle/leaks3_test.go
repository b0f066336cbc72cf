package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// plantedSecretKey is an AWS-style secret key with a quote and a backslash,
// so that its %q form differs from it.
const plantedSecretKey = `wJalrXUtnFEMI/K7MDENG+bPx"Rfi\CYleaks3`

// TestCredentialsStayOutOfTheAutoscalerAPI: a plugin that quotes the
// class's credentials in its errors fails every machine of an autoscaled
// NodeSet; cluster-autoscaler, asking the externalgrpc API about the
// group (its debug text, its instances with their error, its template,
// a scale-up), is told the failure but never the credential.
func TestCredentialsStayOutOfTheAutoscalerAPI(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	kube, cs := clients(t)
	ns := createNamespace(t, "leaks3")
	const secretName = "leaks3-credentials"
	_, err := kube.CoreV1().Secrets("nodeset-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName},
		Data:       map[string][]byte{"token": []byte(plantedSecretKey)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = kube.CoreV1().Secrets("nodeset-system").Delete(context.Background(), secretName, metav1.DeleteOptions{})
	})
	createClass(t, "leaks3", func(cl *nodesetv1alpha1.NodeClass) {
		cl.Spec.Driver = nodesetv1alpha1.DriverDockerMachine
		cl.Spec.Simulated = nil
		cl.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: secretName}
		cl.Spec.DockerMachine = &nodesetv1alpha1.DockerMachine{
			DriverName:        fakeplugin.Name,
			Options:           map[string]string{"fake-dir": t.TempDir(), "fake-echo": "true", "fake-fail-create": "true"},
			CredentialOptions: map[string]string{"fake-token": "token"},
		}
	})
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "leaks3", Replicas: ptr.To[int32](1),
			Autoscaling: &nodesetv1alpha1.Autoscaling{MinReplicas: 0, MaxReplicas: 3}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.NodesetV1alpha1().NodeSets(ns).Delete(context.Background(), "echo", metav1.DeleteOptions{})
	})

	ca := autoscalerClient(t, c)
	id := ns + "/echo"
	texts := map[string]string{}
	record := func(what string, v any, err error) {
		data, _ := json.Marshal(v)
		texts[what] = string(data)
		if err != nil {
			texts[what] += " error: " + err.Error()
		}
	}
	// The failed machine is an instance with its error, as
	// cluster-autoscaler sees it.
	eventually(t, 2*time.Minute, "the instance's error, scrubbed", func(ctx context.Context) (bool, string) {
		if _, err := ca.Refresh(ctx, &protos.RefreshRequest{}); err != nil {
			return false, err.Error()
		}
		instances, err := ca.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: id})
		if err != nil || len(instances.GetInstances()) == 0 {
			return false, fmt.Sprintf("instances %v: %v", instances, err)
		}
		record("NodeGroupNodes", instances, nil)
		info := instances.GetInstances()[0].GetStatus().GetErrorInfo()
		return strings.Contains(info.GetErrorMessage(), "fake: out of machines") && strings.Contains(info.GetErrorMessage(), "[redacted:token]"),
			info.GetErrorMessage()
	})
	groups, err := ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
	record("NodeGroups", groups, err)
	template, err := ca.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: id})
	record("NodeGroupTemplateNodeInfo", template, err)
	increased, err := ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 1})
	record("NodeGroupIncreaseSize", increased, err)
	forNode, err := ca.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: "none", ProviderID: "docker-machine://fake/none"}})
	record("NodeGroupForNode", forNode, err)
	sets, err := cs.NodesetV1alpha1().NodeSets(ns).List(ctx, metav1.ListOptions{})
	record("NodeSets", sets, err)

	for where, text := range texts {
		for _, form := range []string{plantedSecretKey, strconv.Quote(plantedSecretKey), strings.Trim(strconv.Quote(plantedSecretKey), `"`)} {
			assert.NotContains(t, text, form, where)
		}
	}
	assert.Contains(t, texts["NodeGroupNodes"], "[redacted:token]", "the plugin's echo reached the instance's error, scrubbed")
}
