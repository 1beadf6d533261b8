package api

import (
	"errors"
	"strings"
)

// The Idempotency-Key header, as draft-ietf-httpapi-idempotency-key-header-07
// writes it, is a Structured Field (RFC 8941) Item whose value is a String:
// Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324". The gateway
// takes that form and the bare one clients have always sent
// (Idempotency-Key: 8e03978e-…) as the same key: the String's content, or
// the bare value. Whether the key is valid (1 to 255 visible ASCII
// characters) is the flow's to judge, on the key either form names.

// keyOfField is the key one Idempotency-Key field names: the content of a
// Structured Field String (a value opening with a double quote), or the
// value itself.
func keyOfField(v string) (string, error) {
	if !strings.HasPrefix(v, `"`) {
		return v, nil
	}
	return sfString(v)
}

// sfString parses v, a whole field value, as an RFC 8941 String
// (section 4.2.5): a double quote, characters from space to tilde with \"
// and \\ as the only escapes, a closing double quote, and nothing after it
// (no parameters: the draft defines none).
func sfString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || v[i] != '"' && v[i] != '\\' {
				return "", errors.New(`a backslash in a quoted key escapes only " and \`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", errors.New("nothing may follow a quoted key's closing quote")
			}
			return b.String(), nil
		case c < ' ' || c > '~':
			return "", errors.New("a quoted key holds only visible ASCII characters")
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("a quoted key needs its closing quote")
}
