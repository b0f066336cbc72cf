package eksasg

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/smithy-go/middleware"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// Credential keys read from a class's credentials Secret; without them the
// SDK's default chain (IRSA, instance profile, environment) is used.
const (
	CredentialAccessKeyID     = "aws_access_key_id"
	CredentialSecretAccessKey = "aws_secret_access_key"
	CredentialSessionToken    = "aws_session_token"
)

// SDKConfig configures the real API clients.
type SDKConfig struct {
	// Endpoint, when set, is where every call goes (an emulator such as moto
	// in tests).
	Endpoint string
	// QPS and Burst limit the calls of all clients together, client-side,
	// so that a fleet of NodeSets never runs into the account's API rate
	// limits. 0 means 10 and 20.
	QPS   float64
	Burst int
	// MaxAttempts of a call that failed with a retryable error (throttling,
	// 5xx); retries back off exponentially with full jitter. 0 means 5.
	MaxAttempts int
	// MaxBackoff caps the wait before a retry. 0 means the SDK's 20s.
	MaxBackoff time.Duration
	// Observe, when set, is told every call's operation, outcome
	// ("success", "throttled", or "error") and number of attempts (1 when
	// it was not retried).
	Observe func(operation, outcome string, attempts int)
}

// SDKClients makes real API clients sending every call to endpoint (all
// of AWS when empty).
func SDKClients(endpoint string) Clients { return NewSDKClients(SDKConfig{Endpoint: endpoint}) }

// NewSDKClients makes real API clients, one pair per region and set of
// credentials, kept for the life of the process.
func NewSDKClients(c SDKConfig) Clients { return ClientsFrom(NewAWSConfigs(c)) }

// ClientsFrom makes API clients from shared configurations (NewAWSConfigs),
// one pair per configuration.
func ClientsFrom(configs func(ctx context.Context, region string, creds map[string][]byte) (*aws.Config, error)) Clients {
	type pair struct {
		asg *autoscaling.Client
		ec2 *ec2.Client
	}
	var (
		mu    sync.Mutex
		cache = map[*aws.Config]pair{}
	)
	return func(ctx context.Context, region string, creds map[string][]byte) (AutoScaling, EC2, error) {
		cfg, err := configs(ctx, region, creds)
		if err != nil {
			return nil, nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		p, ok := cache[cfg]
		if !ok {
			p = pair{autoscaling.NewFromConfig(*cfg), ec2.NewFromConfig(*cfg)}
			cache[cfg] = p
		}
		return p.asg, p.ec2, nil
	}
}

// NewClusterLookup looks EKS clusters up with DescribeCluster, through the
// shared configurations of NewAWSConfigs.
func NewClusterLookup(configs func(ctx context.Context, region string, creds map[string][]byte) (*aws.Config, error)) ClusterLookup {
	return func(ctx context.Context, region string, creds map[string][]byte, cluster string) (ClusterInfo, error) {
		cfg, err := configs(ctx, region, creds)
		if err != nil {
			return ClusterInfo{}, err
		}
		out, err := eks.NewFromConfig(*cfg).DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(cluster)})
		if IsCode(err, "ResourceNotFoundException") {
			return ClusterInfo{}, drivers.InvalidConfiguration("spec.eksAutoscalingGroup.clusterName", "EKS cluster %s does not exist in %s", cluster, region)
		}
		if err != nil {
			return ClusterInfo{}, Classify("describing EKS cluster "+cluster, err)
		}
		c := out.Cluster
		info := ClusterInfo{Endpoint: aws.ToString(c.Endpoint)}
		if c.CertificateAuthority != nil {
			info.CertificateAuthority = aws.ToString(c.CertificateAuthority.Data)
		}
		if n := c.KubernetesNetworkConfig; n != nil {
			info.ServiceCIDR = aws.ToString(n.ServiceIpv4Cidr)
		}
		if info.Endpoint == "" || info.CertificateAuthority == "" {
			return ClusterInfo{}, fmt.Errorf("EKS cluster %s has no endpoint or CA yet (status %s)", cluster, c.Status)
		}
		return info, nil
	}
}

