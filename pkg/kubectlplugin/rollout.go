package kubectlplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/plan"
)

// Reasons of the NodeSet's conditions the rollout status reads: the
// nodeset-controller's words.
const (
	reasonComplete                 = "Complete"
	reasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	reasonGroupUpdateFailed        = "GroupUpdateFailed"
)

// rolloutCommand is kubectl nodeset rollout status NAME.
func (o *options) rolloutCommand() *cobra.Command {
	rollout := &cobra.Command{
		Use:   "rollout",
		Short: "Follow a NodeSet's rollout",
	}
	var watching bool
	var timeout time.Duration
	status := &cobra.Command{
		Use:   "status NAME",
		Short: "Wait until a NodeSet has all its nodes of its current spec, available, and its old nodes gone",
		Long: `kubectl nodeset rollout status waits, as kubectl rollout status does for a Deployment, until the
NodeSet's controller has seen its latest spec and the set is complete: every node of the current
template, available (Ready for minReadySeconds), and no old node left. While the set's NodeClass
waits for its node controller's verdict (NodeClassNotValidated) it waits too, and while it waits
for room in its class's limits (LimitExceeded). It fails when the set is not accepted for another
reason (DriverNotServed included: no node controller serves the class's driver), misses its
spec.progressDeadlineSeconds, its cloud group's own update (strategy Managed) failed, or it is
deleted, and when --timeout passes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return fmt.Errorf("--timeout must be 0 (wait for ever) or more, not %s", timeout)
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !watching {
				set, err := c.nodeset.NodesetV1alpha1().NodeSets(c.namespace).Get(ctx, args[0], metav1.GetOptions{})
				if err != nil {
					return err
				}
				msg, _, err := rolloutStatus(set, classGeneration(ctx, c, set))
				if err != nil {
					return err
				}
				fmt.Fprint(o.streams.Out, msg)
				return nil
			}
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			return o.followRollout(ctx, c, args[0])
		},
	}
	status.Flags().BoolVarP(&watching, "watch", "w", true, "Watch the rollout until it is done; false shows where it is and returns.")
	status.Flags().DurationVar(&timeout, "timeout", 0, "How long to wait before giving up; 0 waits for ever.")
	rollout.AddCommand(status, o.rolloutChange("restart", "Replace every node of a NodeSet, by its rollout strategy", restart),
		o.rolloutChange("pause", "Stop a NodeSet's rollout where it is", pause),
		o.rolloutChange("resume", "Go on with a paused NodeSet's rollout", resume))
	return rollout
}

// rolloutChange is kubectl nodeset rollout restart|pause|resume NAME: change
// decides, from the set as it is, the merge patch to write and the word to
// print, or refuses.
func (o *options) rolloutChange(verb, short string, change func(*nodesetv1alpha1.NodeSet, time.Time) (map[string]any, string, error)) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			sets := c.nodeset.NodesetV1alpha1().NodeSets(c.namespace)
			var done string
			// Written only over the set read, and decided again on a
			// conflict: a change made meanwhile (a resume after this read
			// a pause) is never undone unseen.
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				set, err := sets.Get(ctx, args[0], metav1.GetOptions{})
				if err != nil {
					return err
				}
				var patch map[string]any
				if patch, done, err = change(set, time.Now()); err != nil {
					return err
				}
				patch["metadata"] = map[string]any{"resourceVersion": set.ResourceVersion}
				data, err := json.Marshal(patch)
				if err != nil {
					return err
				}
				_, err = sets.Patch(ctx, set.Name, types.MergePatchType, data, metav1.PatchOptions{})
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(o.streams.Out, "nodeset.nodeset.dev/%s %s\n", args[0], done)
			return nil
		},
	}
}

// restart gives the set's template a new nodeset.dev/restartedAt
// annotation: a new template, so the set's strategy replaces every node, as
// kubectl rollout restart does for a Deployment. Refused as kubectl refuses
// a paused Deployment's, and for Managed, whose cloud group replaces nodes
// for its own updates only.
func restart(set *nodesetv1alpha1.NodeSet, now time.Time) (map[string]any, string, error) {
	switch {
	case set.Spec.Paused:
		return nil, "", fmt.Errorf("NodeSet %q is paused: run kubectl nodeset rollout resume %s first", set.Name, set.Name)
	case set.Spec.Strategy.Type == nodesetv1alpha1.ManagedStrategy:
		return nil, "", fmt.Errorf("NodeSet %q has strategy Managed: its cloud group replaces nodes for its own updates only, and a restart would replace none", set.Name)
	}
	return map[string]any{"spec": map[string]any{"template": map[string]any{"annotations": map[string]string{
		nodesetv1alpha1.AnnotationRestartedAt: now.UTC().Format(time.RFC3339)}}}}, "restarted", nil
}

func pause(set *nodesetv1alpha1.NodeSet, _ time.Time) (map[string]any, string, error) {
	if set.Spec.Paused {
		return nil, "", fmt.Errorf("NodeSet %q is already paused", set.Name)
	}
	return map[string]any{"spec": map[string]any{"paused": true}}, "paused", nil
}

func resume(set *nodesetv1alpha1.NodeSet, _ time.Time) (map[string]any, string, error) {
	if !set.Spec.Paused {
		return nil, "", fmt.Errorf("NodeSet %q is not paused", set.Name)
	}
	return map[string]any{"spec": map[string]any{"paused": false}}, "resumed", nil
}

// followRollout prints each new step of the named NodeSet's rollout until
// it is done, fails, or ctx ends.
func (o *options) followRollout(ctx context.Context, c *clients, name string) error {
	sets := c.nodeset.NodesetV1alpha1().NodeSets(c.namespace)
	set, err := sets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err // not found, forbidden: the API server's words
	}
	// The class as it is now: an edit of it made before this command is
	// part of the rollout waited for.
	class := classGeneration(ctx, c, set)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.FieldSelector = selector
			return sets.List(ctx, options)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.FieldSelector = selector
			return sets.Watch(ctx, options)
		},
	}
	last := ""
	_, err = watchtools.UntilWithSync(ctx, lw, &nodesetv1alpha1.NodeSet{}, nil, func(e watch.Event) (bool, error) {
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("NodeSet %q was deleted", name)
		}
		set, ok := e.Object.(*nodesetv1alpha1.NodeSet)
		if !ok {
			return false, nil
		}
		msg, done, err := rolloutStatus(set, class)
		if err != nil {
			return false, err
		}
		if msg != last {
			fmt.Fprint(o.streams.Out, msg)
			last = msg
		}
		return done, nil
	})
	if err != nil && (wait.Interrupted(err) || errors.Is(err, watchtools.ErrWatchClosed) || ctx.Err() != nil) {
		return fmt.Errorf("timed out waiting for the rollout of NodeSet %q", name)
	}
	return err
}

// classGeneration is the metadata.generation of the set's NodeClass, 0 when
// it cannot be read (gone, or not readable by the user): then the rollout
// is followed by the set alone.
func classGeneration(ctx context.Context, c *clients, set *nodesetv1alpha1.NodeSet) int64 {
	class, err := c.nodeset.NodesetV1alpha1().NodeClasses().Get(ctx, set.Spec.NodeClassName, metav1.GetOptions{})
	if err != nil {
		return 0
	}
	return class.Generation
}

// rolloutStatus says where a NodeSet's rollout is: a line to print, whether
// it is done, or why it cannot be. It reads only what the nodeset-controller
// wrote for the generation it observed, and for classGeneration of its
// NodeClass (0: not known), as kubectl's rollout status does.
func rolloutStatus(set *nodesetv1alpha1.NodeSet, classGeneration int64) (string, bool, error) {
	name := set.Name
	if set.DeletionTimestamp != nil {
		return "", false, fmt.Errorf("NodeSet %q is being deleted", name)
	}
	if set.Generation > set.Status.ObservedGeneration {
		return fmt.Sprintf("Waiting for the update of NodeSet %q to be observed...\n", name), false, nil
	}
	if classGeneration > set.Status.ObservedClassGeneration && set.Status.ObservedClassGeneration != 0 {
		// A class edit gives the set no new generation: until the set's
		// status is of the class's generation (validated first), it shows
		// the template of before. (0: a controller of a release that does
		// not record it, or a class not seen yet, which Accepted says.)
		return fmt.Sprintf("Waiting for generation %d of NodeClass %q to be observed by NodeSet %q...\n",
			classGeneration, set.Spec.NodeClassName, name), false, nil
	}
	accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	if accepted != nil && accepted.Status == metav1.ConditionFalse && (accepted.Reason == nodesetv1alpha1.ReasonNodeClassNotValidated ||
		accepted.Reason == nodesetv1alpha1.ReasonNodeClassNotFound && classGeneration > 0) {
		// No verdict yet: the class's generation waits for its node
		// controller to validate it (a class just made or edited), or
		// the class, which this command read, has not reached the
		// controller yet. DriverNotServed is no wait: no node controller
		// serves the driver, and none may ever.
		return fmt.Sprintf("Waiting for NodeSet %q to be judged: %s...\n", name, accepted.Message), false, nil
	}
	// A set waiting for room in its class's limits (LimitExceeded) is no
	// refused set: it goes on when room comes (another set's machine
	// gone, a limit raised), and is waited for, as kubectl waits for a
	// Deployment whose new pods a quota refuses, until its progress
	// deadline.
	waitingForRoom := accepted != nil && accepted.Status == metav1.ConditionFalse && accepted.Reason == nodesetv1alpha1.ReasonLimitExceeded
	if accepted != nil && accepted.Status == metav1.ConditionFalse && !waitingForRoom {
		return "", false, fmt.Errorf("NodeSet %q is not accepted (%s): %s", name, accepted.Reason, accepted.Message)
	}
	msg, done, err := rolloutProgress(set)
	if err == nil && !done && waitingForRoom && !strings.Contains(msg, accepted.Message) {
		msg = strings.TrimSuffix(msg, "...\n") + fmt.Sprintf(" (waiting for room: %s)...\n", accepted.Message)
	}
	return msg, done, err
}

// rolloutProgress says where the rollout of an accepted (or limited) set
// whose latest spec and class the controller observed is.
func rolloutProgress(set *nodesetv1alpha1.NodeSet) (string, bool, error) {
	name := set.Name
	progressing := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetProgressing)
	if progressing != nil && progressing.Reason == reasonProgressDeadlineExceeded {
		return "", false, fmt.Errorf("NodeSet %q exceeded its progress deadline: %s", name, progressing.Message)
	}
	if progressing != nil && progressing.Reason == reasonGroupUpdateFailed {
		return "", false, fmt.Errorf("NodeSet %q: its cloud group's update failed: %s", name, progressing.Message)
	}
	if set.Spec.Strategy.Type == nodesetv1alpha1.OnDeleteStrategy {
		return "", false, fmt.Errorf("NodeSet %q has strategy OnDelete, whose outdated nodes are replaced only when deleted: rollout status follows RollingUpdate and Managed", name)
	}
	desired := plan.Replicas(set)
	s := set.Status
	if plan.RollingUpdate(set) {
		switch {
		case s.UpdatedReplicas < desired:
			return fmt.Sprintf("Waiting for NodeSet %q rollout to finish: %d out of %d new nodes have been updated...\n", name, s.UpdatedReplicas, desired), false, nil
		case s.Replicas > s.UpdatedReplicas:
			return fmt.Sprintf("Waiting for NodeSet %q rollout to finish: %d old nodes are pending termination...\n", name, s.Replicas-s.UpdatedReplicas), false, nil
		case s.AvailableReplicas < s.UpdatedReplicas:
			return fmt.Sprintf("Waiting for NodeSet %q rollout to finish: %d of %d updated nodes are available...\n", name, s.AvailableReplicas, s.UpdatedReplicas), false, nil
		}
	}
	if progressing == nil || progressing.Reason != reasonComplete {
		what := "no Progressing condition yet"
		if progressing != nil {
			what = progressing.Message
		}
		return fmt.Sprintf("Waiting for NodeSet %q rollout to finish: %s...\n", name, what), false, nil
	}
	return fmt.Sprintf("NodeSet %q successfully rolled out\n", name), true, nil
}
