// Command localup starts or stops the local control plane (etcd,
// kube-apiserver, kube-scheduler on loopback) for the demo and for manual use.
// hack/local-up.sh and hack/local-down.sh call it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"nodeset.dev/nodeset/test/framework"
)

func main() {
	down := flag.Bool("down", false, "stop the control plane and remove its state")
	dir := flag.String("dir", defaultDir(), "directory for the control plane's state, logs and kubeconfig")
	binDir := flag.String("bin-dir", "", "directory with etcd, kube-apiserver, kube-scheduler and kubectl")
	kubeconfigFor := flag.String("kubeconfig-for", "", "write a kubeconfig for this user of the running control plane and print its path")
	webhookPort := flag.Int("webhook-port", 19443, "register the nodeset webhooks at https://127.0.0.1:<port>, where a local nodeset-controller serves them")
	flag.Parse()
	if *kubeconfigFor != "" {
		cp, err := framework.Load(context.Background(), *dir)
		if err == nil {
			var path string
			if path, err = cp.WriteKubeconfig(*kubeconfigFor); err == nil {
				fmt.Println(path)
				return
			}
		}
		fmt.Fprintln(os.Stderr, "local-up:", err)
		os.Exit(1)
	}
	if err := run(*down, *dir, *binDir, *webhookPort); err != nil {
		fmt.Fprintln(os.Stderr, "local-up:", err)
		os.Exit(1)
	}
}

func defaultDir() string {
	if dir := os.Getenv("NODESET_LOCAL_DIR"); dir != "" {
		return dir
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "nodeset", "local-up")
}

func run(down bool, dir, binDir string, webhookPort int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if down {
		cp, err := framework.Load(ctx, dir)
		if cp != nil {
			cp.Stop()
		}
		if err != nil && cp == nil {
			fmt.Println("local-up: no control plane state in", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		fmt.Println("local-up: stopped; removed", dir)
		return nil
	}

	if cp, err := framework.Load(ctx, dir); err == nil {
		fmt.Printf("local-up: reusing the running control plane at %s\n", cp.Host)
		return admission(ctx, cp, webhookPort)
	} else if cp != nil {
		fmt.Println("local-up: the previous control plane is not healthy; starting a new one")
		cp.Stop()
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if binDir == "" {
		if binDir, err = framework.KubeBinaries(ctx, root); err != nil {
			return err
		}
	}
	start := time.Now()
	cp, err := framework.Start(ctx, framework.Options{
		Dir:       dir,
		BinDir:    binDir,
		Scheduler: true,
		Detach:    true,
		Users:     framework.TestUsers,
	})
	if err != nil {
		return err
	}
	if err := framework.InstallCRDs(ctx, cp.AdminConfig(), filepath.Join(root, "deploy", "crds")); err != nil {
		return err
	}
	fmt.Printf("local-up: control plane at %s ready in %s; CRDs installed\n", cp.Host, time.Since(start).Round(time.Millisecond))
	return admission(ctx, cp, webhookPort)
}

// admission wires admission as a real install does: the nodeset webhooks
// (failurePolicy Ignore, aimed at a nodeset-controller on this machine, with a
// fresh serving certificate) and the admission policies (Dedicated tenancy,
// kubelet Node claims).
func admission(ctx context.Context, cp *framework.ControlPlane, webhookPort int) error {
	webhookFlags, err := framework.InstallWebhook(ctx, cp, webhookPort)
	if err != nil {
		return err
	}
	if err := framework.InstallAdmissionPolicy(ctx, cp); err != nil {
		return err
	}
	fmt.Printf("local-up: webhooks registered at https://127.0.0.1:%d; admission policies applied\n", webhookPort)
	fmt.Printf(`
  export KUBECONFIG=%s
  export PATH=%s:$PATH    # the kubectl built with this control plane
  kubectl get nodeclasses,nodesets,nodes

  run nodeset-controller with: %s
  logs:  %s
  stop:  hack/local-down.sh
`, cp.KubeconfigPath, cp.BinDir, strings.Join(webhookFlags, " "), filepath.Join(cp.Dir, "logs"))
	return nil
}
