// Package kubectlplugin is kubectl-nodeset: the tenant's and the admin's
// view of nodeset from kubectl. It takes kubectl's standard flags
// (--kubeconfig, --context, -n, --as, ...) through k8s.io/cli-runtime, and
// shows the API server's errors as the server wrote them.
package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/generated/clientset/versioned"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/plan"
	"nodeset.dev/nodeset/pkg/resolve"
)

// Command returns the kubectl-nodeset command.
func Command(streams genericiooptions.IOStreams) *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	o := &options{flags: flags, streams: streams}
	root := &cobra.Command{
		Use:   "kubectl-nodeset",
		Short: "Ask for nodes: list the NodeClasses you may use, create, scale and watch NodeSets",
		Long: `kubectl nodeset manages NodeSets, a namespace's request for nodes of a NodeClass.

  kubectl nodeset classes                      the catalogue, and what your namespace may use
  kubectl nodeset create web --class sim-small --replicas 3
  kubectl nodeset scale web --replicas 5
  kubectl nodeset status web                   each node's phase, and the last events
  kubectl nodeset rollout status web           wait until every node is of the current spec and available`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl nodeset"},
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	flags.AddFlags(root.PersistentFlags())
	root.AddCommand(o.classesCommand(), o.createCommand(), o.scaleCommand(), o.statusCommand(), o.rolloutCommand())
	return root
}

type options struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
}

type clients struct {
	kube      kubernetes.Interface
	nodeset   versioned.Interface
	namespace string
}

func (o *options) clients() (*clients, error) {
	config, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	namespace, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	nodeset, err := versioned.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &clients{kube: kube, nodeset: nodeset, namespace: namespace}, nil
}

func (o *options) table() *tabwriter.Writer {
	return tabwriter.NewWriter(o.streams.Out, 0, 8, 3, ' ', 0)
}

// scaleCommand is kubectl nodeset scale NAME --replicas N, through /scale.
func (o *options) scaleCommand() *cobra.Command {
	var replicas int32
	cmd := &cobra.Command{
		Use:   "scale NAME --replicas N",
		Short: "Set the number of nodes of a NodeSet",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if replicas < 0 {
				return fmt.Errorf("--replicas must be 0 or more")
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				scale, err := c.nodeset.NodesetV1alpha1().NodeSets(c.namespace).GetScale(ctx, args[0], metav1.GetOptions{})
				if err != nil {
					return err
				}
				scale.Spec.Replicas = replicas
				_, err = c.nodeset.NodesetV1alpha1().NodeSets(c.namespace).UpdateScale(ctx, args[0], scale, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(o.streams.Out, "nodeset.nodeset.dev/%s scaled\n", args[0])
			return nil
		},
	}
	cmd.Flags().Int32Var(&replicas, "replicas", -1, "The number of nodes wanted.")
	_ = cmd.MarkFlagRequired("replicas")
	return cmd
}

// classesCommand lists the catalogue with what the namespace may use.
func (o *options) classesCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "classes",
		Short: "List the NodeClasses, and whether the namespace may use each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			list, err := c.nodeset.NodesetV1alpha1().NodeClasses().List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			var nsLabels labels.Set
			ns, nsErr := c.kube.CoreV1().Namespaces().Get(ctx, c.namespace, metav1.GetOptions{})
			if nsErr == nil {
				nsLabels = ns.Labels
			}
			sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
			w := o.table()
			fmt.Fprintf(w, "NAME\tDRIVER\tTENANCY\tINSTANCE TYPE\tCAPACITY\tOVERRIDES\tVALID\tFOR %s\n", strings.ToUpper(c.namespace))
			for i := range list.Items {
				class := &list.Items[i]
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", class.Name, class.Spec.Driver, orDash(string(class.Spec.Tenancy)),
					orDash(instanceType(&class.Spec)), orDash(capacity(class)), orDash(strings.Join(class.Spec.TenantOverrides, ",")),
					valid(class), allowed(class, c.namespace, nsLabels, nsErr))
			}
			return w.Flush()
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func instanceType(spec *nodesetv1alpha1.NodeClassSpec) string {
	switch {
	case spec.Simulated != nil:
		return spec.Simulated.InstanceType
	case spec.EKSAutoscalingGroup != nil:
		if spec.EKSAutoscalingGroup.MixedInstances != nil {
			return strings.Join(spec.EKSAutoscalingGroup.MixedInstances.InstanceTypes, ",")
		}
		return spec.EKSAutoscalingGroup.InstanceType
	case spec.EKSManagedNodeGroup != nil:
		return strings.Join(spec.EKSManagedNodeGroup.InstanceTypes, ",")
	case spec.DockerMachine != nil:
		return "plugin " + spec.DockerMachine.DriverName
	}
	return ""
}

func capacity(class *nodesetv1alpha1.NodeClass) string {
	if class.Status.Capacity == nil {
		return ""
	}
	var parts []string
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		if q, ok := class.Status.Capacity.Resources[name]; ok {
			parts = append(parts, fmt.Sprintf("%s=%s", name, q.String()))
		}
	}
	return strings.Join(parts, ",")
}

