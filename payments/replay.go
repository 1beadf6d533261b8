package payments

import (
	"context"

	"gateway/idemkeys"
)

// ReplayBody answers a POST /payments from this process's cache when the
// request's body, as received (digest: its SHA-256), is byte for byte one
// already answered for the key: the same bytes are the same command, so
// parsing, validating and fingerprinting them again would only repeat what
// was decided. The replay is paced and logged as any other. ok is false
// when the caller must go the whole way (Create).
func (s *Service) ReplayBody(ctx context.Context, merchantID, key string, digest [32]byte) (out Outcome, ok bool) {
	if digest == ([32]byte{}) {
		return Outcome{}, false
	}
	ref := idemkeys.Ref{MerchantID: merchantID, Endpoint: EndpointCreatePayment, Key: key}
	e, ok := s.replays.Get(ref, s.cfg.Now())
	if !ok || e.Raw != digest {
		return Outcome{}, false
	}
	return s.replay(attempt{ref: ref, client: ctx}, e.SubjectID, e.Response), true
}
