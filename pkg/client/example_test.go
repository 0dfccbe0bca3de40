package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/client"
)

// An orchestrator follows a job to Succeeded, downloads its verified
// artifacts and cancels another job after a flush. Reads go through the
// kubeconfig's API server (the read API); an orchestrator inside the
// cluster may read from the binding Service instead, with
// Options{ReadURL: "https://tether-control-plane.tether-system.svc:8443"}.
func Example() {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()

	wb, err := c.WaitFor(ctx, "team-a", "llm-finetune", tetherv1.PhaseSucceeded)
	var failed *client.PhaseError
	if errors.As(err, &failed) {
		fmt.Println("the job failed:", failed.Reason, failed.Message)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	artifacts, err := c.Artifacts(ctx, wb)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range artifacts {
		if _, err := c.DownloadFile(ctx, wb, a.Path, a.MD5+".bin"); err != nil {
			fmt.Println(err) // a *DigestError when the stored object changed
		}
	}

	for _, cmd := range []string{client.Flush, client.Cancel} {
		id, err := c.Send(ctx, "team-a", "other-job", cmd)
		if err != nil {
			fmt.Println(err)
			return
		}
		if _, err := c.WaitCommand(ctx, "team-a", "other-job", id); err != nil {
			fmt.Println(err) // a *CommandError when a node refused it
			return
		}
	}
}

// A downloaded artifact whose bytes do not match its manifest is refused.
func ExampleDigestError() {
	err := &client.DigestError{Path: "ckpt/step-100.pt", WantMD5: "0cc175b9c0f1b6a831c399e269772661", GotMD5: "92eb5ffee6ae2fec3ad71c777531578f",
		WantSize: 1, GotSize: 1}
	fmt.Println(err)
	// Output: artifact ckpt/step-100.pt: MD5 92eb5ffee6ae2fec3ad71c777531578f, the manifest lists 0cc175b9c0f1b6a831c399e269772661: the stored object was changed; refusing it
}
