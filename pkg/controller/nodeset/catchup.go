package nodeset

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// catchUpTimeout bounds how long a new leader waits for its Node cache to
// show the Nodes the API server has, before its workers start anyway.
const catchUpTimeout = time.Minute

// catchUpPage is how many Nodes one request of the catch-up list returns.
const catchUpPage = 500

// catchUp waits until the Node cache shows what the API server has now of
// the NodeSets' Nodes: every one of them, at its version or a later one,
// and none that the API server no longer has; or until the cache has seen
// a resourceVersion at or past the list's, when a difference left is a
// change made since. A standby keeps its caches while the leader works,
// and takes over with its own expectations empty: its watch may still be
// behind the last creations and deletions of the leader it replaces. The
// margin for it is the lease duration less the renew deadline after a
// lost leader, only the retry period after a leader's release on
// shutdown, and a busy API server's watch, or one reconnecting after an
// outage, can overrun either. Synced on that cache, a set would make a
// Node again for each creation not seen yet, or pick a second victim for
// each deletion. A failed list or the timeout is logged, and the workers
// start: the expectations then guard what they guarded before.
func (c *Controller) catchUp(ctx context.Context, timeout time.Duration) {
	logger := klog.FromContext(ctx)
	// Every Node that names a NodeSet (nodeSetKey asks for this label).
	selector := nodesetv1alpha1.LabelNodeSet
	live := map[string]*corev1.Node{}
	var listed string
	err := nodeutil.ListInPages(ctx, catchUpPage, func(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
		opts.LabelSelector = selector
		return c.kubeClient.CoreV1().Nodes().List(ctx, opts)
	}, func(list *corev1.NodeList) {
		if listed == "" {
			listed = list.ResourceVersion
		}
		for i := range list.Items {
			live[list.Items[i].Name] = &list.Items[i]
		}
	})
	if err != nil {
		if ctx.Err() == nil {
			logger.Error(err, "Cannot list the Nodes to check that the cache is not behind; starting the workers")
		}
		return
	}
	start := c.now()
	// The Nodes the cache shows differently are found once, by a pass over
	// every Node; then only those are looked at again, as the cache only
	// moves forward: the cost of waiting is that of what changed.
	behind := c.cacheDifferences(live)
	if len(behind) > 0 && !atLeast(c.nodesSeen(), listed) {
		logger.V(2).Info("Waiting for the Node cache to show what the API server has before starting the workers", "behind", len(behind), "first", firstDifference(behind))
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if atLeast(c.nodesSeen(), listed) {
			clear(behind)
			return true, nil
		}
		for name := range behind {
			if c.nodeDifference(name, live[name]) == "" {
				delete(behind, name)
			}
		}
		return len(behind) == 0, nil
	})
	switch {
	case err == nil:
		logger.V(2).Info("The Node cache shows what the API server has", "nodes", len(live), "waited", c.now().Sub(start))
	case ctx.Err() != nil:
	default:
		logger.Error(nil, "The Node cache is still behind the API server; starting the workers", "waited", timeout, "behind", len(behind), "first", firstDifference(behind))
	}
}

// cacheBehindList says how the Node cache is behind live, the NodeSets'
// Nodes that a list at resourceVersion listed returned, "" when it is not.
func (c *Controller) cacheBehindList(live map[string]*corev1.Node, listed string) string {
	if atLeast(c.nodesSeen(), listed) {
		return ""
	}
	return firstDifference(c.cacheDifferences(live))
}

// cacheDifferences is, by Node name, how the Node cache differs from live,
// the NodeSets' Nodes of a list: a Node of live it does not show, or shows
// at an older version or as another Node, and a Node of a set it shows
// that live does not have.
func (c *Controller) cacheDifferences(live map[string]*corev1.Node) map[string]string {
	behind := map[string]string{}
	for name, want := range live {
		if why := c.nodeDifference(name, want); why != "" {
			behind[name] = why
		}
	}
	cached, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		behind[""] = err.Error()
		return behind
	}
	for _, have := range cached {
		if _, ok := nodeSetKey(have); !ok {
			continue
		}
		if want, ok := live[have.Name]; !ok || want.UID != have.UID {
			if why := c.nodeDifference(have.Name, live[have.Name]); why != "" {
				behind[have.Name] = why
			}
		}
	}
	return behind
}

// nodeDifference says how the cache's Node name differs from want, the
// API server's (nil when it had none of the name in a set), "" when the
// cache shows it, or shows it gone, or a later version of it.
func (c *Controller) nodeDifference(name string, want *corev1.Node) string {
	have, err := c.nodeLister.Get(name)
	switch {
	case apierrors.IsNotFound(err):
		if want == nil {
			return ""
		}
		return fmt.Sprintf("Node %s is not in the cache", name)
	case err != nil:
		return err.Error()
	case want == nil:
		if _, ok := nodeSetKey(have); !ok {
			return ""
		}
		return fmt.Sprintf("Node %s (UID %s) is in the cache, not in the API server", name, have.UID)
	case have.UID != want.UID:
		return fmt.Sprintf("Node %s is another Node (UID %s) in the cache", name, have.UID)
	case have.ResourceVersion != want.ResourceVersion && !atLeast(have.ResourceVersion, want.ResourceVersion):
		return fmt.Sprintf("Node %s is at resourceVersion %s in the cache, %s in the API server", name, have.ResourceVersion, want.ResourceVersion)
	}
	return ""
}

// firstDifference is one of behind's differences, in name order, "" when
// there is none.
func firstDifference(behind map[string]string) string {
	if len(behind) == 0 {
		return ""
	}
	names := make([]string, 0, len(behind))
	for name := range behind {
		names = append(names, name)
	}
	slices.Sort(names)
	return behind[names[0]]
}

// atLeast reports whether resourceVersion a is b or later. Versions that
// are not numbers (an API server that does not number them, the cache's
// before its first watch event) are never: the cache is then compared
// object by object.
func atLeast(a, b string) bool {
	cmp, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && cmp >= 0
}
