package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"gateway/payments"
)

// A request body must mean one thing. encoding/json alone lets the last of
// two equal keys win, matches field names whatever their case, and turns
// invalid UTF-8 (and escaped lone surrogates) into U+FFFD, so that bodies
// which differ would share a fingerprint and one could replay another.
// strictJSON refuses all of that before the body is decoded.

// strictJSON checks raw for invalid text and for keys that say a thing
// twice: in the body's top object (whose fields are those of the struct
// body points to) a key in another case than its field's, or two keys equal
// but for case; in nested objects two equal keys. It returns a 4xx
// *payments.Error naming the problem, or nil; syntax errors are left to the
// decoder.
func strictJSON(raw []byte, body any) error {
	if !utf8.Valid(raw) {
		return &payments.Error{Code: payments.CodeInvalid,
			Message: fmt.Sprintf("the request body is not valid UTF-8 (at byte %d)", invalidUTF8At(raw))}
	}
	if at := loneSurrogateAt(raw); at >= 0 {
		return &payments.Error{Code: payments.CodeInvalid,
			Message: fmt.Sprintf("the request body escapes a lone UTF-16 surrogate, which is no character (at byte %d)", at)}
	}
	fields := jsonFields(body)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var walk func(depth int, path string) error
	walk = func(depth int, path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('['):
			for dec.More() {
				if err := walk(depth+1, path+"[]"); err != nil {
					return err
				}
			}
			_, err := dec.Token()
			return err
		case json.Delim('{'):
			seen := map[string]string{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := kt.(string)
				name := path + key
				folded := key
				if depth == 0 {
					folded = strings.ToLower(key)
					if f, ok := fields[folded]; ok && f != key {
						return fieldProblem(key, "is not a known field (field names are case-sensitive: "+strconv.Quote(f)+")")
					}
				}
				if _, dup := seen[folded]; dup {
					return fieldProblem(name, "appears more than once; send each field once")
				}
				seen[folded] = key
				if err := walk(depth+1, name+"."); err != nil {
					return err
				}
			}
			_, err := dec.Token()
			return err
		}
		return nil
	}
	err := walk(0, "")
	var pe *payments.Error
	if errors.As(err, &pe) {
		return pe
	}
	return nil // malformed JSON: the decoder says where
}

func fieldProblem(field, reason string) error {
	return &payments.Error{Code: payments.CodeInvalid, Message: "the request body is invalid",
		Fields: []payments.FieldError{{Field: field, Reason: reason}}}
}

// jsonFields maps the lower-cased JSON names of the fields of the struct v
// points to, to their names.
func jsonFields(v any) map[string]string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := map[string]string{}
	if t == nil || t.Kind() != reflect.Struct {
		return out
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[strings.ToLower(name)] = name
	}
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

// loneSurrogateAt is the offset of a \u escape in a string of raw that
// encodes half of a UTF-16 surrogate pair without its other half, or -1.
func loneSurrogateAt(raw []byte) int {
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(raw) {
				return -1
			}
			if raw[i+1] != 'u' {
				i++
				continue
			}
			r, ok := hex4(raw, i+2)
			if !ok {
				return -1 // malformed: the decoder says where
			}
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return i
			case r >= 0xD800 && r <= 0xDBFF:
				if i+7 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
					if lo, ok := hex4(raw, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
						i += 11
						continue
					}
				}
				return i
			}
			i += 5
		}
	}
	return -1
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[at:at+4]), 16, 32)
	return rune(n), err == nil
}
