package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// scaleInputs are writes of a NodeSet's /scale subresource by the attacker:
// "scaled" is its set of the limited class (2 Nodes per namespace), "auto"
// its autoscaled set (1 to 3).
func scaleInputs() []badInput {
	patch := func(name, set, replicas string, want ...string) badInput {
		return badInput{name: "/scale " + name, target: "scale", object: set, patch: true,
			body: func(string) string { return `{"spec":{"replicas":` + replicas + `}}` }, want: want}
	}
	return []badInput{
		patch("negative", "scaled", "-1", "spec.replicas"),
		patch("past int32", "scaled", "2147483648", "spec.replicas"),
		patch("a word", "scaled", `"three"`, "spec.replicas"),
		patch("a fraction", "scaled", "1.5", "spec.replicas"),
		patch("past the class's limit", "scaled", "3", "spec.limits.maxNodesPerNamespace of 2", "LimitExceeded"),
		patch("to the largest int32", "scaled", "2147483647", "spec.limits.maxNodesPerNamespace of 2", "LimitExceeded"),
		patch("past maxReplicas", "auto", "4", "spec.replicas must be within spec.autoscaling.minReplicas and spec.autoscaling.maxReplicas"),
		patch("below minReplicas", "auto", "0", "spec.replicas must be within spec.autoscaling.minReplicas and spec.autoscaling.maxReplicas"),
		{name: "/scale with another object's name", target: "scale", object: "scaled",
			body: func(string) string {
				return `{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"auto"},"spec":{"replicas":1}}`
			}, want: []string{"does not match the name on the URL"}},
		{name: "/scale of the victim's NodeSet", target: "scale", object: "victim", intoVictim: true, patch: true,
			body: func(string) string { return `{"spec":{"replicas":0}}` }, want: []string{`"nodesets/scale"`}},
	}
}

// rpcEnv is what the autoscaler inputs aim at.
type rpcEnv struct {
	ns, victimNS             string
	autoNode, scaledNode     corev1.Node
	victimNode               corev1.Node
	autoID, scaledID, victim string
}

// rpcInput is one call of cluster-autoscaler's externalgrpc API, which must
// fail with code and a message that says want.
type rpcInput struct {
	name string
	call func(ctx context.Context, ca protos.CloudProviderClient, e rpcEnv) error
	code codes.Code
	want string
}

func grpcNode(n corev1.Node) *protos.ExternalGrpcNode {
	return &protos.ExternalGrpcNode{Name: n.Name, ProviderID: n.Spec.ProviderID, Labels: n.Labels}
}

