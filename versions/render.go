package versions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Kind is what an answer holds, as far as versions go.
type Kind int

// Kinds of answer.
const (
	// KindNone holds nothing any version changed (a problem, an endpoint,
	// a delivery): it is answered as it is.
	KindNone Kind = iota
	KindPayment
	KindRefund
	KindEvent
	KindCancellation
	KindPaymentList
	KindRefundList
	KindEventList
)

// object is a JSON object with its members in their order.
type object struct {
	keys []string
	vals []json.RawMessage
}

func (o *object) get(k string) (json.RawMessage, bool) {
	if i := slices.Index(o.keys, k); i >= 0 {
		return o.vals[i], true
	}
	return nil, false
}

func (o *object) set(k string, v json.RawMessage) {
	if i := slices.Index(o.keys, k); i >= 0 {
		o.vals[i] = v
	}
}

// rename gives member from the name to, where it stands.
func (o *object) rename(from, to string) {
	if i := slices.Index(o.keys, from); i >= 0 {
		o.keys[i] = to
	}
}

func parseObject(b []byte) (*object, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	t, err := dec.Token()
	if err != nil {
		return nil, false, err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, false, nil // not an object (null, say): nothing to change
	}
	o := &object{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false, err
		}
		o.keys, o.vals = append(o.keys, k), append(o.vals, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, false, err
	}
	return o, true, nil
}

func (o *object) encode() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k) // a member's name: plain ASCII
		b.Write(kb)
		b.WriteByte(':')
		b.Write(o.vals[i])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// A change is what one version changed: how an object of each kind it
// touched, rendered in the version before it, is rendered in it (up), and
// back (down), and how the OpenAPI document of the version before reads.
type change struct {
	version Version
	summary string
	up      map[Kind]func(*object)
	down    map[Kind]func(*object)
	doc     func(doc map[string]any)
}

// changes are every version's changes, oldest first: the one place they
// are written.
var changes = []change{
	{
		version: V20261202,
		summary: "A refund's failure_code is named decline_code, as a payment's is.",
		up:      map[Kind]func(*object){KindRefund: func(o *object) { o.rename("failure_code", "decline_code") }},
		down:    map[Kind]func(*object){KindRefund: func(o *object) { o.rename("decline_code", "failure_code") }},
		doc:     func(d map[string]any) { renameProperty(d, "Refund", "decline_code", "failure_code") },
	},
}

// Change is one version's change, as the docs list them.
type Change struct {
	Version Version
	Summary string
}

// Changes lists what each version changed, oldest first.
func Changes() []Change {
	out := make([]Change, len(changes))
	for i, c := range changes {
		out[i] = Change{c.version, c.summary}
	}
	return out
}

// Render is body, an answer holding one object of kind rendered in from,
// as version to renders it: byte for byte the same when nothing between
// them changed the kind. Trailing white space (a newline) is kept.
func Render(body []byte, kind Kind, from, to Version) ([]byte, error) {
	if from == to || kind == KindNone {
		return body, nil
	}
	steps := between(from, to)
	if len(steps) == 0 {
		return body, nil
	}
	trimmed := bytes.TrimRight(body, " \n\r\t")
	out, err := apply(trimmed, kind, steps)
	if err != nil {
		return nil, fmt.Errorf("rendering %s in %s: %w", from, to, err)
	}
	return append(out, body[len(trimmed):]...), nil
}

// step is one change's transforms of one direction.
type step map[Kind]func(*object)

// between are the steps that take a rendering in from to to: ups oldest
// first, or downs newest first.
func between(from, to Version) []step {
	var out []step
	if from < to {
		for _, c := range changes {
			if c.version > from && c.version <= to {
				out = append(out, c.up)
			}
		}
		return out
	}
	for _, c := range slices.Backward(changes) {
		if c.version > to && c.version <= from {
			out = append(out, c.down)
		}
	}
	return out
}

// touches reports whether any step changes kind, or what kind holds.
func touches(steps []step, kind Kind) bool {
	for _, s := range steps {
		for k := range s {
			if k == kind || contains(kind, k) {
				return true
			}
		}
	}
	return false
}

// contains reports whether an object of kind outer holds one of inner.
func contains(outer, inner Kind) bool {
	switch outer {
	case KindEvent:
		return inner == KindPayment || inner == KindRefund
	case KindCancellation:
		return inner == KindPayment
	case KindPaymentList:
		return inner == KindPayment
	case KindRefundList:
		return inner == KindRefund
	case KindEventList:
		return inner == KindPayment || inner == KindRefund || inner == KindEvent
	}
	return false
}

func apply(b []byte, kind Kind, steps []step) ([]byte, error) {
	if !touches(steps, kind) {
		return b, nil
	}
	o, ok, err := parseObject(b)
	if err != nil || !ok {
		return b, err
	}
	var inner struct {
		member string
		kind   Kind
		list   bool
	}
	switch kind {
	case KindEvent:
		inner.member = "data"
		if t, ok := o.get("object_type"); ok {
			switch string(t) {
			case `"payment"`:
				inner.kind = KindPayment
			case `"refund"`:
				inner.kind = KindRefund
			}
		}
	case KindCancellation:
		inner.member, inner.kind = "payment", KindPayment
	case KindPaymentList:
		inner.member, inner.kind, inner.list = "data", KindPayment, true
	case KindRefundList:
		inner.member, inner.kind, inner.list = "data", KindRefund, true
	case KindEventList:
		inner.member, inner.kind, inner.list = "data", KindEvent, true
	}
	if inner.member != "" && inner.kind != KindNone {
		if v, ok := o.get(inner.member); ok {
			var nv []byte
			var err error
			if inner.list {
				nv, err = applyList(v, inner.kind, steps)
			} else {
				nv, err = apply(v, inner.kind, steps)
			}
			if err != nil {
				return nil, err
			}
			o.set(inner.member, nv)
		}
	}
	for _, s := range steps {
		if f := s[kind]; f != nil {
			f(o)
		}
	}
	return o.encode(), nil
}

func applyList(b []byte, kind Kind, steps []step) ([]byte, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil || items == nil {
		return b, err
	}
	var out bytes.Buffer
	out.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			out.WriteByte(',')
		}
		nb, err := apply(it, kind, steps)
		if err != nil {
			return nil, err
		}
		out.Write(nb)
	}
	out.WriteByte(']')
	return out.Bytes(), nil
}

// Document is the OpenAPI document of the latest version, doc, as version
// v reads: its info.version says v.
func Document(doc []byte, v Version) ([]byte, error) {
	if v == Latest {
		return doc, nil
	}
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	for _, c := range slices.Backward(changes) {
		if c.version > v && c.doc != nil {
			c.doc(d)
		}
	}
	if info, ok := d["info"].(map[string]any); ok {
		info["version"] = string(v)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// renameProperty renames a property of a schema of the document, in its
// properties and its required list.
func renameProperty(d map[string]any, schema, from, to string) {
	comps, _ := d["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	s, _ := schemas[schema].(map[string]any)
	if props, ok := s["properties"].(map[string]any); ok {
		if p, ok := props[from]; ok {
			delete(props, from)
			props[to] = p
		}
	}
	if req, ok := s["required"].([]any); ok {
		for i, r := range req {
			if r == from {
				req[i] = to
			}
		}
	}
}
