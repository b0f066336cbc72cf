package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"nodeset.dev/nodeset/pkg/nodeutil"
)

// podPage is how many pods one request of a list of every pod returns.
const podPage = 500

// podListTimeout bounds one round of pod lists.
const podListTimeout = time.Minute

// PodLists answers a drain's question "which pods are on this node now?",
// with a read made after the question was asked, so a pod bound before the
// node's cordon is never missed. Questions asked while a read is under way
// wait for the next read together: when many Nodes drain at once (a
// scale-down of hundreds), one list of every pod, a page at a time, answers
// them all, instead of a list per Node on the node controller's rate
// limit. Few Nodes in a big cluster are still asked about one by one: a
// round lists every pod only when that takes fewer requests than a list
// per Node, judged by how many pods the last full list saw.
type PodLists struct {
	kube kubernetes.Interface

	mu      sync.Mutex
	next    *podRound // gathering; starts when the running round ends
	running bool
	// seen is how many pods the last list of every pod returned.
	seen int
}

// podRound is one read serving the Nodes asked about before it started.
type podRound struct {
	nodes map[string]bool
	done  chan struct{}
	pods  map[string][]corev1.Pod
	err   error
}

// NewPodLists answers drains' pod lists through kube.
func NewPodLists(kube kubernetes.Interface) *PodLists { return &PodLists{kube: kube} }

// OnNode returns the pods bound to node, read after the call began.
func (p *PodLists) OnNode(ctx context.Context, node string) ([]corev1.Pod, error) {
	p.mu.Lock()
	if p.next == nil {
		p.next = &podRound{nodes: map[string]bool{}, done: make(chan struct{})}
	}
	r := p.next
	r.nodes[node] = true
	start := !p.running
	if start {
		p.running, p.next = true, nil
	}
	p.mu.Unlock()
	if start {
		go p.run(klog.FromContext(ctx), r)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, r.err
	}
	return r.pods[node], nil
}

// run reads r, then every round that gathered meanwhile.
func (p *PodLists) run(logger klog.Logger, r *podRound) {
	for r != nil {
		ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logger), podListTimeout)
		r.pods, r.err = p.read(ctx, r.nodes)
		cancel()
		close(r.done)
		p.mu.Lock()
		r, p.next = p.next, nil
		p.running = r != nil
		p.mu.Unlock()
	}
}

// read lists the pods of nodes: every pod, a page at a time, when that is
// fewer requests than one list per node; else a list per node.
func (p *PodLists) read(ctx context.Context, nodes map[string]bool) (map[string][]corev1.Pod, error) {
	p.mu.Lock()
	pages := p.seen/podPage + 1
	p.mu.Unlock()
	out := make(map[string][]corev1.Pod, len(nodes))
	if len(nodes) > 1 && pages < len(nodes) {
		total := 0
		err := nodeutil.ListInPages(ctx, podPage, p.kube.CoreV1().Pods(metav1.NamespaceAll).List, func(list *corev1.PodList) {
			total += len(list.Items)
			for _, pod := range list.Items {
				if nodes[pod.Spec.NodeName] {
					out[pod.Spec.NodeName] = append(out[pod.Spec.NodeName], pod)
				}
			}
		})
		if err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		p.mu.Lock()
		p.seen = total
		p.mu.Unlock()
		return out, nil
	}
	// A list per node, side by side, as the workers asking would have.
	var (
		wg    sync.WaitGroup
		outMu sync.Mutex
		first error
	)
	for node := range nodes {
		wg.Go(func() {
			list, err := p.kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
			})
			outMu.Lock()
			defer outMu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("listing pods on %s: %w", node, err)
				}
				return
			}
			for _, pod := range list.Items {
				if pod.Spec.NodeName == node {
					out[node] = append(out[node], pod)
				}
			}
		})
	}
	wg.Wait()
	return out, first
}
