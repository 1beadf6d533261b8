package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"gateway/errs"
)

// A request body must mean one thing. encoding/json alone lets the last of
// two equal keys win, matches field names whatever their case, turns
// invalid UTF-8 (and escaped lone surrogates) into U+FFFD, and reads null
// as a field left out (or an empty string, in a map of strings), so that
// bodies which differ would share a fingerprint and one could replay
// another, and {"amount": null} would refund the whole remainder.
// strictJSON refuses all of that before the body is decoded: no value in a
// body is null (the API has no nullable input); a field without a value is
// left out.

// strictJSON checks raw for invalid text, for null values and for keys
// that say a thing twice: in the body's top object (whose fields are those
// of the struct body points to) a key in another case than its field's, or
// two keys equal but for case; in nested objects two equal keys. It returns a 4xx
// *errs.Error naming the problem, or nil; syntax errors are left to the
// decoder. One pass over the bytes, allocating only for escaped keys: it
// runs on every request, replays included.
func strictJSON(raw []byte, body any) error {
	if !utf8.Valid(raw) {
		return &errs.Error{Code: errs.CodeInvalid,
			Message: fmt.Sprintf("the request body is not valid UTF-8 (at byte %d)", invalidUTF8At(raw))}
	}
	sc := jsonScan{b: raw, fields: jsonFields(body)}
	sc.value(0, "")
	return sc.err
}

// jsonScan walks a JSON text; it stops at the first problem (err) or at
// anything that is not JSON (bad), which the decoder then reports.
type jsonScan struct {
	b      []byte
	i      int
	fields []string
	err    error
	bad    bool
}

func (s *jsonScan) stopped() bool { return s.err != nil || s.bad }

func (s *jsonScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *jsonScan) value(depth int, path string) {
	s.ws()
	if s.i >= len(s.b) {
		s.bad = true
		return
	}
	if path != "" && s.null() { // a null body is the decoder's to refuse
		field := strings.TrimSuffix(strings.TrimSuffix(path, "[]"), ".")
		s.err = fieldProblem(field, "must not be null: leave the field out when it has no value")
		return
	}
	switch s.b[s.i] {
	case '{':
		s.object(depth, path)
	case '[':
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return
		}
		for !s.stopped() {
			s.value(depth+1, path+"[]")
			if s.closes(']') {
				return
			}
		}
	case '"':
		s.str()
	default: // a number, true, false or null: the decoder judges it
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return
			}
			s.i++
		}
	}
}

func (s *jsonScan) object(depth int, path string) {
	s.i++ // {
	var keys [24]string
	seen := keys[:0]
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return
	}
	for !s.stopped() {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			s.bad = true
			return
		}
		key, ok := s.str()
		if !ok {
			return
		}
		if depth == 0 {
			for _, f := range s.fields {
				if f != key && strings.EqualFold(f, key) {
					s.err = fieldProblem(key, "is not a known field (field names are case-sensitive: "+strconv.Quote(f)+")")
					return
				}
			}
		}
		for _, k := range seen {
			if k == key || depth == 0 && strings.EqualFold(k, key) {
				s.err = fieldProblem(path+key, "appears more than once; send each field once")
				return
			}
		}
		seen = append(seen, key)
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			s.bad = true
			return
		}
		s.i++
		s.value(depth+1, path+key+".")
		if s.closes('}') {
			return
		}
	}
}

// null reports whether the value at s.i is null.
func (s *jsonScan) null() bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		return false
	}
	end := s.i + len("null")
	if end == len(s.b) {
		return true
	}
	switch s.b[end] {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return true
	}
	return false // nullx: not JSON, the decoder's to report
}

// closes reads what follows a member of an array or object: a comma (more
// to come, false) or its closer (true); anything else marks the text bad.
func (s *jsonScan) closes(closer byte) bool {
	s.ws()
	if s.i >= len(s.b) {
		s.bad = true
		return true
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return false
	case closer:
		s.i++
		return true
	}
	s.bad = true
	return true
}

// str reads the string at s.i and returns its value (decoded only when it
// holds escapes); it refuses an escaped lone UTF-16 surrogate.
func (s *jsonScan) str() (string, bool) {
	start := s.i
	s.i++
	escaped := false
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			s.i++
			raw := s.b[start:s.i]
			if !escaped {
				return string(raw[1 : len(raw)-1]), true
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				s.bad = true
				return "", false
			}
			return v, true
		case '\\':
			escaped = true
			if s.i+1 >= len(s.b) {
				s.bad = true
				return "", false
			}
			if s.b[s.i+1] != 'u' {
				s.i += 2
				continue
			}
			if at, lone := s.surrogate(); lone {
				s.err = &errs.Error{Code: errs.CodeInvalid,
					Message: fmt.Sprintf("the request body escapes a lone UTF-16 surrogate, which is no character (at byte %d)", at)}
				return "", false
			}
		default:
			s.i++
		}
	}
	s.bad = true
	return "", false
}

// surrogate steps over the \u escape at s.i (and the low half following a
// high one); lone reports a surrogate half without its other half.
func (s *jsonScan) surrogate() (at int, lone bool) {
	at = s.i
	r, ok := hex4(s.b, s.i+2)
	if !ok {
		s.i += 2 // malformed: the decoder says where
		return at, false
	}
	s.i += 6
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return at, true
	case r >= 0xD800 && r <= 0xDBFF:
		if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
			if lo, ok := hex4(s.b, s.i+2); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				s.i += 6
				return at, false
			}
		}
		return at, true
	}
	return at, false
}

func fieldProblem(field, reason string) error {
	return &errs.Error{Code: errs.CodeInvalid, Message: "the request body is invalid",
		Fields: []errs.FieldError{{Field: field, Reason: reason}}}
}

// jsonFieldNames caches jsonFields per type.
var jsonFieldNames sync.Map // reflect.Type → []string

// jsonFields lists the JSON names of the fields of the struct v points to.
func jsonFields(v any) []string {
	t := reflect.TypeOf(v)
	if names, ok := jsonFieldNames.Load(t); ok {
		return names.([]string)
	}
	st := t
	for st != nil && st.Kind() == reflect.Pointer {
		st = st.Elem()
	}
	var out []string
	if st != nil && st.Kind() == reflect.Struct {
		for i := range st.NumField() {
			f := st.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			out = append(out, name)
		}
	}
	jsonFieldNames.Store(t, out)
	return out
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[at:at+4]), 16, 32)
	return rune(n), err == nil
}