// NewAWSConfigs returns the AWS configuration of a region and a set of
// credentials (the SDK's default chain when they hold no keys), made once
// and shared: the endpoint, the retryer and the client-side rate limit of c,
// one limiter for all of them.
func NewAWSConfigs(c SDKConfig) func(ctx context.Context, region string, creds map[string][]byte) (*aws.Config, error) {
	if c.QPS <= 0 {
		c.QPS = 10
	}
	if c.Burst <= 0 {
		c.Burst = 20
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	limiter := rate.NewLimiter(rate.Limit(c.QPS), c.Burst)
	var (
		mu    sync.Mutex
		cache = map[string]*aws.Config{}
	)
	return func(ctx context.Context, region string, creds map[string][]byte) (*aws.Config, error) {
		id, secret, token := string(creds[CredentialAccessKeyID]), string(creds[CredentialSecretAccessKey]), string(creds[CredentialSessionToken])
		sum := sha256.Sum256([]byte(region + "\x00" + id + "\x00" + secret + "\x00" + token))
		key := hex.EncodeToString(sum[:])
		mu.Lock()
		defer mu.Unlock()
		if cfg, ok := cache[key]; ok {
			return cfg, nil
		}
		opts := []func(*config.LoadOptions) error{
			config.WithRegion(region),
			config.WithRetryer(func() aws.Retryer {
				return retry.NewStandard(func(o *retry.StandardOptions) {
					o.MaxAttempts = c.MaxAttempts
					if c.MaxBackoff > 0 {
						o.MaxBackoff = c.MaxBackoff
						o.Backoff = retry.NewExponentialJitterBackoff(c.MaxBackoff)
					}
				})
			}),
			config.WithAPIOptions([]func(*middleware.Stack) error{func(stack *middleware.Stack) error {
				return stack.Initialize.Add(callMiddleware(limiter, c.Observe), middleware.Before)
			}}),
		}
		if id != "" && secret != "" {
			opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(id, secret, token)))
		}
		cfg, err := config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("AWS configuration for %s: %w", region, err)
		}
		if c.Endpoint != "" {
			cfg.BaseEndpoint = aws.String(c.Endpoint)
		}
		cache[key] = &cfg
		return &cfg, nil
	}
}

// callMiddleware waits for the client-side rate limiter before each call
// (its retries are paced by the retryer's backoff) and reports the call's
// outcome once, after the retries.
func callMiddleware(limiter *rate.Limiter, observe func(operation, outcome string, attempts int)) middleware.InitializeMiddleware {
	return middleware.InitializeMiddlewareFunc("nodesetCalls", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
		middleware.InitializeOutput, middleware.Metadata, error) {
		if err := limiter.Wait(ctx); err != nil {
			return middleware.InitializeOutput{}, middleware.Metadata{}, err
		}
		out, md, err := next.HandleInitialize(ctx, in)
		if observe != nil {
			outcome := "success"
			switch {
			case errors.Is(Classify("", err), drivers.ErrThrottled):
				outcome = "throttled"
			case err != nil:
				outcome = "error"
			}
			attempts := 1
			if results, ok := retry.GetAttemptResults(md); ok && len(results.Results) > 0 {
				attempts = len(results.Results)
			}
			observe(awsmiddleware.GetOperationName(ctx), outcome, attempts)
		}
		return out, md, err
	})
}

func typesUID(s string) types.UID { return types.UID(s) }