// valid is the node controller's verdict on the class as it is now: Unknown
// until it has judged the current generation, as the nodeset controller
// waits for that verdict before it accepts a new NodeSet of the class.
func valid(class *nodesetv1alpha1.NodeClass) string {
	cond := meta.FindStatusCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
	if cond == nil || cond.ObservedGeneration != class.Generation {
		return "Unknown"
	}
	return string(cond.Status)
}

// allowed says whether namespace may use class for a new NodeSet, as the
// controller decides (resolve.NamespaceRefusal): a class being deleted
// takes none, from any namespace. A tenant who may not read its
// Namespace (nsErr) is told what the class's selector asks of its labels.
func allowed(class *nodesetv1alpha1.NodeClass, namespace string, nsLabels labels.Set, nsErr error) string {
	askedLabels := false
	why := resolve.NamespaceRefusal(class, namespace, func(string) (map[string]string, error) {
		askedLabels = true
		return nsLabels, nsErr
	})
	switch {
	case why != "" && askedLabels && nsErr != nil:
		if class.DeletionTimestamp != nil {
			return "no (being deleted)"
		}
		selector, _ := metav1.LabelSelectorAsSelector(class.Spec.AllowedNamespaces.Selector)
		return "if labels match " + selector.String()
	case why != "" && !askedLabels && class.Spec.AllowedNamespaces.From == nodesetv1alpha1.NamespacesFromSelector:
		return "no (invalid selector)"
	case why != "":
		return "no"
	case class.DeletionTimestamp != nil:
		return "no (being deleted)"
	}
	return "yes"
}

// statusCommand shows a NodeSet, its nodes' phases and its last events.
func (o *options) statusCommand() *cobra.Command {
	var events int
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a NodeSet's nodes, each with its phase and age, and the last events",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if events < 0 {
				return fmt.Errorf("--events must be 0 or more")
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			return o.status(cmd.Context(), c, args[0], events)
		},
	}
	cmd.Flags().IntVar(&events, "events", 10, "How many of the latest events to show.")
	return cmd
}

func (o *options) status(ctx context.Context, c *clients, name string, events int) error {
	set, err := c.nodeset.NodesetV1alpha1().NodeSets(c.namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	out := o.streams.Out
	desired := plan.Replicas(set)
	fmt.Fprintf(out, "NodeSet %s/%s (class %s): %d desired, %d current, %d ready, %d up-to-date, %d available\n",
		set.Namespace, set.Name, set.Spec.NodeClassName, desired, set.Status.Replicas, set.Status.ReadyReplicas,
		set.Status.UpdatedReplicas, set.Status.AvailableReplicas)
	for _, cond := range set.Status.Conditions {
		line := fmt.Sprintf("  %s=%s", cond.Type, cond.Status)
		if cond.Reason != "" {
			line += " (" + cond.Reason + ")"
		}
		if cond.Message != "" {
			line += ": " + cond.Message
		}
		fmt.Fprintln(out, line)
	}
	fmt.Fprintln(out)
	selector := resolve.Selector(set)
	nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err == nil {
		// The API server selects by the labels alone: a Node relabelled by
		// its kubelet, or one it registered so (marked none of nodeset's),
		// is none of the set's.
		nodes.Items = slices.DeleteFunc(nodes.Items, func(n corev1.Node) bool { return !selector.Matches(labels.Set(n.Labels)) })
	}
	switch {
	case apierrors.IsForbidden(err):
		fmt.Fprintf(out, "Nodes: not visible to you (%s)\n", err)
	case err != nil:
		return err
	default:
		sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
		w := o.table()
		fmt.Fprintln(w, "NODE\tPHASE\tAGE\tPROVIDER ID")
		for i := range nodes.Items {
			n := &nodes.Items[i]
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", n.Name, nodeutil.Phase(n), age(n.CreationTimestamp.Time), orDash(n.Spec.ProviderID))
		}
		if len(nodes.Items) == 0 {
			fmt.Fprintln(w, "(no nodes)")
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if events <= 0 {
		return nil
	}
	// By UID, as kubectl describe does: Events outlive their object, and an
	// earlier NodeSet of the same name is not this one.
	list, err := c.kube.CoreV1().Events(c.namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "NodeSet", "involvedObject.name": set.Name,
			"involvedObject.uid": string(set.UID)}.String()})
	if err != nil {
		fmt.Fprintf(out, "\nEvents: %s\n", err)
		return nil
	}
	sort.Slice(list.Items, func(i, j int) bool { return eventTime(&list.Items[i]).Before(eventTime(&list.Items[j])) })
	if len(list.Items) > events {
		list.Items = list.Items[len(list.Items)-events:]
	}
	fmt.Fprintln(out)
	w := o.table()
	fmt.Fprintln(w, "LAST SEEN\tTYPE\tREASON\tMESSAGE")
	for i := range list.Items {
		e := &list.Items[i]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", age(eventTime(e)), e.Type, e.Reason, e.Message)
	}
	if len(list.Items) == 0 {
		fmt.Fprintln(w, "(no events)")
	}
	return w.Flush()
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(time.Since(t))
}

// ErrorText formats an error as kubectl does: the API server's own status
// message, with its reason, or the client's error.
func ErrorText(err error) string {
	if status, ok := err.(apierrors.APIStatus); ok || errors.As(err, &status) {
		s := status.Status()
		return fmt.Sprintf("Error from server (%s): %s", s.Reason, s.Message)
	}
	return "error: " + err.Error()
}
