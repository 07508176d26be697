package guardtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

func mustAccept(ctx context.Context, s Subject, r string, tok fence.Token, v string) error {
	if err := s.Write(ctx, r, tok, v); err != nil {
		return fmt.Errorf("Write(%q, token %d) refused, want accepted: %w", r, tok, err)
	}
	return nil
}

// checkFirstWrite checks that a resource never written is not found, and a first write
// with any valid token is accepted and read back.
func checkFirstWrite(ctx context.Context, s Subject, cfg Config) error {
	r := resourceName(cfg, "first", 0)
	if err := expectState(ctx, s, r, resState{}, "before any write"); err != nil {
		return err
	}
	if err := mustAccept(ctx, s, r, 5, "v5"); err != nil {
		return err
	}
	if err := expectState(ctx, s, r, found("v5", 5), "after first write"); err != nil {
		return err
	}
	// A first write with the largest token is accepted too.
	r2 := resourceName(cfg, "first", 1)
	if err := mustAccept(ctx, s, r2, math.MaxInt64, "max"); err != nil {
		return err
	}
	return expectState(ctx, s, r2, found("max", math.MaxInt64), "after first write with MaxInt64")
}

// checkHigher checks that a higher token is accepted and replaces the value.
func checkHigher(ctx context.Context, s Subject, cfg Config) error {
	r := resourceName(cfg, "higher", 0)
	for _, step := range []struct {
		tok fence.Token
		v   string
	}{{3, "a"}, {9, "b"}, {10, "c"}, {1 << 40, "d"}} {
		if err := mustAccept(ctx, s, r, step.tok, step.v); err != nil {
			return err
		}
		if err := expectState(ctx, s, r, found(step.v, step.tok), fmt.Sprintf("after token %d", step.tok)); err != nil {
			return err
		}
	}
	return nil
}

// checkEqual checks that the same token writing again is accepted (a retry of the same
// acquisition) and replaces the value.
func checkEqual(ctx context.Context, s Subject, cfg Config) error {
	r := resourceName(cfg, "equal", 0)
	if err := mustAccept(ctx, s, r, 4, "first"); err != nil {
		return err
	}
	if err := mustAccept(ctx, s, r, 4, "second"); err != nil {
		return err
	}
	if err := expectState(ctx, s, r, found("second", 4), "after equal token"); err != nil {
		return err
	}
	if err := mustAccept(ctx, s, r, 4, "second"); err != nil {
		return fmt.Errorf("identical retry: %w", err)
	}
	return expectState(ctx, s, r, found("second", 4), "after identical retry")
}

// checkStaleErr verifies err is a stale refusal naming presented and highest.
func checkStaleErr(err error, r string, presented, highest fence.Token) error {
	if err == nil {
		return fmt.Errorf("Write(%q, token %d) accepted after token %d, want stale refusal", r, presented, highest)
	}
	if !errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("Write(%q, token %d) below mark %d: error %q does not match fence.ErrStale", r, presented, highest, err.Error())
	}
	se, ok := fence.IsStale(err)
	if !ok {
		return fmt.Errorf("Write(%q, token %d): error %q matches ErrStale but errors.As *fence.StaleError fails", r, presented, err.Error())
	}
	if se.Presented != presented || se.Highest != highest {
		return fmt.Errorf("Write(%q, token %d): StaleError{Presented: %d, Highest: %d}, want {%d, %d}", r, presented, se.Presented, se.Highest, presented, highest)
	}
	if se.Resource != r {
		return fmt.Errorf("Write(%q, token %d): StaleError.Resource = %q", r, presented, se.Resource)
	}
	if errors.Is(err, fence.ErrBusy) {
		return fmt.Errorf("Write(%q, token %d): stale error also matches fence.ErrBusy", r, presented)
	}
	return nil
}

// checkStale checks that a lower token is refused with a *fence.StaleError naming both
// tokens, and the state is unchanged; the mark still admits its own token.
func checkStale(ctx context.Context, s Subject, cfg Config) error {
	r := resourceName(cfg, "stale", 0)
	if err := mustAccept(ctx, s, r, 10, "ten"); err != nil {
		return err
	}
	for _, tok := range []fence.Token{9, 7, 1} {
		if err := checkStaleErr(s.Write(ctx, r, tok, fmt.Sprintf("stale-%d", tok)), r, tok, 10); err != nil {
			return err
		}
		if err := expectState(ctx, s, r, found("ten", 10), fmt.Sprintf("after stale token %d", tok)); err != nil {
			return err
		}
	}
	if err := mustAccept(ctx, s, r, 12, "twelve"); err != nil {
		return err
	}
	if err := checkStaleErr(s.Write(ctx, r, 11, "eleven"), r, 11, 12); err != nil {
		return err
	}
	if err := expectState(ctx, s, r, found("twelve", 12), "after stale token 11"); err != nil {
		return err
	}
	// Marks are per resource: a low token on another resource is fine.
	r2 := resourceName(cfg, "stale", 1)
	if err := mustAccept(ctx, s, r2, 2, "other"); err != nil {
		return fmt.Errorf("marks leak across resources: %w", err)
	}
	return expectState(ctx, s, r, found("twelve", 12), "after a write to another resource")
}

