package engine

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
)

// Args checks the input of a guard's calls before any I/O. The zero value
// is not usable: set Name.
type Args struct {
	// Name prefixes every error: "redisguard".
	Name string
	// Strict refuses a resource outside the claim's scope, and a claim
	// without one (fence.CheckScope).
	Strict bool
	// Rec records each refusal as a span marked not sent. Nil records
	// nothing.
	Rec *guardobs.Recorder
	// Resource checks a resource name; nil means fence.ValidateResource.
	// A guard's own rules return a *fence.ResourceError.
	Resource func(resource string) error
}

// NilArgument is the error of a call given a nil argument (what names
// it: "nil ctx", "Fence with nil write"). It matches fence.ErrNilArgument.
func (a *Args) NilArgument(resource, what string) error {
	return fmt.Errorf("%s: %q: %s: %w", a.Name, resource, what, fence.ErrNilArgument)
}

// CheckResource applies the guard's resource rules.
func (a *Args) CheckResource(resource string) error {
	if a.Resource != nil {
		return a.Resource(resource)
	}
	return fence.ValidateResource(resource)
}

// Read checks the input of a read (Get, Mark): ctx not nil and live, and
// the resource name. Reads record nothing.
func (a *Args) Read(ctx context.Context, resource string) error {
	if ctx == nil {
		return a.NilArgument(resource, "nil ctx")
	}
	if err := a.CheckResource(resource); err != nil {
		return err
	}
	return fence.ContextError(ctx)
}

// Explicit checks a write under the claim c, passed explicitly.
func (a *Args) Explicit(ctx context.Context, resource string, c fence.Claim) error {
	if ctx == nil {
		return a.NilArgument(resource, "nil ctx")
	}
	err := a.check(ctx, resource, c)
	a.Rec.Refused(ctx, resource, c, err)
	return err
}

// Token returns, checked, the claim of fence.Guard's Fence under token:
// fence.ClaimFor(ctx, token).
func (a *Args) Token(ctx context.Context, resource string, token fence.Token) (fence.Claim, error) {
	if ctx == nil {
		return fence.Claim{}, a.NilArgument(resource, "nil ctx")
	}
	c := fence.ClaimFor(ctx, token)
	return c, a.Explicit(ctx, resource, c)
}

// Context returns, checked, the claim ctx carries (fence.ClaimFromContext;
// none: an error matching fence.ErrNoToken).
func (a *Args) Context(ctx context.Context, resource string) (fence.Claim, error) {
	if ctx == nil {
		return fence.Claim{}, a.NilArgument(resource, "nil ctx")
	}
	if err := a.CheckResource(resource); err != nil {
		a.Rec.Refused(ctx, resource, fence.Claim{}, err)
		return fence.Claim{}, err
	}
	c, err := fence.ClaimFromContext(ctx)
	if err != nil {
		err = fmt.Errorf("%s: %q: %w", a.Name, resource, err)
		a.Rec.Refused(ctx, resource, c, err)
		return fence.Claim{}, err
	}
	return c, a.Explicit(ctx, resource, c)
}

func (a *Args) check(ctx context.Context, resource string, c fence.Claim) error {
	if err := a.CheckResource(resource); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if a.Strict {
		if err := fence.CheckScope(resource, c); err != nil {
			return err
		}
	}
	if err := fence.ContextError(ctx); err != nil {
		return fmt.Errorf("%s: %q: %w", a.Name, resource, err)
	}
	return nil
}

// Claimed checks a call's input and runs do under its claim: the claim
// ctx carries when c is nil (Context), *c otherwise (Explicit). do is not
// called when the input is refused.
func (a *Args) Claimed(ctx context.Context, resource string, c *fence.Claim, do func(c fence.Claim) error) error {
	var claim fence.Claim
	var err error
	if c == nil {
		claim, err = a.Context(ctx, resource)
	} else {
		claim, err = *c, a.Explicit(ctx, resource, *c)
	}
	if err != nil {
		return err
	}
	return do(claim)
}

// Columns are the quoted column names of a row guard's config.
type Columns struct {
	Key, Data []string
	Token     string
	Run       string // "" without a run column
}

// QuoteColumns quotes the columns of a row guard's config (Key, Columns,
// TokenColumn and, when not empty, RunColumn) with quote, which is given the
// config field a name comes from, and refuses an empty Key and a column
// named twice with the *fence.ConfigError of source.
func QuoteColumns(source string, key, data []string, token, run string, quote func(field, name string) (string, error)) (Columns, error) {
	if len(key) == 0 {
		return Columns{}, &fence.ConfigError{Source: source, Field: "Key", Reason: "at least one column"}
	}
	seen := map[string]bool{}
	names := func(field string, names []string) ([]string, error) {
		out := make([]string, len(names))
		for i, n := range names {
			q, err := quote(field, n)
			if err != nil {
				return nil, err
			}
			if seen[n] {
				return nil, &fence.ConfigError{Source: source, Field: field, Reason: fmt.Sprintf("column %q named twice", n)}
			}
			seen[n] = true
			out[i] = q
		}
		return out, nil
	}
	var c Columns
	var err error
	if c.Key, err = names("Key", key); err != nil {
		return Columns{}, err
	}
	if c.Data, err = names("Columns", data); err != nil {
		return Columns{}, err
	}
	tok, err := names("TokenColumn", []string{token})
	if err != nil {
		return Columns{}, err
	}
	c.Token = tok[0]
	if run != "" {
		r, err := names("RunColumn", []string{run})
		if err != nil {
			return Columns{}, err
		}
		c.Run = r[0]
	}
	return c, nil
}
