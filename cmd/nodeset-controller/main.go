// Command nodeset-controller turns NodeSets into Node objects. It never talks
// to a cloud and never reads credentials.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/klog/v2"

	"nodeset.dev/nodeset/pkg/admission"
	"nodeset.dev/nodeset/pkg/autoscaler"
	"nodeset.dev/nodeset/pkg/component"
	nodesetcontroller "nodeset.dev/nodeset/pkg/controller/nodeset"
	"nodeset.dev/nodeset/pkg/generated/informers/externalversions"
	listers "nodeset.dev/nodeset/pkg/generated/listers/nodeset/v1alpha1"
)

func main() {
	var opts component.Options
	var resync, statusInterval, nodeEventBatch, driverClaimGrace time.Duration
	var serving autoscaler.ServingOptions
	var webhook admission.ServingOptions
	fs := pflag.NewFlagSet("nodeset-controller", pflag.ExitOnError)
	opts.AddFlags(fs, 4)
	fs.DurationVar(&resync, "resync-period", 10*time.Minute, "How often every NodeSet is reconciled even without changes.")
	fs.DurationVar(&statusInterval, "status-update-interval", time.Second,
		"Least time between two status writes of a NodeSet that only count progress (replica counts, condition messages); 0 writes every change.")
	fs.DurationVar(&nodeEventBatch, "node-event-batch-period", 500*time.Millisecond,
		"How long a NodeSet's sync waits after a change of one of its Nodes, so that many Nodes' changes are handled by one sync; 0 syncs at once.")
	serving.AddFlags(fs)
	webhook.AddFlags(fs)
	fs.DurationVar(&driverClaimGrace, "driver-claim-grace", nodesetcontroller.DefaultDriverClaimGrace,
		"How long a NodeClass generation waits for validation while no node controller claims its driver (a Lease nodeset-driver-<driver> in the leader-election namespace) before its NodeSets say DriverNotServed.")
	_ = fs.Parse(os.Args[1:])
	// Before anything starts: an unauthenticated autoscaler API is a startup error, not a log line.
	if err := serving.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "nodeset-controller:", err)
		os.Exit(2)
	}

	var controller atomic.Pointer[nodesetcontroller.Controller]
	var setLister atomic.Pointer[listers.NodeSetLister]
	synced := make(chan struct{})
	registry := prometheus.NewRegistry()
	registry.MustRegister(nodesetcontroller.NewReplicasCollector(func() listers.NodeSetLister {
		if l := setLister.Load(); l != nil {
			return *l
		}
		return nil
	}))
	err := component.Run(opts, component.Process{
		Name:     "nodeset-controller",
		Registry: registry,
		Ready: func() bool {
			c := controller.Load()
			return c != nil && c.HasSynced()
		},
		// Every replica keeps the caches and answers the webhook and
		// cluster-autoscaler, whichever a Service sends them to; only the
		// leader runs the controller's workers.
		Serve: func(ctx context.Context, clients component.Clients) error {
			kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(clients.Watch.Kube, resync, kubeinformers.WithTransform(component.StripNodeStatus))
			nodesetFactory := externalversions.NewSharedInformerFactoryWithOptions(clients.Watch.Nodeset, resync, externalversions.WithTransform(component.StripManagedFields))
			// The node controllers claim their drivers with Leases in the
			// leader-election namespace, which they share with this one.
			claimsFactory := kubeinformers.NewSharedInformerFactoryWithOptions(clients.Watch.Kube, resync, kubeinformers.WithNamespace(opts.LeaderElectionNamespace))
			c, err := nodesetcontroller.NewController(ctx, clients.Kube, clients.Nodeset, clients.Recorder,
				kubeFactory.Core().V1().Nodes(), kubeFactory.Core().V1().Namespaces(),
				nodesetFactory.Nodeset().V1alpha1().NodeSets(), nodesetFactory.Nodeset().V1alpha1().NodeClasses(),
				nodesetcontroller.Options{StatusInterval: statusInterval, NodeEventBatch: nodeEventBatch,
					DriverClaims: claimsFactory.Coordination().V1().Leases(), DriverClaimsNamespace: opts.LeaderElectionNamespace,
					DriverClaimGrace: driverClaimGrace})
			if err != nil {
				return err
			}
			lister := nodesetFactory.Nodeset().V1alpha1().NodeSets().Lister()
			setLister.Store(&lister)
			// cluster-autoscaler's writes are its own requests, made with
			// optimistic concurrency: any replica may make them.
			server := autoscaler.NewServer(clients.Unfenced.Nodeset, nodesetFactory.Nodeset().V1alpha1().NodeSets().Lister(),
				nodesetFactory.Nodeset().V1alpha1().NodeClasses().Lister(), kubeFactory.Core().V1().Nodes().Lister(), c.ClassCount)
			kubeFactory.Start(ctx.Done())
			claimsFactory.Start(ctx.Done())
			defer claimsFactory.Shutdown()
			nodesetFactory.Start(ctx.Done())
			defer kubeFactory.Shutdown()
			defer nodesetFactory.Shutdown()
			if !c.WaitForCacheSync(ctx) {
				return nil // shutting down
			}
			controller.Store(c)
			close(synced)
			errs := make(chan error, 2)
			if serving.BindAddress != "" {
				go func() { errs <- serving.Serve(ctx, server) }()
			}
			if webhook.BindAddress != "" {
				// Any pod may reach the webhook: what it looks up beyond
				// the caches is bounded, or forged reviews would spend the
				// controller's API budget.
				admitter := admission.BoundLookups(c, lister, nodesetFactory.Nodeset().V1alpha1().NodeClasses().Lister())
				go func() { errs <- webhook.Serve(ctx, admitter) }()
			}
			select {
			case err := <-errs:
				return err
			case <-ctx.Done():
				return nil
			}
		},
		Start: func(ctx context.Context, clients component.Clients) error {
			select {
			case <-synced:
			case <-ctx.Done():
				return nil
			}
			return controller.Load().Run(ctx, opts.Workers)
		},
	})
	if err != nil {
		klog.Background().Error(err, "nodeset-controller failed")
		fmt.Fprintln(os.Stderr, strings.TrimSpace(err.Error()))
		os.Exit(1)
	}
}