// checkInvalidTokens checks that tokens 0 and negative are refused with errors matching
// fence.ErrInvalidToken, on fresh and on written resources, changing nothing.
func checkInvalidTokens(ctx context.Context, s Subject, cfg Config) error {
	r := resourceName(cfg, "badtoken", 0)
	fresh := resourceName(cfg, "badtoken", 1)
	if err := mustAccept(ctx, s, r, 5, "keep"); err != nil {
		return err
	}
	var errs []error
	for _, tok := range []fence.Token{0, -1, -5, math.MinInt64} {
		for _, res := range []string{r, fresh} {
			err := s.Write(ctx, res, tok, "bad")
			switch {
			case err == nil:
				errs = append(errs, fmt.Errorf("Write(%q, token %d) accepted, want fence.ErrInvalidToken", res, tok))
			case !errors.Is(err, fence.ErrInvalidToken):
				errs = append(errs, fmt.Errorf("Write(%q, token %d): error %q does not match fence.ErrInvalidToken", res, tok, err.Error()))
			case errors.Is(err, fence.ErrStale):
				errs = append(errs, fmt.Errorf("Write(%q, token %d): invalid-token error also matches fence.ErrStale", res, tok))
			}
		}
	}
	if err := expectState(ctx, s, r, found("keep", 5), "after invalid tokens"); err != nil {
		errs = append(errs, err)
	}
	if err := expectState(ctx, s, fresh, resState{}, "after invalid tokens on a fresh resource"); err != nil {
		errs = append(errs, err)
	}
	// The mark was not touched: token 5 is still admitted, 4 still refused.
	if err := mustAccept(ctx, s, r, 5, "again"); err != nil {
		errs = append(errs, err)
	}
	if err := checkStaleErr(s.Write(ctx, r, 4, "four"), r, 4, 5); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// invalidResources returns the resource names every guard must refuse.
func invalidResources() []string {
	return []string{
		"",
		"a\x00b",
		"line\nbreak",
		"tab\there",
		"del\x7f",
		"\xff\xfe",
		strings.Repeat("x", fence.MaxResourceLen+1),
	}
}

// checkInvalidResources checks that bad resource names are refused with errors matching
// fence.ErrInvalidResource, and nothing is stored under them or elsewhere.
func checkInvalidResources(ctx context.Context, s Subject, cfg Config) error {
	good := resourceName(cfg, "badres", 0)
	if err := mustAccept(ctx, s, good, 3, "keep"); err != nil {
		return err
	}
	var errs []error
	for _, name := range append(invalidResources(), cfg.BadResources...) {
		err := s.Write(ctx, name, 9, "bad")
		switch {
		case err == nil:
			errs = append(errs, fmt.Errorf("Write(%q) accepted, want fence.ErrInvalidResource", name))
		case !errors.Is(err, fence.ErrInvalidResource):
			errs = append(errs, fmt.Errorf("Write(%q): error %q does not match fence.ErrInvalidResource", name, err.Error()))
		}
		if _, _, found, err := s.Read(ctx, name); err == nil && found {
			errs = append(errs, fmt.Errorf("Read(%q) finds a value after a refused write", name))
		}
	}
	if err := expectState(ctx, s, good, found("keep", 3), "after invalid resources"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkFailedWrite checks that, when the write callback fails, Fence reports an error
// that is not a stale refusal, nothing is stored, and the mark is not
// raised. Needs a FailingWriter.
func checkFailedWrite(ctx context.Context, s Subject, cfg Config) error {
	fw, ok := s.(FailingWriter)
	if !ok {
		return &unsupportedError{Interface: "FailingWriter"}
	}
	r := resourceName(cfg, "failed", 0)
	if err := mustAccept(ctx, s, r, 5, "five"); err != nil {
		return err
	}
	err := fw.WriteFailing(ctx, r, 9)
	if err == nil {
		return fmt.Errorf("WriteFailing(%q, 9) returned nil, want the callback's error", r)
	}
	if errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("WriteFailing(%q, 9) above the mark reported stale: %w", r, err)
	}
	if err := expectState(ctx, s, r, found("five", 5), "after a failed write"); err != nil {
		return err
	}
	if err := mustAccept(ctx, s, r, 7, "seven"); err != nil {
		return fmt.Errorf("mark raised by a failed write: %w", err)
	}
	if err := expectState(ctx, s, r, found("seven", 7), "after token 7"); err != nil {
		return err
	}
	// A failing write on a fresh resource creates no mark either.
	fresh := resourceName(cfg, "failed", 1)
	if err := fw.WriteFailing(ctx, fresh, 50); err == nil {
		return fmt.Errorf("WriteFailing(%q, 50) returned nil", fresh)
	}
	if err := mustAccept(ctx, s, fresh, 1, "one"); err != nil {
		return fmt.Errorf("mark created by a failed write: %w", err)
	}
	return expectState(ctx, s, fresh, found("one", 1), "after token 1 on a fresh resource")
}
