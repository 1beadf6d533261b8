package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	gateway "gateway/clients/go"
)

// ErrNotEvent: a verified payload that is not an event (no id, type or
// object, or trailing data).
var ErrNotEvent = errors.New("webhook: the payload is not an event")

// ParseEvent decodes a delivery's payload, verified first (Verify): its
// signature is over these exact bytes, so decode nothing before it.
// Fields the gateway adds later are ignored.
func ParseEvent(payload []byte) (gateway.Event, error) {
	var ev gateway.Event
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&ev); err != nil {
		return gateway.Event{}, fmt.Errorf("%w: %w", ErrNotEvent, err)
	}
	if dec.More() {
		return gateway.Event{}, fmt.Errorf("%w: data after the event", ErrNotEvent)
	}
	if ev.ID == "" || ev.Type == "" || ev.ObjectID == "" || len(ev.Data) == 0 {
		return gateway.Event{}, fmt.Errorf("%w: it lacks its id, type, object or data", ErrNotEvent)
	}
	return ev, nil
}