// UserData is the base64 user data that joins an instance to its EKS
// cluster: a nodeadm NodeConfig (the default) or a bootstrap.sh call. The
// Node's labels and taints go to the kubelet too, so that they hold from the
// first moment; the controller applies them on the Node regardless.
func UserData(s *nodesetv1alpha1.EKSAutoscalingGroup, labels map[string]string, taints []corev1.Taint) (string, error) {
	b := s.Bootstrap
	if b == nil {
		b = &nodesetv1alpha1.EKSBootstrap{}
	}
	if b.APIServerEndpoint == "" || b.CertificateAuthority == "" {
		return "", drivers.InvalidConfiguration("spec.eksAutoscalingGroup.bootstrap",
			"apiServerEndpoint and certificateAuthority are required when the node controller cannot look them up from EKS")
	}
	var nodeLabels []string
	for _, k := range sortedKeys(labels) {
		nodeLabels = append(nodeLabels, k+"="+labels[k])
	}
	var nodeTaints []string
	for _, t := range taints {
		nodeTaints = append(nodeTaints, t.Key+"="+t.Value+":"+string(t.Effect))
	}
	sort.Strings(nodeTaints)
	flags := append([]string{}, b.KubeletExtraArgs...)
	if len(nodeLabels) > 0 {
		flags = append(flags, "--node-labels="+strings.Join(nodeLabels, ","))
	}
	if len(nodeTaints) > 0 {
		flags = append(flags, "--register-with-taints="+strings.Join(nodeTaints, ","))
	}
	var out strings.Builder
	if b.Format == nodesetv1alpha1.BootstrapScript {
		out.WriteString("#!/bin/bash\nset -o errexit -o nounset -o pipefail\n")
		for _, c := range b.PreBootstrapCommands {
			out.WriteString(c + "\n")
		}
		fmt.Fprintf(&out, "/etc/eks/bootstrap.sh %s --apiserver-endpoint %s --b64-cluster-ca %s", shellQuote(s.ClusterName),
			shellQuote(b.APIServerEndpoint), shellQuote(b.CertificateAuthority))
		if b.ServiceCIDR != "" {
			fmt.Fprintf(&out, " --service-ipv4-cidr %s", shellQuote(b.ServiceCIDR))
		}
		if len(flags) > 0 {
			fmt.Fprintf(&out, " --kubelet-extra-args %s", shellQuote(strings.Join(flags, " ")))
		}
		out.WriteString("\n")
		return base64.StdEncoding.EncodeToString([]byte(out.String())), nil
	}
	const boundary = "NODESET"
	fmt.Fprintf(&out, "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=%q\n\n", boundary)
	if len(b.PreBootstrapCommands) > 0 {
		fmt.Fprintf(&out, "--%s\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\n%s\n\n", boundary, strings.Join(b.PreBootstrapCommands, "\n"))
	}
	fmt.Fprintf(&out, "--%s\nContent-Type: application/node.eks.aws\n\n", boundary)
	fmt.Fprintf(&out, "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: %q\n    apiServerEndpoint: %q\n    certificateAuthority: %q\n",
		s.ClusterName, b.APIServerEndpoint, b.CertificateAuthority)
	if b.ServiceCIDR != "" {
		fmt.Fprintf(&out, "    cidr: %q\n", b.ServiceCIDR)
	}
	if len(flags) > 0 {
		out.WriteString("  kubelet:\n    flags:\n")
		for _, f := range flags {
			fmt.Fprintf(&out, "    - %q\n", f)
		}
	}
	fmt.Fprintf(&out, "\n--%s--\n", boundary)
	return base64.StdEncoding.EncodeToString([]byte(out.String())), nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'" }

// capacityOf is a node's capacity from its instance type. Pods follow the
// VPC CNI's limit: ENIs × (IPv4 addresses per ENI − 1) + 2.
func capacityOf(t ec2types.InstanceTypeInfo) drivers.Capacity {
	c := drivers.Capacity{Resources: corev1.ResourceList{}, Labels: map[string]string{
		corev1.LabelInstanceTypeStable: string(t.InstanceType),
	}}
	if t.VCpuInfo != nil && t.VCpuInfo.DefaultVCpus != nil {
		c.Resources[corev1.ResourceCPU] = *resource.NewQuantity(int64(*t.VCpuInfo.DefaultVCpus), resource.DecimalSI)
	}
	if t.MemoryInfo != nil && t.MemoryInfo.SizeInMiB != nil {
		c.Resources[corev1.ResourceMemory] = *resource.NewQuantity(*t.MemoryInfo.SizeInMiB*1024*1024, resource.BinarySI)
	}
	if n := t.NetworkInfo; n != nil && n.MaximumNetworkInterfaces != nil && n.Ipv4AddressesPerInterface != nil {
		pods := int64(*n.MaximumNetworkInterfaces)*(int64(*n.Ipv4AddressesPerInterface)-1) + 2
		c.Resources[corev1.ResourcePods] = *resource.NewQuantity(pods, resource.DecimalSI)
	}
	if p := t.ProcessorInfo; p != nil && len(p.SupportedArchitectures) > 0 {
		arch := string(p.SupportedArchitectures[0])
		if arch == "x86_64" {
			arch = "amd64"
		}
		c.Labels[corev1.LabelArchStable] = arch
	}
	return c
}