func autoscalerInputs() []rpcInput {
	increase := func(id func(rpcEnv) string, delta int32) func(context.Context, protos.CloudProviderClient, rpcEnv) error {
		return func(ctx context.Context, ca protos.CloudProviderClient, e rpcEnv) error {
			_, err := ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id(e), Delta: delta})
			return err
		}
	}
	decrease := func(delta int32) func(context.Context, protos.CloudProviderClient, rpcEnv) error {
		return func(ctx context.Context, ca protos.CloudProviderClient, e rpcEnv) error {
			_, err := ca.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: e.autoID, Delta: delta})
			return err
		}
	}
	deleteNodes := func(nodes func(rpcEnv) []*protos.ExternalGrpcNode) func(context.Context, protos.CloudProviderClient, rpcEnv) error {
		return func(ctx context.Context, ca protos.CloudProviderClient, e rpcEnv) error {
			_, err := ca.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: e.autoID, Nodes: nodes(e)})
			return err
		}
	}
	fixed := func(id string) func(rpcEnv) string { return func(rpcEnv) string { return id } }
	auto := func(e rpcEnv) string { return e.autoID }
	return []rpcInput{
		{"IncreaseSize of an unknown group", increase(func(e rpcEnv) string { return e.ns + "/nope" }, 1), codes.NotFound, "no NodeSet nope"},
		{"IncreaseSize of a malformed id", increase(fixed("nope"), 1), codes.InvalidArgument, "is not <namespace>/<nodeset>"},
		{"IncreaseSize of an empty id", increase(fixed(""), 1), codes.InvalidArgument, "is not <namespace>/<nodeset>"},
		{"IncreaseSize of a path past the namespace", increase(func(e rpcEnv) string { return e.ns + "/../" + e.victimNS + "/victim" }, 1), codes.NotFound, "no NodeSet"},
		{"IncreaseSize of a set without autoscaling", increase(func(e rpcEnv) string { return e.scaledID }, 1), codes.NotFound, "has no spec.autoscaling"},
		{"IncreaseSize of the victim's set", increase(func(e rpcEnv) string { return e.victim }, 1), codes.NotFound, "has no spec.autoscaling"},
		{"IncreaseSize by zero", increase(auto, 0), codes.InvalidArgument, "size increase must be positive"},
		{"IncreaseSize by a negative delta", increase(auto, -1), codes.InvalidArgument, "size increase must be positive"},
		{"IncreaseSize past maxReplicas", increase(auto, 3), codes.InvalidArgument, "spec.autoscaling.maxReplicas is 3"},
		{"IncreaseSize by the largest int32", increase(auto, 2147483647), codes.InvalidArgument, "spec.autoscaling.maxReplicas"},
		{"DecreaseTargetSize by a positive delta", decrease(1), codes.InvalidArgument, "size decrease must be negative"},
		{"DecreaseTargetSize by zero", decrease(0), codes.InvalidArgument, "size decrease must be negative"},
		{"DecreaseTargetSize below minReplicas", decrease(-1), codes.FailedPrecondition, "below spec.autoscaling.minReplicas 1"},
		{"DecreaseTargetSize by the smallest int32", decrease(-2147483648), codes.FailedPrecondition, "below spec.autoscaling.minReplicas 1"},
		{"DeleteNodes naming another set's node", deleteNodes(func(e rpcEnv) []*protos.ExternalGrpcNode {
			return []*protos.ExternalGrpcNode{grpcNode(e.scaledNode)}
		}), codes.InvalidArgument, "does not belong to node group"},
		{"DeleteNodes naming another namespace's node", deleteNodes(func(e rpcEnv) []*protos.ExternalGrpcNode {
			return []*protos.ExternalGrpcNode{grpcNode(e.victimNode)}
		}), codes.InvalidArgument, "does not belong to node group"},
		{"DeleteNodes naming its own node with another's provider ID", deleteNodes(func(e rpcEnv) []*protos.ExternalGrpcNode {
			return []*protos.ExternalGrpcNode{{Name: e.autoNode.Name, ProviderID: e.victimNode.Spec.ProviderID}}
		}), codes.InvalidArgument, "does not belong to node group"},
		{"DeleteNodes naming another's node by a placeholder id", deleteNodes(func(e rpcEnv) []*protos.ExternalGrpcNode {
			return []*protos.ExternalGrpcNode{{Name: "nodeset-unregistered://" + e.victimNode.Name, ProviderID: "nodeset-unregistered://" + e.victimNode.Name}}
		}), codes.InvalidArgument, "does not belong to node group"},
		{"DeleteNodes naming no such node", deleteNodes(func(e rpcEnv) []*protos.ExternalGrpcNode {
			return []*protos.ExternalGrpcNode{{Name: "no-such-node"}}
		}), codes.InvalidArgument, "does not belong to node group"},
		{"DeleteNodes below minReplicas", deleteNodes(func(e rpcEnv) []*protos.ExternalGrpcNode {
			return []*protos.ExternalGrpcNode{grpcNode(e.autoNode)}
		}), codes.FailedPrecondition, "below spec.autoscaling.minReplicas 1"},
		{"TemplateNodeInfo of an unknown group", func(ctx context.Context, ca protos.CloudProviderClient, e rpcEnv) error {
			_, err := ca.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: e.ns + "/nope"})
			return err
		}, codes.Unimplemented, "no NodeSet nope"},
		// NodeGroupNodes answers any NodeSet that exists, autoscaled or
		// not (cluster-autoscaler asks it of every group of its loop's
		// list, which may have lost spec.autoscaling since); it writes
		// nothing, which the checks after the calls hold.
		{"NodeGroupNodes of a malformed id", func(ctx context.Context, ca protos.CloudProviderClient, e rpcEnv) error {
			_, err := ca.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: e.victimNS + "-victim"})
			return err
		}, codes.InvalidArgument, "is not <namespace>/<nodeset>"},
	}
}

