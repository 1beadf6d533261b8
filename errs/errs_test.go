package errs_test

import (
	"errors"
	"fmt"
	"testing"

	"gateway/errs"
)

func TestError(t *testing.T) {
	cause := errors.New("connection refused")
	tests := []struct {
		name      string
		err       *errs.Error
		wantText  string
		wantCause error
	}{
		{"without cause", &errs.Error{Code: errs.CodeNotFound, Message: "payment not found"},
			"not_found: payment not found", nil},
		{"with cause", &errs.Error{Code: errs.CodePSPUnavailable, Message: "retry", Err: cause},
			"psp_unavailable: retry: connection refused", cause},
		{"Errorf", errs.Errorf(errs.CodeInvalid, "field %s is %d", "x", 3),
			"invalid_request: field x is 3", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.wantText {
				t.Errorf("Error() = %q, want %q", got, tt.wantText)
			}
			if got := tt.err.Unwrap(); got != tt.wantCause {
				t.Errorf("Unwrap() = %v, want %v", got, tt.wantCause)
			}
			if tt.wantCause != nil && !errors.Is(tt.err, tt.wantCause) {
				t.Errorf("errors.Is(err, cause) = false")
			}
		})
	}
	t.Run("Errorf keeps the message client-safe", func(t *testing.T) {
		e := errs.Errorf(errs.CodeInFlight, "wait %ds", 1)
		if e.Code != errs.CodeInFlight || e.Message != "wait 1s" || e.Err != nil {
			t.Errorf("Errorf = %+v", e)
		}
	})
}

func TestErrorCode(t *testing.T) {
	inFlight := &errs.Error{Code: errs.CodeInFlight, Message: "m"}
	tests := []struct {
		name string
		err  error
		want errs.Code
	}{
		{"error", inFlight, errs.CodeInFlight},
		{"wrapped", fmt.Errorf("service: %w", inFlight), errs.CodeInFlight},
		{"joined", errors.Join(errors.New("other"), inFlight), errs.CodeInFlight},
		{"plain error", errors.New("boom"), errs.CodeInternal},
		{"sentinel", errs.ErrNotFound, errs.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errs.CodeOf(tt.err); got != tt.want {
				t.Errorf("CodeOf(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestWrap(t *testing.T) {
	cause := errors.New("connection refused")
	t.Run("nil stays nil", func(t *testing.T) {
		var err error
		errs.Wrap(&err, "Store.Claim(%s)", "pay_1")
		if err != nil {
			t.Fatalf("Wrap(nil) = %v", err)
		}
	})
	t.Run("a cause is prefixed with the operation", func(t *testing.T) {
		err := fmt.Errorf("begin: %w", cause)
		errs.Wrap(&err, "Store.Claim(%s)", "pay_1")
		if got, want := err.Error(), "Store.Claim(pay_1): begin: connection refused"; got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}
		if !errors.Is(err, cause) {
			t.Error("the cause is lost")
		}
	})
	t.Run("an *Error takes the operation as its Op and stays on top", func(t *testing.T) {
		e := &errs.Error{Code: errs.CodeNotFound, Message: "payment not found"}
		var err error = e
		errs.Wrap(&err, "Service.Payment")
		got, ok := err.(*errs.Error)
		if !ok {
			t.Fatalf("Wrap turned an *Error into %T", err)
		}
		if got.Op != "Service.Payment" || got.Error() != "Service.Payment: not_found: payment not found" {
			t.Errorf("Wrap = %+v (%q)", got, got.Error())
		}
		if e.Op != "" {
			t.Error("Wrap changed the caller's *Error in place")
		}
		errs.Wrap(&err, "api.getPayment")
		if want := "api.getPayment: Service.Payment: not_found: payment not found"; err.Error() != want {
			t.Errorf("a second Wrap = %q, want %q", err.Error(), want)
		}
		if errs.CodeOf(err) != errs.CodeNotFound {
			t.Errorf("CodeOf = %q", errs.CodeOf(err))
		}
	})
}

func TestInternal(t *testing.T) {
	if e := errs.Internal(errors.New("boom")); e.Code != errs.CodeInternal || e.Message != "internal error" {
		t.Errorf("Internal(plain) = %+v", e)
	}
	if e := errs.Internal(fmt.Errorf("read: %w", unavailable{})); e.Code != errs.CodeUnavailable || e.RetryAfter <= 0 {
		t.Errorf("Internal(unavailable) = %+v", e)
	}
}

type unavailable struct{}

func (unavailable) Error() string     { return "database unavailable" }
func (unavailable) Unavailable() bool { return true }
