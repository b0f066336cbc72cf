package awscloud

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"golang.org/x/time/rate"

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
	// Fence, when set, is asked before every attempt of a call that may
	// change something (any operation but Describe*, List* and Get*): an
	// error refuses the attempt, unsent and not retried. The node
	// controller answers with its write fence, so a replica that may not
	// lead changes nothing in the cloud, whatever code path asks.
	Fence func() error
	// AppID, when set, is written into every call's User-Agent as
	// app/<AppID>: the node controller gives its replica identity, so
	// CloudTrail tells replicas apart.
	AppID string
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
		// A Secret made from files holds each key with the files' final
		// newline; AWS keys never contain white space.
		id, secret, token := credential(creds, CredentialAccessKeyID), credential(creds, CredentialSecretAccessKey), credential(creds, CredentialSessionToken)
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
				if c.Fence != nil {
					if err := stack.Finalize.Add(fenceMiddleware(c.Fence), middleware.After); err != nil {
						return err
					}
				}
				return stack.Initialize.Add(callMiddleware(limiter, c.Observe), middleware.Before)
			}}),
		}
		if c.AppID != "" {
			opts = append(opts, config.WithAppID(c.AppID))
		}
		if (id == "") != (secret == "") {
			return nil, fmt.Errorf("AWS credentials need both %s and %s, or neither", CredentialAccessKeyID, CredentialSecretAccessKey)
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

// credential is the value of key in a credentials Secret's data, without
// the white space around it.
func credential(creds map[string][]byte, key string) string {
	return strings.TrimSpace(string(creds[key]))
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

// FencedAtPrefix starts the User-Agent word that gives, in Unix
// milliseconds, when the fence let an attempt of a changing call through.
const FencedAtPrefix = "fenced-at/"

// fenceMiddleware asks fence before each attempt of a call that may change
// something, and writes when it was let through into the User-Agent, as the
// Kubernetes clients' write fence does.
func fenceMiddleware(fence func() error) middleware.FinalizeMiddleware {
	return middleware.FinalizeMiddlewareFunc("nodesetFence", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
		middleware.FinalizeOutput, middleware.Metadata, error) {
		if ReadOnly(awsmiddleware.GetOperationName(ctx)) {
			return next.HandleFinalize(ctx, in)
		}
		checked := time.Now()
		if err := fence(); err != nil {
			return middleware.FinalizeOutput{}, middleware.Metadata{}, fmt.Errorf("%s not sent: %w", awsmiddleware.GetOperationName(ctx), err)
		}
		if req, ok := in.Request.(*smithyhttp.Request); ok {
			req.Header.Set("User-Agent", strings.TrimSpace(req.Header.Get("User-Agent")+" "+FencedAtPrefix+strconv.FormatInt(checked.UnixMilli(), 10)))
		}
		return next.HandleFinalize(ctx, in)
	})
}

// ReadOnly reports whether an AWS operation only reads, by AWS's naming.
func ReadOnly(operation string) bool {
	return strings.HasPrefix(operation, "Describe") || strings.HasPrefix(operation, "List") || strings.HasPrefix(operation, "Get")
}