// call makes each autoscaler call; none may change anything: afterwards the
// autoscaled set, the limited set and the victim have the Nodes they had.
func (r *corpusRun) call(inputs []rpcInput) {
	t := r.t
	ctx := context.Background()
	ca := autoscalerClient(t, r.c)
	one := func(ns, name string) corev1.Node {
		nodes, err := setNodes(ctx, t, ns, name)
		require.NoError(t, err)
		require.Len(t, nodes, 1, "%s/%s", ns, name)
		return nodes[0]
	}
	e := rpcEnv{ns: r.ns, victimNS: r.victimNS, autoNode: one(r.ns, "auto"), scaledNode: one(r.ns, "scaled"), victimNode: one(r.victimNS, "victim"),
		autoID: r.ns + "/auto", scaledID: r.ns + "/scaled", victim: r.victimNS + "/victim"}
	for _, in := range inputs {
		t.Run("autoscaler "+in.name, func(t *testing.T) {
			callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			err := in.call(callCtx, ca, e)
			st, _ := status.FromError(err)
			switch {
			case err == nil:
				r.count(failure)
				t.Errorf("%s: answered OK", in.name)
			case st.Code() != in.code || !strings.Contains(st.Message(), in.want):
				r.count(failure)
				t.Errorf("%s: want %s saying %q, got %s: %s", in.name, in.code, in.want, st.Code(), st.Message())
			default:
				r.count(byAutoscaler)
			}
		})
	}
	auto, err := r.cs.NodesetV1alpha1().NodeSets(r.ns).Get(ctx, "auto", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, int32(1), ptr.Deref(auto.Spec.Replicas, -1), "the autoscaled set's replicas are unchanged")
	require.Empty(t, auto.Annotations[nodesetv1alpha1.AnnotationDeleteNodes], "no Node of the autoscaled set is marked for deletion")
	require.Equal(t, e.autoNode.Name, one(r.ns, "auto").Name)
	require.Equal(t, e.victimNode.Name, one(r.victimNS, "victim").Name)
}

// podInput is a pod of the attacker's namespace aimed at the victim's
// Dedicated nodes, which the admission policy refuses saying want.
type podInput struct {
	name string
	spec func(s *corev1.PodSpec, victimNS, victimNode, ownNS string)
	want string
}

func tolerationOf(key string, op corev1.TolerationOperator, value string, effect corev1.TaintEffect) []corev1.Toleration {
	return []corev1.Toleration{{Key: key, Operator: op, Value: value, Effect: effect}}
}

func affinityOn(required bool, op corev1.NodeSelectorOperator, values ...string) *corev1.Affinity {
	term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: nodesetv1alpha1.LabelTenant, Operator: op, Values: values}}}
	if required {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}}}
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: term}}}}
}

