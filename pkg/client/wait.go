package client

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// PhaseError is a binding that ended in a phase other than the one waited for.
type PhaseError struct {
	Binding string
	Want    tetherv1.WorkerBindingPhase
	Got     tetherv1.WorkerBindingPhase
	Reason  string
	Message string
	// Before is what had not happened when the binding ended (e.g. a
	// command's acknowledgement), if that is what was waited for.
	Before string
}

func (e *PhaseError) Error() string {
	if e.Before != "" {
		return fmt.Sprintf("WorkerBinding %s ended %s (%s: %s) before %s", e.Binding, e.Got, e.Reason, e.Message, e.Before)
	}
	return fmt.Sprintf("WorkerBinding %s ended %s (%s: %s), not %s", e.Binding, e.Got, e.Reason, e.Message, e.Want)
}

// ErrBindingNotFound is wrapped by a wait that ended before the binding
// waited for existed.
var ErrBindingNotFound = errors.New("which does not exist (is its TrainJob labeled tether.dev/bind=true?)")

// Final reports whether a binding's phase is final: Succeeded or Failed.
// Only Failed/Cancelled is ever left, by a cancelled job that is resumed
// (its Workload activated again, its TrainJob unsuspended), which starts a
// new attempt.
func Final(p tetherv1.WorkerBindingPhase) bool {
	return p == tetherv1.PhaseSucceeded || p == tetherv1.PhaseFailed
}

// WaitFor waits until the binding namespace/name is in phase and returns it.
// A binding that ends in another final phase is a *PhaseError; ctx bounds
// the wait.
func (c *Client) WaitFor(ctx context.Context, namespace, name string, phase tetherv1.WorkerBindingPhase) (*tetherv1.WorkerBinding, error) {
	return c.WaitUntil(ctx, namespace, name, func(wb *tetherv1.WorkerBinding) (bool, error) {
		switch p := wb.Status.Phase; {
		case p == phase:
			return true, nil
		case Final(p):
			return false, &PhaseError{Binding: namespace + "/" + name, Want: phase, Got: p, Reason: wb.Status.Reason, Message: wb.Status.Message}
		}
		return false, nil
	})
}

// WaitUntil watches the binding namespace/name until done returns true or
// an error. It reads the binding first, so a condition already met returns
// at once; a binding that does not exist yet is waited for; when the API
// server ends a watch, it reads and watches again.
func (c *Client) WaitUntil(ctx context.Context, namespace, name string, done func(*tetherv1.WorkerBinding) (bool, error)) (*tetherv1.WorkerBinding, error) {
	for {
		wb, err := c.Get(ctx, namespace, name)
		switch {
		case apierrors.IsNotFound(err):
			// Not created yet (the TrainJob was just submitted): the
			// watch below starts with the binding's ADDED event.
		case err != nil:
			return nil, fmt.Errorf("waiting for WorkerBinding %s/%s: %w", namespace, name, err)
		default:
			if ok, err := done(wb); ok || err != nil {
				return wb, err
			}
		}
		w, err := c.kube.Watch(ctx, &tetherv1.WorkerBindingList{}, crclient.InNamespace(namespace),
			crclient.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
		if err != nil {
			return nil, fmt.Errorf("watching WorkerBinding %s/%s: %w", namespace, name, err)
		}
		got, ok, err := drain(ctx, w, done)
		w.Stop()
		if ok || err != nil {
			return got, err
		}
		if ctx.Err() != nil {
			if wb == nil {
				return nil, fmt.Errorf("waiting for WorkerBinding %s/%s, %w: %w", namespace, name, ErrBindingNotFound, ctx.Err())
			}
			return nil, fmt.Errorf("waiting for WorkerBinding %s/%s (phase %s): %w", namespace, name, wb.Status.Phase, ctx.Err())
		}
	}
}

// drain reads w's events until done, the watch ends (ok false, nil error)
// or ctx ends.
func drain(ctx context.Context, w watch.Interface, done func(*tetherv1.WorkerBinding) (bool, error)) (*tetherv1.WorkerBinding, bool, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, false, nil
		case ev, open := <-w.ResultChan():
			if !open {
				return nil, false, nil
			}
			wb, isWB := ev.Object.(*tetherv1.WorkerBinding)
			if !isWB {
				continue // a watch error: read again and watch anew
			}
			if ev.Type == watch.Deleted {
				return nil, false, fmt.Errorf("WorkerBinding %s/%s was deleted (its TrainJob is gone)", wb.Namespace, wb.Name)
			}
			if ok, err := done(wb); ok || err != nil {
				return wb, ok, err
			}
		}
	}
}
