// Command nodeset-certs provisions nodeset's TLS material in the cluster: a
// self-signed CA, the serving certificates of the webhook and the autoscaler
// API, cluster-autoscaler's client certificate, and the webhook
// configuration's caBundle. deploy/certs runs it as a Job at install and as a
// CronJob that renews certificates before they expire.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"nodeset.dev/nodeset/pkg/servingcerts"
)

func main() {
	var kubeconfig string
	var timeout time.Duration
	opts := servingcerts.Options{}
	var webhookSecret, webhookService, autoscalerSecret, autoscalerService string
	fs := pflag.NewFlagSet("nodeset-certs", pflag.ExitOnError)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster configuration when empty.")
	fs.StringVar(&opts.Namespace, "namespace", "nodeset-system", "Namespace of the Services and Secrets.")
	fs.StringVar(&opts.CASecret, "ca-secret", "nodeset-ca", "Secret holding the CA (ca.crt, ca.key).")
	fs.StringVar(&webhookSecret, "webhook-secret", "nodeset-webhook-tls", "kubernetes.io/tls Secret for the webhook's serving certificate.")
	fs.StringVar(&webhookService, "webhook-service", "nodeset-webhook", "Service of the webhook.")
	fs.StringVar(&autoscalerSecret, "autoscaler-secret", "nodeset-autoscaler-tls", "kubernetes.io/tls Secret for the autoscaler API's serving certificate.")
	fs.StringVar(&autoscalerService, "autoscaler-service", "nodeset-autoscaler", "Service of the autoscaler API.")
	fs.StringVar(&opts.ClientSecret, "client-secret", "cluster-autoscaler-client-tls", "kubernetes.io/tls Secret for cluster-autoscaler's client certificate.")
	fs.StringVar(&opts.ClientName, "client-common-name", "cluster-autoscaler", "Common name of the client certificate.")
	fs.StringVar(&opts.WebhookConfiguration, "webhook-configuration", "nodeset.dev", "ValidatingWebhookConfiguration to put the CA in; empty skips it.")
	fs.StringVar(&opts.ClusterDomain, "cluster-domain", "cluster.local", "The cluster's DNS domain.")
	fs.DurationVar(&opts.Validity, "validity", 365*24*time.Hour, "Validity of issued certificates (the CA: ten times as long); renewed with a third left.")
	fs.DurationVar(&opts.WebhookWait, "webhook-wait", 2*time.Minute, "How long to wait for the webhook configuration to exist.")
	fs.DurationVar(&timeout, "timeout", 5*time.Minute, "Give up after this long.")
	_ = fs.Parse(os.Args[1:])
	opts.Serving = []servingcerts.ServingCertificate{
		{Secret: webhookSecret, Service: webhookService},
		{Secret: autoscalerSecret, Service: autoscalerService},
	}

	if err := run(kubeconfig, timeout, opts); err != nil {
		fmt.Fprintln(os.Stderr, "nodeset-certs:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, timeout time.Duration, opts servingcerts.Options) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ctx = klog.NewContext(ctx, klog.Background())
	return servingcerts.Provision(ctx, kube, opts)
}
