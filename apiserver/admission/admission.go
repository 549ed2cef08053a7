package admission

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Operation is what a request does to its object, as admission names it.
type Operation = admissionv1.Operation

// The operations admission sees.
const (
	Create  = admissionv1.Create
	Update  = admissionv1.Update
	Delete  = admissionv1.Delete
	Connect = admissionv1.Connect
)

// operations are the operations in the order the chain indexes them.
var operations = [...]Operation{Create, Update, Delete, Connect}

func opIndex(op Operation) int {
	for i, o := range operations {
		if o == op {
			return i
		}
	}
	return -1
}

// Attributes are what a plugin learns of the request under admission, as
// upstream's admission.Attributes. The API server's own implementation
// carries more (the resource's rules, the write in progress) for the
// plugins it defines itself.
type Attributes interface {
	GetOperation() Operation
	GetResource() schema.GroupVersionResource
	// GetSubresource is "" for the object itself.
	GetSubresource() string
	GetNamespace() string
	GetName() string
	// GetObject is the object written (nil on delete); a mutating plugin
	// changes it in place.
	GetObject() runtime.Object
	// GetOldObject is the stored object an update or delete replaces;
	// nil on create and connect.
	GetOldObject() runtime.Object
	IsDryRun() bool
}

// Plugin is one admission plugin: Name is upstream's name for it; Handles
// says which operations it wants. A plugin implements MutationInterface,
// ValidationInterface or both.
type Plugin interface {
	Name() string
	Handles(op Operation) bool
}

// MutationInterface is a plugin that may change the object (or refuse
// it) in the mutating phase.
type MutationInterface interface {
	Plugin
	Admit(ctx context.Context, a Attributes) error
}

// ValidationInterface is a plugin that judges the object, unchanged, in
// the validating phase.
type ValidationInterface interface {
	Plugin
	Validate(ctx context.Context, a Attributes) error
}

// Steps are the server's own handling of the object that runs inside
// admission, where the chain's Prepare and Validate entries say: its
// kind's strategy preparing it (or, for a delete, the request's
// preconditions checked), and its kind's validation.
type Steps interface {
	Prepare(ctx context.Context) error
	Validate(ctx context.Context) error
}

// step is a list entry that stands for one of the Steps.
type step struct {
	name     string
	validate bool
	ops      []Operation
}

func (s *step) Name() string { return s.name }

func (s *step) Handles(op Operation) bool {
	for _, o := range s.ops {
		if o == op {
			return true
		}
	}
	return false
}

// PrepareStep marks where, in the mutating phase of ops, the object is
// prepared (Steps.Prepare).
func PrepareStep(ops ...Operation) Plugin {
	return &step{name: "(prepare)", ops: ops}
}

// ValidateStep marks where, in the validating phase of ops, the object is
// validated (Steps.Validate).
func ValidateStep(ops ...Operation) Plugin {
	return &step{name: "(validate)", validate: true, ops: ops}
}

// entry is one call of a phase: a plugin's, or a step's.
type entry struct {
	mutate   MutationInterface
	validate ValidationInterface
	step     *step
}

// Chain runs an ordered list of plugins as kube-apiserver does: every
// mutating plugin that handles the operation, in list order, then every
// validating one, in list order. The first refusal ends admission.
type Chain struct {
	names []string
	// phases[op] are the calls of each operation's mutating and
	// validating phases, worked out once.
	phases [len(operations)][2][]entry
}

// NewChain builds the chain of plugins, in that order.
func NewChain(plugins ...Plugin) *Chain {
	c := &Chain{}
	for _, p := range plugins {
		c.names = append(c.names, p.Name())
		m, isMutating := p.(MutationInterface)
		v, isValidating := p.(ValidationInterface)
		st, isStep := p.(*step)
		if !isMutating && !isValidating && !isStep {
			panic(fmt.Sprintf("admission plugin %s neither mutates nor validates", p.Name()))
		}
		for i, op := range operations {
			if !p.Handles(op) {
				continue
			}
			switch {
			case isStep && st.validate:
				c.phases[i][1] = append(c.phases[i][1], entry{step: st})
			case isStep:
				c.phases[i][0] = append(c.phases[i][0], entry{step: st})
			}
			if isMutating {
				c.phases[i][0] = append(c.phases[i][0], entry{mutate: m})
			}
			if isValidating {
				c.phases[i][1] = append(c.phases[i][1], entry{validate: v})
			}
		}
	}
	return c
}

// Names are the chain's entries, in order.
func (c *Chain) Names() []string { return c.names }

// Run admits a: the mutating phase, then the validating phase. steps may
// be nil when the request has none (a connect).
func (c *Chain) Run(ctx context.Context, a Attributes, steps Steps) error {
	i := opIndex(a.GetOperation())
	if i < 0 {
		return fmt.Errorf("admission: unknown operation %q", a.GetOperation())
	}
	for _, e := range c.phases[i][0] {
		var err error
		switch {
		case e.step != nil:
			if steps != nil {
				err = steps.Prepare(ctx)
			}
		default:
			err = e.mutate.Admit(ctx, a)
		}
		if err != nil {
			return err
		}
	}
	for _, e := range c.phases[i][1] {
		var err error
		switch {
		case e.step != nil:
			if steps != nil {
				err = steps.Validate(ctx)
			}
		default:
			err = e.validate.Validate(ctx, a)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
