package mutate

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/pkg/trainjob"
)

// TrainerShape is how the installed Trainer lets a TrainJob put a label on
// its JobSet, which is how a bound job's pods come to carry the label that
// routes them, and only them, to the pod webhook (docs/platform.md,
// "Failure policy").
type TrainerShape string

const (
	// ShapeRuntimePatches (Trainer v2.2+): a spec.runtimePatches entry whose
	// trainingRuntimeSpec.template.metadata.labels Trainer merges into the
	// JobSet's labels (pkg/runtime/core/trainingruntime.go, v2.3.0).
	ShapeRuntimePatches TrainerShape = "runtimePatches"
	// ShapeSpecLabels (Trainer v2.0, v2.1): spec.labels, which Trainer puts on
	// the JobSet (and only there: not on pod templates).
	ShapeSpecLabels TrainerShape = "specLabels"
)

// TrainerShapes tells the installed Trainer's shape.
type TrainerShapes interface {
	Shape(ctx context.Context) (TrainerShape, error)
}

// FixedShape is a TrainerShapes that always answers the same (tests).
type FixedShape TrainerShape

// Shape implements TrainerShapes.
func (f FixedShape) Shape(context.Context) (TrainerShape, error) { return TrainerShape(f), nil }

// TrainJobCRDName is the CRD whose schema tells the shape.
const TrainJobCRDName = "trainjobs.trainer.kubeflow.org"

// shapeTTL bounds how long a Trainer upgrade goes unnoticed.
const shapeTTL = 30 * time.Second

// CRDShapes reads the shape from the TrainJob CRD's schema (a GET of one
// named CRD, cached for shapeTTL): which of spec.runtimePatches and
// spec.labels the served version has.
type CRDShapes struct {
	Reader client.Reader

	mu      sync.Mutex
	shape   TrainerShape
	fetched time.Time
}

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// Shape implements TrainerShapes. A read error is returned only when no
// shape is known yet: the last one stays good across a brief API hiccup.
func (c *CRDShapes) Shape(ctx context.Context) (TrainerShape, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shape != "" && time.Since(c.fetched) < shapeTTL {
		return c.shape, nil
	}
	shape, err := c.read(ctx)
	switch {
	case err == nil:
		c.shape, c.fetched = shape, time.Now()
	case c.shape != "":
		return c.shape, nil
	}
	return shape, err
}

func (c *CRDShapes) read(ctx context.Context) (TrainerShape, error) {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(crdGVK)
	if err := c.Reader.Get(ctx, types.NamespacedName{Name: TrainJobCRDName}, crd); err != nil {
		return "", fmt.Errorf("reading CRD %s to learn how this Trainer labels JobSets: %w", TrainJobCRDName, err)
	}
	return ShapeOfCRD(crd)
}

// ShapeOfCRD tells the shape from the TrainJob CRD's served version
// (trainjob.GVK's).
func ShapeOfCRD(crd *unstructured.Unstructured) (TrainerShape, error) {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, ok := v.(map[string]any)
		if !ok || m["name"] != trainjob.GVK.Version {
			continue
		}
		props, _, _ := unstructured.NestedMap(m, "schema", "openAPIV3Schema", "properties", "spec", "properties")
		if _, ok := props["runtimePatches"]; ok {
			return ShapeRuntimePatches, nil
		}
		if _, ok := props["labels"]; ok {
			return ShapeSpecLabels, nil
		}
		return "", fmt.Errorf("CRD %s version %s has neither spec.runtimePatches (Trainer v2.2+) nor spec.labels (v2.0, v2.1): "+
			"Tether cannot route this Trainer's bound pods to its webhook; use a Trainer release from v2.0 to v2.3", TrainJobCRDName, trainjob.GVK.Version)
	}
	return "", fmt.Errorf("CRD %s serves no version %s", TrainJobCRDName, trainjob.GVK.Version)
}