func podInputs() []podInput {
	const tenantKey = nodesetv1alpha1.LabelTenant
	return []podInput{
		{"tolerates the victim's taint", func(s *corev1.PodSpec, victim, _, _ string) {
			s.Tolerations = tolerationOf(tenantKey, corev1.TolerationOpEqual, victim, corev1.TaintEffectNoSchedule)
		}, "tolerates nodeset.dev/tenant="},
		{"tolerates the victim's taint with every effect", func(s *corev1.PodSpec, victim, _, _ string) {
			s.Tolerations = tolerationOf(tenantKey, corev1.TolerationOpEqual, victim, "")
		}, "tolerates nodeset.dev/tenant="},
		{"tolerates the victim's taint and selects its nodes", func(s *corev1.PodSpec, victim, _, _ string) {
			s.Tolerations = tolerationOf(tenantKey, corev1.TolerationOpEqual, victim, corev1.TaintEffectNoSchedule)
			s.NodeSelector = map[string]string{tenantKey: victim}
		}, "tolerates nodeset.dev/tenant="},
		{"tolerates every tenant", func(s *corev1.PodSpec, _, _, _ string) {
			s.Tolerations = tolerationOf(tenantKey, corev1.TolerationOpExists, "", corev1.TaintEffectNoSchedule)
		}, `operator Exists and key "nodeset.dev/tenant"`},
		{"tolerates everything", func(s *corev1.PodSpec, _, _, _ string) {
			s.Tolerations = tolerationOf("", corev1.TolerationOpExists, "", "")
		}, `operator Exists and key "" (every key)`},
		{"selects the victim's nodes", func(s *corev1.PodSpec, victim, _, _ string) {
			s.NodeSelector = map[string]string{tenantKey: victim}
		}, "in spec.nodeSelector"},
		{"requires the victim's nodes by affinity", func(s *corev1.PodSpec, victim, _, own string) {
			s.Affinity = affinityOn(true, corev1.NodeSelectorOpIn, own, victim)
		}, "node affinity term on nodeset.dev/tenant"},
		{"prefers the victim's nodes by affinity", func(s *corev1.PodSpec, victim, _, _ string) {
			s.Affinity = affinityOn(false, corev1.NodeSelectorOpIn, victim)
		}, "node affinity term on nodeset.dev/tenant"},
		{"requires any tenant's nodes by affinity", func(s *corev1.PodSpec, _, _, _ string) {
			s.Affinity = affinityOn(true, corev1.NodeSelectorOpExists)
		}, "node affinity term on nodeset.dev/tenant"},
		{"requires nodes not its own by affinity", func(s *corev1.PodSpec, _, _, own string) {
			s.Affinity = affinityOn(true, corev1.NodeSelectorOpNotIn, own)
		}, "node affinity term on nodeset.dev/tenant"},
		{"names the victim's node", func(s *corev1.PodSpec, _, node, _ string) {
			s.NodeName = node
		}, "sets spec.nodeName"},
	}
}

func corpusPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
	}}
}

// createPods sends each pod input as the attacker, and adds a toleration of
// the victim's taint to a running pod of its own: the admission policy
// refuses all of them.
func (r *corpusRun) createPods(inputs []podInput) {
	t := r.t
	ctx := context.Background()
	pods := podEditor(t, "tenant-b", r.ns).CoreV1().Pods(r.ns)
	victimNode := nodeNames(t, r.victimNS, "victim")[0]
	// The attacker may create pods, and the policy is loaded.
	eventually(t, time.Minute, "the attacker's pod rights and the policy", func(ctx context.Context) (bool, string) {
		if _, err := pods.Create(ctx, corpusPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return false, err.Error()
		}
		aimed := corpusPod("probe")
		aimed.Spec.NodeSelector = map[string]string{nodesetv1alpha1.LabelTenant: r.victimNS}
		_, err := pods.Create(ctx, aimed, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "dedicated-tenancy.nodeset.dev"), fmt.Sprintf("aimed pod: %v", err)
	})
	judge := func(t *testing.T, what, want string, err error) {
		switch {
		case err == nil:
			r.count(failure)
			t.Errorf("%s: admitted", what)
		case !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), want):
			r.count(failure)
			t.Errorf("%s: want the admission policy's refusal saying %q, got %v", what, want, err)
		default:
			r.count(byPolicy)
		}
	}
	for i, in := range inputs {
		t.Run("pod "+in.name, func(t *testing.T) {
			pod := corpusPod(fmt.Sprintf("attack-%d", i))
			in.spec(&pod.Spec, r.victimNS, victimNode, r.ns)
			created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
			if err == nil {
				_ = pods.Delete(ctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
			judge(t, in.name, in.want, err)
		})
	}
	t.Run("pod update adding a toleration of the victim's taint", func(t *testing.T) {
		_, err := pods.Create(ctx, corpusPod("own"), metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = pods.Delete(context.Background(), "own", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			own, err := pods.Get(ctx, "own", metav1.GetOptions{})
			if err != nil {
				return err
			}
			own.Spec.Tolerations = append(own.Spec.Tolerations,
				tolerationOf(nodesetv1alpha1.LabelTenant, corev1.TolerationOpEqual, r.victimNS, corev1.TaintEffectNoSchedule)...)
			_, err = pods.Update(ctx, own, metav1.UpdateOptions{})
			return err
		})
		judge(t, "an update adding a toleration", "tolerates nodeset.dev/tenant="+r.victimNS, err)
	})
}
